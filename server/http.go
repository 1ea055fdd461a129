package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// RunPath is the endpoint that runs a CLI command in the daemon.
const RunPath = "/api/v1/run"

// identHeader marks responses of an mcptrail daemon, so that Forward does not
// mistake another service on http.listen for one.
const identHeader = "X-Mcptrail"

// maxRunBody bounds a run request: it only carries command-line arguments.
const maxRunBody = 1 << 20

// RunRequest is the body of POST /api/v1/run.
type RunRequest struct {
	Args []string `json:"args"`
}

// RunResponse is its answer: the exit code and everything the command
// printed, byte for byte.
type RunResponse struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

type api struct {
	token  string
	runner Runner
	log    *slog.Logger
	m      *metrics
	ready  atomic.Bool
	// live reports whether ingest can currently make progress (NATS
	// connected); readiness needs it as well as a started loop.
	live func() bool
	// health, when set, reports whether ingestion works (false with the
	// reason: a stream being recreated, commits failing, a store deleted).
	health func() (ok bool, reason string)
	// runMu runs one command at a time: a command shares process-wide state
	// (flags, configuration) with the daemon's command tree.
	runMu sync.Mutex
}

func (a *api) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.Handle("GET /metrics", a.auth(promhttp.HandlerFor(a.m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelError)})))
	mux.Handle("POST "+RunPath, a.auth(http.HandlerFunc(a.run)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(identHeader, "1")
		mux.ServeHTTP(w, r)
	})
}

// auth requires the bearer token when http.token is set. Health and
// readiness stay open for orchestrators' probes; they reveal nothing.
func (a *api) auth(next http.Handler) http.Handler {
	if a.token == "" {
		return next
	}
	want := []byte("Bearer " + a.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcptrail"`)
			http.Error(w, "unauthorized: send the http.token as \"Authorization: Bearer <token>\"", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
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

func (a *api) run(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRunBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, fmt.Sprintf(`bad request: want {"args": ["query", "NAME", ...]}: %v`, err), http.StatusBadRequest)
		return
	}
	if len(req.Args) == 0 {
		http.Error(w, `bad request: "args" is empty`, http.StatusBadRequest)
		return
	}
	if a.runner == nil {
		http.Error(w, "this daemon does not run commands", http.StatusNotImplemented)
		return
	}
	if req.Args[0] == "serve" {
		writeJSON(w, http.StatusOK, RunResponse{ExitCode: 2, Stderr: "mcptrail: serve cannot run inside the daemon\n"})
		return
	}
	var stdout, stderr bytes.Buffer
	code := a.runLocked(r.Context(), req.Args, &stdout, &stderr)
	writeJSON(w, http.StatusOK, RunResponse{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String()})
}

func (a *api) runLocked(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) (code int) {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("command panicked", "args", args, "panic", p)
			fmt.Fprintf(stderr, "mcptrail: internal error: %v\n", p)
			code = 1
		}
	}()
	t0 := time.Now()
	code = a.runner(ctx, args, stdout, stderr)
	a.log.Debug("ran command", "args", args, "exit_code", code, "duration", time.Since(t0))
	return code
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// baseURL turns a listen address into the URL a local client uses: a
// wildcard host is reached through loopback.
func baseURL(listen string) string {
	host, port, found := strings.Cut(listen, ":")
	if strings.HasPrefix(listen, "[") {
		if i := strings.LastIndex(listen, "]:"); i >= 0 {
			host, port, found = listen[:i+1], listen[i+2:], true
		}
	}
	if !found {
		return "http://" + listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "[::]":
		host = "[::1]"
	}
	return "http://" + host + ":" + port
}

// errUnauthorized is returned by Forward when the daemon refuses the token.
var errUnauthorized = errors.New("the daemon refused the request: http.token (MCPTRAIL_HTTP_TOKEN) is missing or wrong")
