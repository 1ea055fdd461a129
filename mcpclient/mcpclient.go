// Package mcpclient reads a live MCP server's tools/list: it starts a command
// line as a child process (stdio) or dials a streamable HTTP endpoint, runs
// the MCP handshake with the official Go SDK and pages through tools/list by
// nextCursor. Each page is kept as the server sent it: the SDK's typed Tool
// writes readOnlyHint=false for a hint the server never gave, and the
// classifier reads an absent hint differently from a false one. It touches
// no store and knows nothing of catalogs.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of what a server may send, so that one that pages forever or
// answers without end fails instead of filling memory: MaxTools tools,
// MaxPages tools/list pages (empty pages count), MaxListBytes of tools/list
// results in all, MaxResponseBytes in one HTTP response.
const (
	MaxTools         = 100_000
	MaxPages         = 10_000
	MaxListBytes     = 256 << 20
	MaxResponseBytes = 64 << 20
)

// The bounds a test lowers.
var maxPages, maxListBytes = MaxPages, MaxListBytes

// terminateAfter is how long a stdio server has to exit after its standard
// input is closed before it gets SIGTERM (and, as long again later, SIGKILL).
const terminateAfter = 2 * time.Second

// Source is the server to read: a command line (stdio) or a URL (streamable
// HTTP) with the headers every request carries. Header values are
// credentials: nothing here logs them, stores them or puts them in an error.
type Source struct {
	Command []string
	URL     string
	Header  http.Header
	// Stderr takes the child process's standard error (nil: discarded).
	Stderr io.Writer
}

