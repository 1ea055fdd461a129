package api

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testToken = "test-token-0123456789abcdef"

// scriptBackend runs a request by its fields: a query's SQL picks what it
// does.
type scriptBackend struct {
	db      string
	release chan struct{}
	running atomic.Int32
}

func (b *scriptBackend) Database() string { return b.db }

func (b *scriptBackend) Run(ctx context.Context, req Request, out Output) int {
	switch r := req.(type) {
	case *QueryRequest:
		switch r.SQL {
		case "panic":
			panic("boom")
		case "big":
			// 200 KiB of multi-byte text written in odd pieces, then bytes
			// that are not UTF-8.
			for i := 0; i < 20000; i++ {
				fmt.Fprintf(out.Stdout, "%05d é€😀\n", i)
			}
			out.Stdout.Write([]byte{0xff, 0xfe, '\n'})
		case "interleaved":
			fmt.Fprint(out.Stdout, "one\n")
			fmt.Fprint(out.Stderr, "warn\n")
			fmt.Fprint(out.Stdout, "two\n")
		case "block":
			b.running.Add(1)
			select {
			case <-b.release:
			case <-ctx.Done():
			}
		case "truncate":
			fmt.Fprint(out.Stdout, "x\n")
			out.Truncate()
		}
		return 0
	case *ReportRequest:
		// Overwrite one upload, keep another, add a file.
		require.NoError(nil, os.WriteFile(filepath.Join(out.Dir, "srv", "a", "report.json"), []byte("changed"), 0o600))
		require.NoError(nil, os.MkdirAll(filepath.Join(out.Dir, "srv", "new"), 0o700))
		require.NoError(nil, os.WriteFile(filepath.Join(out.Dir, "srv", "new", "report.md"), []byte("# new"), 0o600))
		fmt.Fprint(out.Stdout, "wrote\n")
		return 0
	}
	return 2
}

func newTestServer(t *testing.T, b Backend, o Options) (*httptest.Server, *Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	o.Backend, o.Token, o.Listen = b, testToken, ln.Addr().String()
	h, err := NewHandler(o)
	require.NoError(t, err)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &Client{Listen: ln.Addr().String(), Token: testToken}
}

func post(t *testing.T, url, contentType, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+testToken)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func TestHandlerRefusesWhatABrowserOrAStrangerSends(t *testing.T) {
	srv, _ := newTestServer(t, &scriptBackend{db: "/data/m.duckdb"}, Options{AllowedHosts: []string{"mcptrail.internal"}})
	url := srv.URL + PathQuery
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, c := range []struct {
		name, contentType, body string
		header                  map[string]string
		want                    int
	}{
		{"json", "application/json", `{"sql":"x"}`, nil, 200},
		{"text/plain, as a form or fetch without preflight sends it", "text/plain", `{"sql":"x"}`, nil, 415},
		{"form", "application/x-www-form-urlencoded", `sql=x`, nil, 415},
		{"foreign origin", "application/json", `{"sql":"x"}`, map[string]string{"Origin": "https://evil.example"}, 403},
		{"null origin", "application/json", `{"sql":"x"}`, map[string]string{"Origin": "null"}, 403},
		{"own origin", "application/json", `{"sql":"x"}`, map[string]string{"Origin": "http://127.0.0.1:" + port}, 200},
		{"foreign host (DNS rebinding)", "application/json", `{"sql":"x"}`, map[string]string{"Host": "evil.example:" + port}, 403},
		{"allowed host", "application/json", `{"sql":"x"}`, map[string]string{"Host": "mcptrail.internal:" + port}, 200},
		{"localhost", "application/json", `{"sql":"x"}`, map[string]string{"Host": "localhost:" + port}, 200},
		{"unknown field", "application/json", `{"args":["demo"]}`, nil, 400},
		{"two objects", "application/json", `{"sql":"x"}{"sql":"y"}`, nil, 400},
		{"another database", "application/json", `{"sql":"x","database":"/other/m.duckdb"}`, nil, 409},
		{"same database", "application/json", `{"sql":"x","database":"/data/./m.duckdb"}`, nil, 200},
	} {
		code, body := post(t, url, c.contentType, c.body, c.header)
		assert.Equal(t, c.want, code, "%s: %s", c.name, body)
	}
	code, _ := post(t, srv.URL+PathReport, "application/json", `{"out":"x","previous":[{"name":"../../etc/cron.d/x","content":""}]}`, nil)
	assert.Equal(t, http.StatusBadRequest, code, "an upload outside the output folder")
	big := `{"sql":"` + strings.Repeat("x", DefaultMaxBody) + `"}`
	code, _ = post(t, url, "application/json", big, nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)

	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testToken + "x", "Basic " + testToken} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"sql":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, auth)
	}
}

