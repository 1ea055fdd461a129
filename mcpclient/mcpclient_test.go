package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/mcptest"
)

func TestMain(m *testing.M) { mcptest.Main(m) }

// fixtureCommand re-executes this test binary as the fixture's stdio server,
// with the SDK told to leave false hints out as other servers do.
func fixtureCommand() []string {
	return []string{"env", "MCPGODEBUG=hintomitempty=1", mcptest.EnvServe + "=stdio", os.Args[0], "-test.run=^$"}
}

func toolNames(t *testing.T, res *Result) []string {
	t.Helper()
	var names []string
	for _, raw := range res.Tools {
		var tool struct{ Name string }
		require.NoError(t, json.Unmarshal(raw, &tool))
		names = append(names, tool.Name)
	}
	return names
}

func fixtureNames() []string {
	var names []string
	for _, tool := range mcptest.Tools() {
		names = append(names, tool.Name)
	}
	sort.Strings(names) // the SDK's server lists tools by name
	return names
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStdioPagesAndKeepsRawTools(t *testing.T) {
	res, err := ToolsList(ctxFor(t, 30*time.Second), Source{Command: fixtureCommand()})
	require.NoError(t, err)
	assert.Equal(t, fixtureNames(), toolNames(t, res))
	assert.Equal(t, 3, res.Pages, "5 tools, 2 a page")
	assert.Equal(t, mcptest.Name, res.ServerName)

	// The server left get_status's false hints out: the document must too,
	// or the classifier would read readOnlyHint=false as "writes".
	var status map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(res.Tools[slices.Index(fixtureNames(), "get_status")], &status))
	assert.JSONEq(t, `{"title":"Status"}`, string(status["annotations"]))

	doc, err := res.Document("vms")
	require.NoError(t, err)
	var parsed struct {
		Server string            `json:"server"`
		Tools  []json.RawMessage `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(doc, &parsed))
	assert.Equal(t, "vms", parsed.Server)
	assert.Len(t, parsed.Tools, 5)
}

func TestHTTPWithHeader(t *testing.T) {
	srv := httptest.NewServer(mcptest.HTTPHandler("Authorization", "Bearer s3cret"))
	defer srv.Close()
	h := http.Header{}
	require.NoError(t, ParseHeader(h, "Authorization: Bearer s3cret"))
	res, err := ToolsList(ctxFor(t, 30*time.Second), Source{URL: srv.URL, Header: h})
	require.NoError(t, err)
	assert.Equal(t, fixtureNames(), toolNames(t, res))
	assert.Equal(t, 3, res.Pages)
}

// --header values go to the --url's origin only: a redirect to another
// host (or port, or scheme) is not followed, so that an endpoint, or an
// open redirect on its host, cannot send the credentials elsewhere; a
// redirect within the origin is followed with them.
func TestHeadersGoToTheURLsOriginOnly(t *testing.T) {
	var leaked atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "" || r.Header.Get("Authorization") != "" {
			leaked.Store(true)
		}
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer other.Close()
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcptest.HTTPHandler("X-Api-Key", "k3y"))
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/mcp", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	h := http.Header{}
	require.NoError(t, ParseHeader(h, "X-Api-Key: k3y"))
	h.Set("Authorization", "Bearer s3cret")

	res, err := ToolsList(ctxFor(t, 30*time.Second), Source{URL: srv.URL + "/moved", Header: h})
	require.NoError(t, err)
	assert.Equal(t, fixtureNames(), toolNames(t, res))

	_, err = ToolsList(ctxFor(t, 10*time.Second), Source{URL: srv.URL + "/away", Header: h})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redirected to another origin")
	assert.NotContains(t, err.Error(), "k3y")
	assert.False(t, leaked.Load(), "the headers reached another host")
}

func TestHTTPErrorsSayWhatToDo(t *testing.T) {
	srv := httptest.NewServer(mcptest.HTTPHandler("Authorization", "Bearer s3cret"))
	defer srv.Close()
	notMCP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html>a web page</html>"))
	}))
	defer notMCP.Close()
	wrong := http.Header{"Authorization": {"Bearer wr0ng-t0ken"}}

	for name, tc := range map[string]struct {
		src  Source
		want []string
	}{
		"missing header": {Source{URL: srv.URL}, []string{"HTTP 401", "--header 'Authorization: Bearer TOKEN'"}},
		"wrong token":    {Source{URL: srv.URL, Header: wrong}, []string{"HTTP 401"}},
		"not reachable":  {Source{URL: "http://127.0.0.1:1/mcp"}, []string{"http://127.0.0.1:1/mcp is not reachable", "check the URL"}},
		"not MCP":        {Source{URL: notMCP.URL}, []string{"initialize handshake failed", "streamable HTTP MCP endpoint"}},
		"not a URL":      {Source{URL: "ftp://x/y"}, []string{"want an http:// or https:// URL"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ToolsList(ctxFor(t, 10*time.Second), tc.src)
			require.Error(t, err)
			t.Log(err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "wr0ng-t0ken")
		})
	}
}

func TestStdioErrorsSayWhatToDo(t *testing.T) {
	for name, tc := range map[string]struct {
		cmd  []string
		want string
	}{
		"no such program": {[]string{"/nonexistent/mcp-server"}, `cannot start "/nonexistent/mcp-server"`},
		"not MCP":         {[]string{"echo", "hello"}, "is the command an MCP server that speaks stdio?"},
		"exits at once":   {[]string{"true"}, "is the command an MCP server that speaks stdio?"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ToolsList(ctxFor(t, 10*time.Second), Source{Command: tc.cmd})
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A server that never answers runs into the timeout, and the child process
// is gone (reaped, not a zombie) when ToolsList returns.
func TestTimeoutStopsTheChild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	_, err := ToolsList(ctxFor(t, time.Second), Source{Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "before the timeout")
	assert.Contains(t, err.Error(), "--timeout")
	assert.Less(t, time.Since(start), 10*time.Second)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	assert.True(t, errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), "the child process %d still exists", pid)
}

// A server started through a wrapper (sh -c, npx) runs as a grandchild:
// it is gone too when the fetch ends.
func TestTimeoutStopsTheGrandchild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := ToolsList(ctxFor(t, time.Second), Source{Command: []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}})
	require.Error(t, err)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 5*time.Second, 20*time.Millisecond,
		"the grandchild process %d still exists", pid)
}

func TestSplitCommand(t *testing.T) {
	for line, want := range map[string][]string{
		`npx -y @scope/server`:           {"npx", "-y", "@scope/server"},
		`  server  --flag "a b"  'c d' `: {"server", "--flag", "a b", "c d"},
		`a\ b "q\"x" 'it''s' "\n"`:       {"a b", `q"x`, "its", `\n`},
		`cmd ""`:                         {"cmd", ""},
	} {
		got, err := SplitCommand(line)
		require.NoError(t, err, line)
		assert.Equal(t, want, got, line)
	}
	for _, bad := range []string{``, `   `, `a "b`, `a 'b`, `a\`} {
		_, err := SplitCommand(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseHeaderNeverRepeatsTheValue(t *testing.T) {
	h := http.Header{}
	require.NoError(t, ParseHeader(h, "X-Api-Key:  k3y "))
	assert.Equal(t, "k3y", h.Get("X-Api-Key"))
	for _, bad := range []string{"Bearer s3cret", ": s3cret", "Bad Name: s3cret", "X: s3cret\r\nY: z"} {
		err := ParseHeader(http.Header{}, bad)
		require.Error(t, err, bad)
		assert.NotContains(t, err.Error(), "s3cret")
	}
}

// A credential in the URL (a query's api key, a token as user info) is in
// no error, whatever the transport quoted; a server that refuses it too.
func TestErrorsHideTheURLsCredentials(t *testing.T) {
	refusing := httptest.NewServer(mcptest.HTTPHandler("Authorization", "Bearer s3cret"))
	defer refusing.Close()
	for _, u := range []string{
		"http://127.0.0.1:1/mcp?api_key=SUPERSECRET",
		"http://ghp_SUPERSECRET@127.0.0.1:1/mcp",
		"http://user:SUPERSECRET@127.0.0.1:1/mcp",
		refusing.URL + "/?api_key=SUPERSECRET",
		"http://127.0.0.1:1/key-SUPERSECRET/mcp?x=1",
	} {
		_, err := ToolsList(ctxFor(t, 10*time.Second), Source{URL: u})
		require.Error(t, err)
		msg := err.Error()
		if strings.Contains(u, "/key-") {
			// The path is the server's name (Describe keeps it): only
			// the query goes.
			assert.NotContains(t, msg, "x=1", u)
			continue
		}
		assert.NotContains(t, msg, "SUPERSECRET", u)
	}
}

// A server that answers without end fails the fetch at MaxResponseBytes
// instead of filling memory.
func TestAnEndlessAnswerIsRefused(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		for range MaxResponseBytes>>20 + 8 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	_, err := ToolsList(ctxFor(t, 30*time.Second), Source{URL: endless.URL})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over 64 MiB")
}

// A server whose tools/list pages go on, or whose results grow, past the
// bounds fails the fetch (the fixture's 3 pages, 5 tools, against bounds
// lowered for the test).
func TestAnEndlessListIsRefused(t *testing.T) {
	defer func(p, b int) { maxPages, maxListBytes = p, b }(maxPages, maxListBytes)
	maxPages = 2
	_, err := ToolsList(ctxFor(t, 30*time.Second), Source{Command: fixtureCommand()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "past 2 pages")
	maxPages, maxListBytes = MaxPages, 100
	_, err = ToolsList(ctxFor(t, 30*time.Second), Source{Command: fixtureCommand()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over 100 bytes in all")
}

func TestDescribeHidesCredentials(t *testing.T) {
	assert.Equal(t, "https://mcp.example.com/mcp", Source{URL: "https://u:p4ss@mcp.example.com/mcp?token=t0k#f"}.Describe())
	assert.Equal(t, "stdio server", Source{Command: []string{"/opt/bin/server", "--token", "t0k"}}.Describe())
}

// FuzzSplitCommand: any line splits without a panic, and a line with no
// quote or backslash splits as strings.Fields does.
func FuzzSplitCommand(f *testing.F) {
	for _, s := range []string{`npx -y pkg`, `a "b c" 'd'`, `a\ b`, `"`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args, err := SplitCommand(line)
		if strings.ContainsAny(line, `"'\`) {
			return
		}
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' })
		if len(fields) == 0 {
			assert.Error(t, err)
			return
		}
		require.NoError(t, err)
		assert.Equal(t, fields, args)
	})
}

// TestHTTPLegacyServer: a server without server/discover gets the legacy
// initialize handshake, and every request after it carries the negotiated
// Mcp-Protocol-Version header, which the recording connection would
// otherwise keep the SDK from setting.
func TestHTTPLegacyServer(t *testing.T) {
	fixture := mcptest.HTTPHandler("Authorization", "Bearer s3cret")
	var (
		mu       sync.Mutex
		versions []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.Unmarshal(body, &msg)
		switch msg.Method {
		case "server/discover":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"error":{"code":-32601,"message":"method not found"}}`))
			return
		case "tools/list", "notifications/initialized":
			mu.Lock()
			versions = append(versions, msg.Method+" "+r.Header.Get("Mcp-Protocol-Version"))
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fixture.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	res, err := ToolsList(ctxFor(t, 30*time.Second), Source{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer s3cret"}}})
	require.NoError(t, err)
	assert.Len(t, res.Tools, 5)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"notifications/initialized 2025-11-25", "tools/list 2025-11-25", "tools/list 2025-11-25", "tools/list 2025-11-25"}, versions)
}
