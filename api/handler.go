package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// Backend runs requests against the daemon's open database. cmd/mcptrail
// provides it, with the same code the CLI runs on the file.
type Backend interface {
	// Database is the absolute path of the database the daemon holds.
	Database() string
	// Run executes one request, writing what the CLI would print to
	// out.Stdout and out.Stderr and any output folder into out.Dir, and
	// returns the CLI's exit code.
	Run(ctx context.Context, req Request, out Output) int
}

// Output is where a request's results go.
type Output struct {
	Stdout, Stderr io.Writer
	// Dir is a folder the daemon made for this request alone, holding the
	// request's uploads; empty when the request writes no folder. What the
	// command writes there goes back to the client as files.
	Dir string
	// Truncate marks a query answer cut at query.max_rows or max_bytes.
	Truncate func()
}

// Options configure the handler.
type Options struct {
	Backend Backend
	// Ready reports whether ingestion runs, for the status endpoint.
	Ready func() bool
	// Token is required as "Authorization: Bearer <token>" on every
	// endpoint but Hello. It must not be empty.
	Token string
	// Listen is http.listen: requests must name it (or a loopback alias
	// of its port, or one of AllowedHosts) as their Host, and a browser's
	// Origin must match the same.
	Listen       string
	AllowedHosts []string
	Log          *slog.Logger
	// Concurrency bounds the requests that run at once (default 2); health
	// and metrics never wait for them.
	Concurrency int
	// MaxBody bounds a request body (default 32 MiB: catalogs, policies and
	// previous reports travel inside).
	MaxBody int64
}

// DefaultMaxBody is the default request body limit.
const DefaultMaxBody = 32 << 20

// IdentHeader marks every answer of an mcptrail daemon.
const IdentHeader = "X-Mcptrail"

type handler struct {
	o     Options
	hosts map[string]bool
	slots chan struct{}
	mux   *http.ServeMux
}

// NewHandler serves the API under /api/v1/.
func NewHandler(o Options) (http.Handler, error) {
	if o.Token == "" {
		return nil, errors.New("api: no token: the API is never open without one")
	}
	if o.Backend == nil {
		return nil, errors.New("api: no backend")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 2
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	hosts, err := allowedHosts(o.Listen, o.AllowedHosts)
	if err != nil {
		return nil, err
	}
	h := &handler{o: o, hosts: hosts, slots: make(chan struct{}, o.Concurrency), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET "+PathHello, h.hello)
	h.mux.Handle("GET "+PathStatus, h.auth(http.HandlerFunc(h.status)))
	for _, p := range Paths() {
		h.mux.Handle("POST "+p, h.auth(http.HandlerFunc(h.run)))
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(IdentHeader, "1")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if refuseHost(w, r, h.hosts) {
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(origin) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("Origin %q may not call the API: cross-site requests are refused", origin))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// HostGuard wraps a daemon's routes outside the API (health, readiness,
// metrics) in the API's Host check: a request whose Host is not the listen
// address, a loopback alias of it or one of http.allowed_hosts gets 403, so
// that a web page that rebinds its own name to 127.0.0.1 reads none of them.
func HostGuard(listen string, extra []string) (func(http.Handler) http.Handler, error) {
	hosts, err := allowedHosts(listen, extra)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !refuseHost(w, r, hosts) {
				next.ServeHTTP(w, r)
			}
		})
	}, nil
}

// refuseHost answers 403 to a request whose Host is not one of hosts (DNS
// rebinding) and says whether it did.
func refuseHost(w http.ResponseWriter, r *http.Request, hosts map[string]bool) bool {
	if hosts[strings.ToLower(r.Host)] {
		return false
	}
	writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not this daemon's address: add it to http.allowed_hosts if it is a name of this host", r.Host))
	return true
}

// allowedHosts are the Host values a request may carry: the listen address,
// its loopback aliases when the daemon listens on loopback or on every
// interface, and http.allowed_hosts (a name without a port takes the listen
// port).
func allowedHosts(listen string, extra []string) (map[string]bool, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen %q: want host:port: %w", listen, err)
	}
	out := map[string]bool{strings.ToLower(net.JoinHostPort(host, port)): true}
	ip := net.ParseIP(host)
	if host == "" || host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
			out[net.JoinHostPort(h, port)] = true
		}
	}
	for _, e := range extra {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(e); err == nil {
			out[e] = true
			continue
		}
		if strings.ContainsAny(e, "/ @") {
			return nil, fmt.Errorf("http.allowed_hosts: %q is not a host name or host:port", e)
		}
		out[net.JoinHostPort(strings.Trim(e, "[]"), port)] = true
	}
	return out, nil
}

func (h *handler) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	host := strings.ToLower(u.Host)
	if _, _, err := net.SplitHostPort(host); err != nil {
		return false // a default port is never the daemon's
	}
	return h.hosts[host]
}

// auth requires the bearer token, compared in constant time.
func (h *handler) auth(next http.Handler) http.Handler {
	return RequireToken(h.o.Token, next)
}