func TestClientStreamsTheAnswerExactly(t *testing.T) {
	_, c := newTestServer(t, &scriptBackend{}, Options{})
	var out, errOut bytes.Buffer
	code, reached, truncated, err := c.Do(context.Background(), &QueryRequest{SQL: "big"}, Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err, errOut.String())
	assert.True(t, reached)
	assert.False(t, truncated)
	assert.Zero(t, code)
	var want bytes.Buffer
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&want, "%05d é€😀\n", i)
	}
	want.Write([]byte{0xff, 0xfe, '\n'})
	assert.True(t, bytes.Equal(want.Bytes(), out.Bytes()), "stdout differs: %d bytes, want %d", out.Len(), want.Len())

	// Standard output and error keep their order in one stream.
	var both bytes.Buffer
	_, _, _, err = c.Do(context.Background(), &QueryRequest{SQL: "interleaved"}, Sink{Stdout: &both, Stderr: &both})
	require.NoError(t, err)
	assert.Equal(t, "one\nwarn\ntwo\n", both.String())

	_, _, truncated, err = c.Do(context.Background(), &QueryRequest{SQL: "truncate"}, Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.True(t, truncated)
}

func TestHandlerSurvivesAPanic(t *testing.T) {
	_, c := newTestServer(t, &scriptBackend{}, Options{})
	var out, errOut bytes.Buffer
	code, _, _, err := c.Do(context.Background(), &QueryRequest{SQL: "panic"}, Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "internal error in the daemon: boom")
	code, _, _, err = c.Do(context.Background(), &QueryRequest{SQL: "interleaved"}, Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.Zero(t, code)
}

func TestOutputFolderComesBackAsFiles(t *testing.T) {
	_, c := newTestServer(t, &scriptBackend{}, Options{})
	got := map[string]string{}
	sink := Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, File: func(f File) error {
		got[f.Name] = string(f.Content)
		return nil
	}}
	req := &ReportRequest{Out: "reports", Previous: []File{
		{Name: "srv/a/report.json", Content: []byte("old")},
		{Name: "srv/b/report.json", Content: []byte("kept")},
	}}
	code, _, _, err := c.Do(context.Background(), req, sink)
	require.NoError(t, err)
	assert.Zero(t, code)
	assert.Equal(t, map[string]string{"srv/a/report.json": "changed", "srv/new/report.md": "# new"}, got,
		"what the command wrote, not the uploads it left alone")
	// Without a sink for files the client refuses them.
	_, _, _, err = c.Do(context.Background(), req, Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	assert.ErrorContains(t, err, "did not ask for")
}

func TestALongRequestDoesNotBlockOthers(t *testing.T) {
	b := &scriptBackend{release: make(chan struct{})}
	_, c := newTestServer(t, b, Options{Concurrency: 2})
	done := make(chan error, 1)
	go func() {
		_, _, _, err := c.Do(context.Background(), &QueryRequest{SQL: "block"}, Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
		done <- err
	}()
	require.Eventually(t, func() bool { return b.running.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	var out bytes.Buffer
	_, _, _, err := c.Do(context.Background(), &QueryRequest{SQL: "interleaved"}, Sink{Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	assert.Equal(t, "one\nwarn\ntwo\n", out.String())
	close(b.release)
	require.NoError(t, <-done)
}

// A process squatting on http.listen that looks like the daemon gets no
// token: the client asks for a proof first.
func TestClientSendsNoTokenToASquatter(t *testing.T) {
	var sawToken atomic.Bool
	squatter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawToken.Store(true)
		}
		w.Header().Set(IdentHeader, "1")
		if r.URL.Path == PathHello {
			fmt.Fprintf(w, `{"service":"mcptrail","api":"v1","proof":"%s"}`, Proof("a guess", []byte("x"), "127.0.0.1:1"))
			return
		}
		fmt.Fprint(w, `{"exit":0}`)
	}))
	defer squatter.Close()
	c := &Client{Listen: squatter.Listener.Addr().String(), Token: testToken}
	_, reached, _, err := c.Do(context.Background(), &QueryRequest{SQL: "x"}, Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	assert.True(t, reached)
	assert.ErrorContains(t, err, "did not prove that it holds this CLI's token")
	assert.False(t, sawToken.Load(), "the squatter received the token")
}

// A squatter that relays the hello to a daemon holding the same token (a
// shard's, another port's) gets no token: the proof names the address the
// daemon accepted the connection on, which is not the one the CLI dialed.
func TestClientSendsNoTokenToARelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h, err := NewHandler(Options{Backend: &scriptBackend{}, Token: testToken, Listen: ln.Addr().String()})
	require.NoError(t, err)
	daemon := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	daemon.Start()
	defer daemon.Close()
	target, err := url.Parse(daemon.URL)
	require.NoError(t, err)
	var sawToken atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(target)
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawToken.Store(true)
		}
		r.Host = target.Host // what the daemon accepts
		proxy.ServeHTTP(w, r)
	}))
	defer relay.Close()
	c := &Client{Listen: relay.Listener.Addr().String(), Token: testToken}
	_, reached, _, err := c.Do(context.Background(), &QueryRequest{SQL: "x"}, Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	assert.True(t, reached)
	assert.ErrorContains(t, err, "did not prove that it holds this CLI's token")
	assert.False(t, sawToken.Load(), "the relay received the token")
}