// Describe names the source without credentials, for messages and records:
// the command's program name, or the URL without user info, query or
// fragment.
func (s Source) Describe() string {
	if len(s.Command) > 0 {
		return "stdio " + filepath.Base(s.Command[0])
	}
	u, err := url.Parse(s.URL)
	if err != nil || u.Host == "" {
		return "an unparsable URL"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// Result is a server's whole tools/list.
type Result struct {
	// Tools are the tools of every page, each as the server sent it.
	Tools []json.RawMessage
	// Pages is how many tools/list requests it took.
	Pages int
	// ServerName is the name the server gave in its initialize answer.
	ServerName string
}

// Document is the tools/list result as one JSON document, {"server": S,
// "tools": [...]} (server omitted when empty), indented.
func (r *Result) Document(server string) ([]byte, error) {
	doc := struct {
		Server string            `json:"server,omitempty"`
		Tools  []json.RawMessage `json:"tools"`
	}{server, r.Tools}
	if doc.Tools == nil {
		doc.Tools = []json.RawMessage{}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// ToolsList connects to src, runs the MCP handshake and reads every page of
// tools/list. Every blocking step honours ctx; a child process is stopped
// before it returns, whatever happened.
func ToolsList(ctx context.Context, src Source) (*Result, error) {
	if (len(src.Command) == 0) == (src.URL == "") {
		return nil, errors.New("mcpclient: give a command or a URL")
	}
	rec := &recorder{}
	var transport mcp.Transport
	if len(src.Command) > 0 {
		// Killed when ctx ends (the timeout) or when this function returns,
		// should the orderly close below not have stopped it.
		procCtx, stop := context.WithCancel(ctx)
		defer stop()
		cmd := exec.CommandContext(procCtx, src.Command[0], src.Command[1:]...)
		defer ownProcessGroup(cmd)() // after the orderly close below
		cmd.Stderr = src.Stderr
		cmd.WaitDelay = terminateAfter
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateAfter}
	} else {
		u, err := url.Parse(src.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--url %s: want an http:// or https:// URL of the server's MCP endpoint", src.Describe())
		}
		transport = &mcp.StreamableClientTransport{
			Endpoint:             src.URL,
			HTTPClient:           &http.Client{Transport: &headerTransport{header: src.Header, rec: rec}, CheckRedirect: sameOrigin(u)},
			DisableStandaloneSSE: true,
			MaxRetries:           -1,
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcptrail", Version: "1"}, nil)
	session, err := client.Connect(ctx, &recordingTransport{Transport: transport, rec: rec}, nil)
	if err != nil {
		return nil, explain(ctx, src, "initialize", err, rec)
	}
	defer session.Close()

	res := &Result{}
	if init := session.InitializeResult(); init != nil && init.ServerInfo != nil {
		res.ServerName = init.ServerInfo.Name
	}
	params := &mcp.ListToolsParams{}
	seen := map[string]bool{}
	listBytes := 0
	for {
		page, err := session.ListTools(ctx, params)
		if err != nil {
			return nil, explain(ctx, src, "tools/list", err, rec)
		}
		res.Pages++
		raw, ok := rec.takePage()
		if !ok {
			return nil, fmt.Errorf("%s: tools/list page %d arrived without its raw result", src.Describe(), res.Pages)
		}
		var body struct {
			Tools []json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, fmt.Errorf("%s: tools/list page %d: %w", src.Describe(), res.Pages, err)
		}
		res.Tools = append(res.Tools, body.Tools...)
		if len(res.Tools) > MaxTools {
			return nil, fmt.Errorf("%s lists more than %d tools: not a catalog mcptrail can take", src.Describe(), MaxTools)
		}
		if listBytes += len(raw); listBytes > maxListBytes {
			return nil, fmt.Errorf("%s: tools/list results over %d bytes in all: not a catalog mcptrail can take", src.Describe(), maxListBytes)
		}
		if res.Pages >= maxPages && page.NextCursor != "" {
			return nil, fmt.Errorf("%s: tools/list goes on past %d pages: not a catalog mcptrail can take", src.Describe(), maxPages)
		}
		if page.NextCursor == "" {
			return res, nil
		}
		if seen[page.NextCursor] {
			return nil, fmt.Errorf("%s: tools/list page %d gives a nextCursor it gave before: the server's paging loops", src.Describe(), res.Pages)
		}
		seen[page.NextCursor] = true
		params.Cursor = page.NextCursor
	}
}

// explain turns an SDK error into one that says what failed and what to do.
// The SDK's own text stays at the end, for the details.
func explain(ctx context.Context, src Source, step string, err error, rec *recorder) error {
	return scrub(src, explainRaw(ctx, src, step, err, rec))
}

// scrubbed is an error whose text keeps no credential of the URL.
type scrubbed struct {
	err  error
	text string
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub hides what a URL may carry as a credential (its user info, its
// query: ?api_key=…) from err's text, which the transports' errors quote
// whole; Describe names the server without them.
func scrub(src Source, err error) error {
	if err == nil || src.URL == "" {
		return err
	}
	u, perr := url.Parse(src.URL)
	text := strings.ReplaceAll(err.Error(), src.URL, src.Describe())
	if perr == nil {
		if u.RawQuery != "" {
			text = strings.ReplaceAll(text, "?"+u.RawQuery, "")
		}
		if u.User != nil {
			text = strings.ReplaceAll(text, u.User.String()+"@", "")
			text = strings.ReplaceAll(text, u.Redacted(), src.Describe())
		}
	}
	if text == err.Error() {
		return err
	}
	return &scrubbed{err: err, text: text}
}

func explainRaw(ctx context.Context, src Source, step string, err error, rec *recorder) error {
	what := src.Describe()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer to %s before the timeout: check that it is an MCP server and that it starts quickly, or raise --timeout", what, step)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s interrupted: %w", what, step, ctx.Err())
	}
	if len(src.Command) > 0 {
		var execErr *exec.Error
		var pathErr *fs.PathError
		if errors.As(err, &execErr) {
			return fmt.Errorf("cannot start %q: %v: check the --command line", src.Command[0], execErr.Err)
		}
		if errors.As(err, &pathErr) && pathErr.Op == "fork/exec" {
			return fmt.Errorf("cannot start %q: %v: check the --command line", src.Command[0], pathErr.Err)
		}
		if step == "initialize" {
			shown := ""
			if src.Stderr != nil {
				shown = " (its standard error is shown above)"
			}
			return fmt.Errorf("%s: the MCP initialize handshake failed: is the command an MCP server that speaks stdio?%s: %w", what, shown, err)
		}
		return fmt.Errorf("%s: %s failed: %w", what, step, err)
	}
	if status := rec.lastStatus(); status == http.StatusUnauthorized || status == http.StatusForbidden {
		return fmt.Errorf("%s refused the request (HTTP %d): pass its credentials with --header 'Authorization: Bearer TOKEN' (or the header it wants)", what, status)
	}
	if !rec.answered() {
		return fmt.Errorf("%s is not reachable: check the URL and that the server is running: %w", what, err)
	}
	if step == "initialize" {
		return fmt.Errorf("%s: the MCP initialize handshake failed: is the URL a streamable HTTP MCP endpoint (often ending in /mcp)? %w", what, err)
	}
	return fmt.Errorf("%s: %s failed: %w", what, step, err)
}

// recorder keeps what the transports see: the raw results of tools/list,
// the negotiated protocol version, and the last HTTP status.
type recorder struct {
	mu        sync.Mutex
	listIDs   map[jsonrpc.ID]bool
	initIDs   map[jsonrpc.ID]bool
	pages     []json.RawMessage
	version   string
	status    int
	responses int
}

func (r *recorder) wrote(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req.Method {
	case "tools/list":
		if r.listIDs == nil {
			r.listIDs = map[jsonrpc.ID]bool{}
		}
		r.listIDs[req.ID] = true
	case "initialize":
		if r.initIDs == nil {
			r.initIDs = map[jsonrpc.ID]bool{}
		}
		r.initIDs[req.ID] = true
	}
}

func (r *recorder) read(msg jsonrpc.Message) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.responses++
	if resp.Error != nil {
		return
	}
	if r.listIDs[resp.ID] {
		delete(r.listIDs, resp.ID)
		r.pages = append(r.pages, resp.Result)
	}
	if r.initIDs[resp.ID] {
		var init struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(resp.Result, &init) == nil {
			r.version = init.ProtocolVersion
		}
	}
}

// takePage returns the oldest tools/list result not yet taken.
func (r *recorder) takePage() (json.RawMessage, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pages) == 0 {
		return nil, false
	}
	p := r.pages[0]
	r.pages = r.pages[1:]
	return p, true
}

func (r *recorder) protocolVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

func (r *recorder) setStatus(code int) {
	r.mu.Lock()
	r.status = code
	r.mu.Unlock()
}

func (r *recorder) lastStatus() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// answered reports whether the server answered at all: an HTTP status or a
// JSON-RPC response.
func (r *recorder) answered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status != 0 || r.responses > 0
}

// recordingTransport shows every message of the connection to a recorder.
type recordingTransport struct {
	mcp.Transport
	rec *recorder
}

func (t *recordingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Connection: conn, rec: t.rec}, nil
}

type recordingConn struct {
	mcp.Connection
	rec *recorder
}

func (c *recordingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		c.rec.read(msg)
	}
	return msg, err
}

