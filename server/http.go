package server

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcptrail/mcptrail/api"
)

// HTTP server limits: a client that sends its headers or body slowly, or
// keeps an idle connection, is cut off instead of holding a connection.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute // request bodies carry catalogs and policies
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

type httpAPI struct {
	log   *slog.Logger
	m     *metrics
	ready atomic.Bool
	// live reports whether ingest can currently make progress (NATS
	// connected); readiness needs it as well as a started loop.
	live func() bool
	// commands is the typed API (nil: the daemon runs no commands).
	commands http.Handler
	// localHost, when set (a daemon on loopback), is the Host check of the
	// routes outside the API (api.LocalHosts).
	localHost func(host string) bool
	// health, when set, reports whether ingestion works (false with the
	// reason: a stream being recreated, commits failing, a store deleted).
	health func() (ok bool, reason string)
}

func (a *httpAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", a.local(http.HandlerFunc(a.healthz)))
	mux.Handle("GET /readyz", a.local(http.HandlerFunc(a.readyz)))
	// Health, readiness and metrics stay open for orchestrators and
	// scrapers: they carry counts, never events or credentials.
	mux.Handle("GET /metrics", a.local(promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelError)})))
	if a.commands != nil {
		mux.Handle("/api/", a.commands)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.IdentHeader, "1")
		mux.ServeHTTP(w, r)
	})
}

// local refuses a request whose Host is not the daemon's, when it listens on
// loopback (localHost).
func (a *httpAPI) local(next http.Handler) http.Handler {
	if a.localHost == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.localHost(r.Host) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "Host " + strconv.Quote(r.Host) + " is not this daemon's address: add it to http.allowed_hosts if it is a name of this host"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *httpAPI) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *httpAPI) isReady() bool {
	if a.health != nil {
		if ok, _ := a.health(); !ok {
			return false
		}
	}
	return a.ready.Load() && (a.live == nil || a.live())
}

func (a *httpAPI) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		answer := map[string]string{"status": "starting"}
		if a.health != nil {
			if ok, reason := a.health(); !ok {
				answer["reason"] = reason // e.g. waiting for the stream
			}
		}
		writeJSON(w, http.StatusServiceUnavailable, answer)
		return
	}
	if a.live != nil && !a.live() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "nats disconnected"})
		return
	}
	if a.health != nil {
		if ok, reason := a.health(); !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ingesting", "reason": reason})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// isLoopback reports whether a listen address only takes connections from
// this host.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