// The request that carries the token goes over the connection that carried
// the hello proof, never a new one that another process may have answered.
func TestClientSendsTheTokenOverTheProvenConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h, err := NewHandler(Options{Backend: &scriptBackend{}, Token: testToken, Listen: ln.Addr().String()})
	require.NoError(t, err)
	var mu sync.Mutex
	conns := map[string][]string{} // client address → paths asked over it
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = append(conns[r.RemoteAddr], r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	})}}
	srv.Start()
	defer srv.Close()
	c := &Client{Listen: ln.Addr().String(), Token: testToken}
	_, reached, _, err := c.Do(context.Background(), &QueryRequest{SQL: "x"}, Sink{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	require.NoError(t, err)
	require.True(t, reached)
	_, reached, err = c.Status(context.Background())
	require.NoError(t, err)
	require.True(t, reached)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, conns, 2, "one connection per exchange: %v", conns)
	for addr, paths := range conns {
		assert.Equal(t, PathHello, paths[0], addr)
		assert.Len(t, paths, 2, "the hello and the request over one connection: %v", paths)
	}
}

func TestClientWithoutDaemonOrToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := &Client{Listen: addr, Token: testToken}
	_, reached, _, err := c.Do(context.Background(), &QueryRequest{SQL: "x"}, Sink{})
	assert.NoError(t, err)
	assert.False(t, reached, "nothing listens: the CLI opens the file")

	_, c = newTestServer(t, &scriptBackend{}, Options{})
	c.Token, c.TokenFile = "", "/data/mcptrail.token"
	_, reached, _, err = c.Do(context.Background(), &QueryRequest{SQL: "x"}, Sink{})
	assert.True(t, reached)
	assert.ErrorIs(t, err, ErrNoToken)
	assert.ErrorContains(t, err, "/data/mcptrail.token")
}

func TestHelloProvesTheToken(t *testing.T) {
	srv, _ := newTestServer(t, &scriptBackend{}, Options{})
	challenge := []byte("0123456789abcdef0123456789abcdef")
	resp, err := http.Get(srv.URL + PathHello + "?challenge=" + hex.EncodeToString(challenge))
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	addr := srv.Listener.Addr().String()
	assert.Contains(t, b.String(), Proof(testToken, challenge, addr), "the proof names the address the daemon accepted on")
	assert.NotContains(t, b.String(), testToken)
	assert.True(t, checkProof(testToken, challenge, addr, Proof(testToken, challenge, addr)))
	assert.False(t, checkProof(testToken+"x", challenge, addr, Proof(testToken, challenge, addr)))
	assert.False(t, checkProof(testToken, challenge, "127.0.0.1:1", Proof(testToken, challenge, addr)))
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), TokenFileName)
	token, created, err := LoadOrCreateToken(path)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Len(t, token, 64)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	again, created, err := LoadOrCreateToken(path)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, token, again, "reused at the next start")
	read, err := ReadToken(path)
	require.NoError(t, err)
	assert.Equal(t, token, read)

	require.NoError(t, os.Chmod(path, 0o644))
	_, _, err = LoadOrCreateToken(path)
	assert.ErrorContains(t, err, "others can read the token")

	assert.Error(t, CheckToken("short"))
	assert.NoError(t, CheckToken(testToken))
	// A token file holds a token as long as a configured one must be.
	require.NoError(t, os.WriteFile(path, []byte("x\n"), 0o600))
	require.NoError(t, os.Chmod(path, 0o600))
	_, _, err = LoadOrCreateToken(path)
	assert.ErrorContains(t, err, "holds 1 characters")
	_, err = ReadToken(path)
	assert.ErrorContains(t, err, "at least 16")
	_, err = NewHandler(Options{Backend: &scriptBackend{}, Listen: "127.0.0.1:1"})
	assert.Error(t, err, "no API without a token")
}

func TestClientBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8474": "http://127.0.0.1:8474",
		"0.0.0.0:8474":   "http://127.0.0.1:8474",
		":8474":          "http://127.0.0.1:8474",
		"[::]:8474":      "http://[::1]:8474",
		"[::1]:8474":     "http://[::1]:8474",
		"localhost:9":    "http://localhost:9",
	} {
		assert.Equal(t, want, (&Client{Listen: in}).base(), in)
	}
	assert.Equal(t, "https://127.0.0.1:8474", (&Client{Listen: "127.0.0.1:8474", CertFile: "c.pem"}).base())
}
