package server

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
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
	// guardLocal, when set (a daemon on loopback), wraps the routes outside
	// the API in its Host check (localGuard).
	guardLocal func(http.Handler) http.Handler
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
// loopback (guardLocal).
func (a *httpAPI) local(next http.Handler) http.Handler {
	if a.guardLocal == nil {
		return next
	}
	return a.guardLocal(next)
}

// localGuard is the Host check of the routes outside the API for a daemon
// listening on listen: the API's (api.HostGuard) on loopback, none beyond
// it, where the network reaches them directly and orchestrators and
// scrapers address them by whatever name they have.
func localGuard(listen string, extra []string) (func(http.Handler) http.Handler, error) {
	if !isLoopback(listen) {
		return nil, nil
	}
	return api.HostGuard(listen, extra)
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