// RequireToken serves next only to requests that carry token as
// "Authorization: Bearer <token>" (compared in constant time), and answers
// 401 to the others: every endpoint of the daemon that takes data or runs
// commands (the API, the OTLP receiver) uses it.
func RequireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !BearerOK(r.Header.Get("Authorization"), token) {
			Unauthorized(w, "mcptrail", "the daemon's token (http.token, or the file http.token_file)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// BearerOK reports whether an Authorization value is "Bearer <token>",
// compared in constant time. An empty token never matches.
func BearerOK(authorization, token string) bool {
	if token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(authorization), []byte("Bearer "+token)) == 1
}

func (h *handler) hello(w http.ResponseWriter, r *http.Request) {
	challenge, err := hex.DecodeString(r.URL.Query().Get("challenge"))
	if err != nil || len(challenge) < 16 || len(challenge) > 64 {
		writeError(w, http.StatusBadRequest, "want ?challenge= with 16 to 64 random bytes in hex")
		return
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		writeError(w, http.StatusInternalServerError, "no local address to prove the token for")
		return
	}
	writeJSON(w, http.StatusOK, Hello{Service: "mcptrail", API: "v1", Proof: Proof(h.o.Token, challenge, local.String())})
}

func (h *handler) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Status{Database: h.o.Backend.Database(), Ready: h.o.Ready != nil && h.o.Ready()})
}

func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "send the request as Content-Type: application/json")
		return
	}
	req, err := DecodeRequest(r.URL.Path, http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBody))
			return
		}
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := CheckRequest(req, h.o.Backend.Database()); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrOtherDatabase) {
			status = http.StatusConflict
		}
		writeError(w, status, err.Error())
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	case <-r.Context().Done():
		return
	}
	fw := newFrameWriter(w)
	code := execute(r.Context(), h.o.Backend, h.o.Log, req, fw)
	fw.exit(code)
}

// Paths are the endpoints that run a command (POST).
func Paths() []string {
	return []string{PathQuery, PathQueries, PathRecommend, PathReplay, PathReport, PathCatalogImp,
		PathCatalogList, PathSuppress, PathUnsuppress, PathSuppressions, PathPolicies, PathForget, PathFindings, PathBacktest}
}

// DecodeRequest reads the one JSON object of a request for the endpoint
// path, refusing unknown fields: the same rules over every transport.
func DecodeRequest(path string, r io.Reader) (Request, error) {
	req := newRequest(path)
	if req == nil {
		return nil, fmt.Errorf("no endpoint %s", path)
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return nil, fmt.Errorf("bad request body for %s: %w (see docs/API.md)", path, err)
	}
	if dec.More() {
		return nil, errors.New("bad request body: one JSON object only")
	}
	return req, nil
}

// ErrOtherDatabase is CheckRequest's answer to a request meant for another
// database.
var ErrOtherDatabase = errors.New("this daemon holds another database")

// CheckRequest refuses a request that names another database than the
// daemon's, or uploads a file outside its output folder.
func CheckRequest(req Request, database string) error {
	if db := req.CommonFields().Database; db != "" && filepath.Clean(db) != database {
		return ErrOtherDatabase
	}
	for _, f := range req.uploads() {
		if !filepath.IsLocal(f.Name) {
			return fmt.Errorf("upload %q: want a relative path inside the output folder", f.Name)
		}
	}
	return nil
}

// Execute runs a checked request on the backend and writes its whole answer
// (the frames of an HTTP answer, ending with the exit frame) into w: for a
// transport that sends the answer as one message.
func Execute(ctx context.Context, b Backend, log *slog.Logger, req Request, w io.Writer) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fw := newBufferWriter(w)
	fw.exit(execute(ctx, b, log, req, fw))
}

// execute runs the request with its output folder, recovering from panics:
// a failing command answers exit 1 and never takes the daemon down.
func execute(ctx context.Context, b Backend, log *slog.Logger, req Request, fw *frameWriter) (code int) {
	out := Output{Stdout: fw.stream(false), Stderr: fw.stream(true), Truncate: fw.truncated}
	defer func() {
		if p := recover(); p != nil {
			log.Error("api request panicked", "path", req.Path(), "panic", p, "stack", string(debug.Stack()))
			fmt.Fprintf(out.Stderr, "mcptrail: internal error in the daemon: %v\n", p)
			code = 1
		}
	}()
	if req.wantsOut() {
		dir, err := os.MkdirTemp("", "mcptrail-api-")
		if err != nil {
			fmt.Fprintf(out.Stderr, "mcptrail: the daemon cannot make a working folder: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		seeded, err := seed(dir, req.uploads())
		if err != nil {
			fmt.Fprintf(out.Stderr, "mcptrail: %v\n", err)
			return 1
		}
		out.Dir = dir
		defer func() {
			if err := sendFolder(dir, seeded, fw); err != nil {
				fmt.Fprintf(out.Stderr, "mcptrail: %v\n", err)
				code = max(code, 1)
			}
		}()
	}
	return b.Run(ctx, req, out)
}

// seed writes the uploads into the request's folder and remembers them, so
// that only what the command wrote goes back.
func seed(dir string, files []File) (map[string][]byte, error) {
	seeded := map[string][]byte{}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, fmt.Errorf("upload %s: %w", f.Name, err)
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			return nil, fmt.Errorf("upload %s: %w", f.Name, err)
		}
		seeded[filepath.ToSlash(f.Name)] = f.Content
	}
	return seeded, nil
}

// sendFolder sends every regular file the command wrote, in lexical order.
func sendFolder(dir string, seeded map[string][]byte, fw *frameWriter) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read back %s: %w", rel, err)
		}
		if old, ok := seeded[rel]; ok && bytes.Equal(old, data) {
			return nil
		}
		fw.file(File{Name: rel, Content: data})
		return nil
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Unauthorized answers 401 with the bearer challenge of realm and an error
// naming the token to send.
func Unauthorized(w http.ResponseWriter, realm, token string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	writeError(w, http.StatusUnauthorized, "unauthorized: send "+token+" as \"Authorization: Bearer <token>\"")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Error: msg})
}