func (c *recordingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.rec.wrote(msg)
	return c.Connection.Write(ctx, msg)
}

// sameOrigin follows a redirect only within u's origin (scheme, host and
// port): headerTransport adds the user's headers to every request, so a
// redirect elsewhere (an endpoint's, or an open redirect on its host) would
// hand them to another host.
func sameOrigin(u *url.URL) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != u.Scheme || req.URL.Host != u.Host {
			return fmt.Errorf("redirected to another origin (%s://%s): not followed, so that the --header values go to %s://%s only",
				req.URL.Scheme, req.URL.Host, u.Scheme, u.Host)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// headerTransport adds the user's headers to every HTTP request. The
// recording connection hides the SDK's session hook from its HTTP
// connection, so the negotiated protocol version header is set here too, as
// the MCP specification asks after initialize.
type headerTransport struct {
	header http.Header
	rec    *recorder
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for name, values := range t.header {
		req.Header[name] = append([]string(nil), values...)
	}
	if v := t.rec.protocolVersion(); v != "" && req.Header.Get("Mcp-Protocol-Version") == "" {
		req.Header.Set("Mcp-Protocol-Version", v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		t.rec.setStatus(resp.StatusCode)
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxResponseBytes}
	}
	return resp, err
}

// limitedBody fails a response body past its bound: the SDK reads a JSON
// answer whole, however large.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("an HTTP response over %d MiB: not an MCP answer mcptrail can take", MaxResponseBytes>>20)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// ParseHeader reads a --header value, "Name: value". An error never repeats
// the value: it is usually a token.
func ParseHeader(h http.Header, s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
		return errors.New("a --header is not 'Name: value' (its value is not repeated here)")
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("--header %s: the value holds a line break", name)
	}
	h.Add(name, strings.TrimSpace(value))
	return nil
}
