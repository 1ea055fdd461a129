package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/freeport"
)

// syncBuffer collects a daemon's log; it is printed when the test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) *slog.Logger {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func openStore(t *testing.T) *analytics.Store {
	t.Helper()
	s, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "mcptrail.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testOptions is an embedded daemon on free ports whose own NATS user is
// admin (so that tests can inspect the stream); gateways publish as the
// default gateway user (see gateway).
func testOptions(t *testing.T) Options {
	return Options{
		EmbeddedListen:      freeport.Addr(t),
		EmbeddedStoreDir:    t.TempDir(),
		GatewayPasswordFile: filepath.Join(t.TempDir(), GatewayPasswordFileName),
		User:                "admin",
		Password:            "admin-secret",
		JetStream:           true,
		HTTPListen:          freeport.Addr(t),
		BatchSize:           1000,
		FlushInterval:       100 * time.Millisecond,
	}
}

// gateway publishes to a running embedded daemon as its default gateway user.
func gateway(t *testing.T, opts Options) PublishOptions {
	t.Helper()
	pw, err := ReadPasswordFile(opts.GatewayPasswordFile)
	require.NoError(t, err)
	return PublishOptions{URL: "nats://" + opts.EmbeddedListen, Auth: Auth{User: DefaultGatewayUser, Password: pw}}
}

type daemon struct {
	opts   Options
	store  *analytics.Store
	cancel context.CancelFunc
	done   chan error
}

// start runs a daemon and waits until it is ready.
func start(t *testing.T, store *analytics.Store, opts Options) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{opts: opts, store: store, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { d.done <- Run(ctx, store, opts, testLogger(t), func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-d.done:
		cancel()
		t.Fatalf("daemon stopped before it was ready: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("daemon not ready after 20 s")
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Error("daemon did not stop within 10 s")
	}
}

func (d *daemon) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+d.opts.HTTPListen+path, nil)
	require.NoError(t, err)
	resp, body := do(t, req, token)
	return resp.StatusCode, string(body)
}

// do sends req, with token as the bearer token when set, and reads the answer.
func do(t *testing.T, req *http.Request, token string) (*http.Response, []byte) {
	t.Helper()
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func queryInt(t *testing.T, s *analytics.Store, q string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB().QueryRow(q).Scan(&n))
	return n
}

func events(from, to int, server string) func() (audit.Event, bool, error) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	i := from
	return func() (audit.Event, bool, error) {
		if i >= to {
			return audit.Event{}, false, nil
		}
		e := audit.Event{
			ID: fmt.Sprintf("ev-%07d", i), TS: base.Add(time.Duration(i) * time.Millisecond), Server: server,
			Tool: "vm_list", Decision: audit.Allowed, Status: "ok", Agent: "agent-1", Session: "s1",
		}
		i++
		return e, true, nil
	}
}

// connect connects to a running embedded daemon as its own (admin) user.
func connect(t *testing.T, opts Options) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect("nats://"+opts.EmbeddedListen, nats.UserInfo(opts.User, opts.Password))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

func waitCount(t *testing.T, s *analytics.Store, q string, want int) {
	t.Helper()
	var n int
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if err := s.DB().QueryRow(q).Scan(&n); err == nil && n == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %d after 20 s, want %d", q, n, want)
}

func TestServeStartupIngestDedupAndMetrics(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)

	// At the moment the daemon declares itself ready, the stream and the
	// durable consumer exist and /readyz answers 200.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	type seen struct {
		stream, consumer bool
		readyz           int
	}
	readyState := make(chan seen, 1)
	go func() {
		done <- Run(ctx, store, opts, testLogger(t), func() {
			var s seen
			nc, err := nats.Connect("nats://"+opts.EmbeddedListen, nats.UserInfo(opts.User, opts.Password))
			if err == nil {
				defer nc.Close()
				js, _ := jetstream.New(nc)
				_, err = js.Stream(context.Background(), "MCP_AUDIT")
				s.stream = err == nil
				_, err = js.Consumer(context.Background(), "MCP_AUDIT", "mcptrail")
				s.consumer = err == nil
			}
			if resp, err := http.Get("http://" + opts.HTTPListen + "/readyz"); err == nil {
				s.readyz = resp.StatusCode
				resp.Body.Close()
			}
			readyState <- s
		})
	}()
	var rs seen
	select {
	case rs = <-readyState:
	case err := <-done:
		t.Fatalf("daemon stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready")
	}
	assert.Equal(t, seen{stream: true, consumer: true, readyz: http.StatusOK}, rs)
	d := &daemon{opts: opts, store: store, cancel: cancel, done: done}
	t.Cleanup(func() { d.stop(t) })

	code, _ := d.get(t, "/healthz", "")
	assert.Equal(t, http.StatusOK, code)

	st, err := Publish(context.Background(), gateway(t, opts), events(0, 2500, "proxmox-mcp"))
	require.NoError(t, err)
	assert.Equal(t, 2500, st.Published)
	assert.Zero(t, st.Duplicates)
	assert.Positive(t, st.Rate)
	waitCount(t, store, `SELECT count(*) FROM calls`, 2500)

	// Republished events: the stream drops them by Nats-Msg-Id.
	st, err = Publish(context.Background(), gateway(t, opts), events(0, 100, "proxmox-mcp"))
	require.NoError(t, err)
	assert.Equal(t, 100, st.Duplicates)

	// Bad payloads are dead-lettered with subject and stream sequence, and acked.
	_, js := connect(t, opts)
	_, err = js.Publish(context.Background(), "mcp.audit.broken", []byte(`{"id":`))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM dead_letters`, 1)
	var dl struct {
		source, reason string
		seq            int
		raw            []byte
	}
	require.NoError(t, store.DB().QueryRow(`SELECT source, seq, reason, raw FROM dead_letters`).Scan(&dl.source, &dl.seq, &dl.reason, &dl.raw))
	assert.Equal(t, "mcp.audit.broken", dl.source)
	assert.Equal(t, 2501, dl.seq)
	assert.Equal(t, "malformed_json", dl.reason)
	// Not JSON, and store_args is off: only its digest is kept.
	assert.Equal(t, string(audit.PayloadDigest(sha256.Sum256([]byte(`{"id":`)), 6)), string(dl.raw))
	cons, err := js.Consumer(context.Background(), "MCP_AUDIT", "mcptrail")
	require.NoError(t, err)
	// The embedded server's limits stream: the consumer acknowledges
	// nothing, and the checkpoint records what is stored.
	assert.Equal(t, jetstream.AckNonePolicy, cons.CachedInfo().Config.AckPolicy)
	waitCount(t, store, `SELECT seq FROM checkpoints WHERE consumer = 'MCP_AUDIT/mcptrail'`, 2501)
	info, err := cons.Info(context.Background())
	require.NoError(t, err)
	assert.Zero(t, info.NumPending)
	assert.Equal(t, 2500, queryInt(t, store, `SELECT count(DISTINCT id) FROM calls`))

	// Payloads that repeat an event id under new message ids: once stored
	// (ev-0000007), once repeated within one batch (ev-x, published twice
	// in a row, lands in one fetch). Both count as duplicates.
	for _, id := range []string{"ev-0000007", "ev-x", "ev-x"} {
		payload := fmt.Appendf(nil, `{"id":%q,"ts":"2026-01-02T03:04:05.007Z","server":"proxmox-mcp","tool":"vm_list","decision":"allowed"}`, id)
		_, err = js.Publish(context.Background(), "mcp.audit.proxmox-mcp", payload)
		require.NoError(t, err)
	}
	waitCount(t, store, `SELECT count(*) FROM calls`, 2501)
	require.Eventually(t, func() bool {
		_, body := d.get(t, "/metrics", "")
		return strings.Contains(body, `mcptrail_events_duplicate_total{format="native",server="proxmox-mcp"} 2`)
	}, 10*time.Second, 20*time.Millisecond)

	code, body := d.get(t, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`mcptrail_events_ingested_total{format="native",server="proxmox-mcp"} 2501`,
		`mcptrail_events_rejected_total{format="auto",reason="malformed_json",server="broken"} 1`,
		`mcptrail_batch_messages_count`,
		`mcptrail_commit_seconds_bucket`,
		`mcptrail_consumer_pending_messages`,
		`mcptrail_consumer_ack_pending_messages`,
		"mcptrail_stored_stream_sequence 2504\n", // the checkpoint: 2,501 messages, then 3 duplicates
		`mcptrail_database_size_bytes`,
		`mcptrail_nats_connected 1`,
		`mcptrail_ready 1`,
		`mcptrail_ingest_errors_total{stage="append"} 0`,
		`go_goroutines`,
	} {
		assert.Contains(t, body, want)
	}
	d.stop(t)
}

// A crash after the commit and before the ack: the batch is in the database
// with its checkpoint, never acknowledged, and the restart of the embedded
// server lost the consumer's state (kept in memory). The restarted daemon
// positions the consumer after its checkpoint: the stored batch is not
// delivered again, what follows is stored once.
func TestServeRedeliveryAfterCommitWithoutAck(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	ctx := context.Background()

	// The "crashed" daemon, by hand: its own embedded server on the same store dir.
	auth, err := newEmbeddedAuth(opts, store.Path(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ns, err := startEmbedded(opts, auth, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(opts.User, opts.Password))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = ingest.EnsureStream(ctx, js, ingest.StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	require.NoError(t, err)
	cons, err := ingest.EnsureConsumer(ctx, js, ingest.ConsumerSpec{Stream: "MCP_AUDIT", Durable: "mcptrail", BatchSize: 1000})
	require.NoError(t, err)
	_, err = Publish(ctx, gateway(t, opts), events(0, 300, "pve"))
	require.NoError(t, err)
	b, err := cons.Fetch(300, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []ingest.Message
	var last uint64
	for m := range b.Messages() {
		md, err := m.Metadata()
		require.NoError(t, err)
		last = md.Sequence.Stream
		msgs = append(msgs, ingest.Message{Data: m.Data(), Source: m.Subject(), Seq: last})
	}
	require.Len(t, msgs, 300)
	evs, dead, _ := ingest.DecodeMessages(ctx, msgs, audit.Options{}, 2)
	require.Empty(t, dead)
	_, err = store.Append(ctx, ingest.Batch{Events: evs, Checkpoint: &ingest.Checkpoint{Consumer: "MCP_AUDIT/mcptrail", Seq: last}})
	require.NoError(t, err)
	nc.Close() // crash: no ack
	ns.Shutdown()
	ns.WaitForShutdown()

	d := start(t, store, opts)
	_, err = Publish(ctx, gateway(t, opts), events(300, 400, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 400)
	_, js2 := connect(t, opts)
	c2, err := js2.Consumer(ctx, "MCP_AUDIT", "mcptrail")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := c2.Info(ctx)
		return err == nil && info.NumPending == 0 && info.Delivered.Stream == 400
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, 400, queryInt(t, store, `SELECT count(DISTINCT id) FROM calls`))
	_, body := d.get(t, "/metrics", "")
	assert.Contains(t, body, "mcptrail_messages_redelivered_skipped_total 0\n", "stored messages delivered again")
	assert.NotContains(t, body, `mcptrail_events_duplicate_total{format="native",server="pve"}`)
	assert.Equal(t, 400, queryInt(t, store, `SELECT seq FROM checkpoints WHERE consumer = 'MCP_AUDIT/mcptrail'`))
}

// Core mode against an external server: two daemons in one queue group
// share the traffic, each message stored by exactly one; each calls its
// StoreThread once, from the goroutine that stores.
func TestServeCoreModeQueueGroup(t *testing.T) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })

	stores := []*analytics.Store{openStore(t), openStore(t)}
	var storeThreads [2]atomic.Int32
	for i, s := range stores {
		opts := testOptions(t)
		opts.URL, opts.JetStream, opts.Queue = ns.ClientURL(), false, "mcptrail"
		opts.StoreThread = func() func() { storeThreads[i].Add(1); return func() {} }
		start(t, s, opts)
	}
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	next := events(0, 1000, "pve")
	for {
		e, ok, _ := next()
		if !ok {
			break
		}
		b, err := json.Marshal(&e)
		require.NoError(t, err)
		require.NoError(t, nc.Publish("mcp.audit.pve", b))
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		return queryInt(t, stores[0], `SELECT count(*) FROM calls`)+queryInt(t, stores[1], `SELECT count(*) FROM calls`) == 1000
	}, 20*time.Second, 20*time.Millisecond)
	assert.Positive(t, queryInt(t, stores[0], `SELECT count(*) FROM calls`))
	assert.Positive(t, queryInt(t, stores[1], `SELECT count(*) FROM calls`))
	assert.Equal(t, int32(1), storeThreads[0].Load())
	assert.Equal(t, int32(1), storeThreads[1].Load())
}

// echoBackend answers every request with its type and the database it
// holds; a query request with SQL "panic" panics.
type echoBackend struct{ db string }

func (b echoBackend) Database() string { return b.db }

func (b echoBackend) Run(_ context.Context, req api.Request, out api.Output) int {
	if q, ok := req.(*api.QueryRequest); ok && q.SQL == "panic" {
		panic("boom")
	}
	fmt.Fprintf(out.Stdout, "ran %T\n", req)
	fmt.Fprintln(out.Stderr, "a warning")
	return 3
}

func TestServeTypedAPI(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	opts.HTTPToken = "0123456789abcdef-token"
	opts.Backend = echoBackend{db: "/data/mcptrail.duckdb"}
	opts.HTTPReadTimeout = 300 * time.Millisecond
	d := start(t, store, opts)

	// Health, readiness and metrics are open; the API is not.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, api.PathStatus: 401} {
		code, _ := d.get(t, path, "")
		assert.Equal(t, want, code, path)
	}
	code, body := d.get(t, api.PathStatus, opts.HTTPToken)
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"database":"/data/mcptrail.duckdb","ready":true}`, body)
	// The command line passthrough is gone.
	resp, err := http.Post("http://"+opts.HTTPListen+"/api/v1/run", "application/json", strings.NewReader(`{"args":["demo"]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	c := &api.Client{Listen: opts.HTTPListen, Token: opts.HTTPToken}
	var out, errOut bytes.Buffer
	exit, reached, _, err := c.Do(context.Background(), &api.QueryRequest{Name: "x"}, api.Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.True(t, reached)
	assert.Equal(t, 3, exit)
	assert.Equal(t, "ran *api.QueryRequest\n", out.String())
	assert.Equal(t, "a warning\n", errOut.String())

	// A command that panics answers exit 1; the daemon keeps ingesting and answering.
	out.Reset()
	errOut.Reset()
	exit, _, _, err = c.Do(context.Background(), &api.QueryRequest{SQL: "panic"}, api.Sink{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	assert.Equal(t, 1, exit)
	assert.Contains(t, errOut.String(), "internal error in the daemon: boom")
	code, _ = d.get(t, "/readyz", "")
	assert.Equal(t, http.StatusOK, code)

	// A client that sends its body slowly is cut off at the read timeout.
	conn, err := net.Dial("tcp", opts.HTTPListen)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{",
		api.PathQueries, opts.HTTPListen, opts.HTTPToken)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	start := time.Now()
	_, err = io.ReadAll(conn)
	assert.NoError(t, err, "the server closes the connection")
	assert.Less(t, time.Since(start), 4*time.Second)
}

func TestServeRefusesAnAPIWithoutToken(t *testing.T) {
	opts := testOptions(t)
	opts.Backend = echoBackend{}
	err := Run(context.Background(), openStore(t), opts, testLogger(t), nil)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "http.token", ce.Key)
}

func TestServeWarnsOfAnAPIOpenToTheNetwork(t *testing.T) {
	opts := testOptions(t)
	_, port, _ := net.SplitHostPort(opts.HTTPListen)
	opts.HTTPListen = "0.0.0.0:" + port
	_, port, _ = net.SplitHostPort(opts.EmbeddedListen)
	opts.EmbeddedListen = "0.0.0.0:" + port
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, openStore(t), opts, log, cancel) }()
	require.NoError(t, <-done)
	assert.Contains(t, logs.String(), "http.listen is reachable from other hosts without TLS")
	assert.Contains(t, logs.String(), "nats.embedded.listen is reachable from other hosts")
}

func TestServePortInUseNamesTheSetting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	taken := ln.Addr().String()
	store := openStore(t)

	opts := testOptions(t)
	opts.HTTPListen = taken
	err = Run(context.Background(), store, opts, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "http.listen "+taken)
	assert.Contains(t, err.Error(), "MCPTRAIL_HTTP_LISTEN")

	opts = testOptions(t)
	opts.EmbeddedListen = taken
	err = Run(context.Background(), store, opts, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats.embedded.listen "+taken)
	assert.Contains(t, err.Error(), "address already in use")
}

func TestServeRefusesBadStartups(t *testing.T) {
	store := openStore(t)

	opts := testOptions(t)
	opts.Servers = []string{"proxmox-mcp"}
	err := Run(context.Background(), store, opts, testLogger(t), nil)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "nats.consumer", ce.Key)
	assert.Contains(t, err.Error(), "own durable consumer")

	opts = testOptions(t)
	opts.URL = "nats://" + freeport.Addr(t)
	err = Run(context.Background(), store, opts, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(nats.url)")
	assert.Contains(t, err.Error(), "connect to NATS at "+opts.URL)

	// An external server without JetStream.
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	opts = testOptions(t)
	opts.URL = ns.ClientURL()
	err = Run(context.Background(), store, opts, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats.jetstream")
	assert.Contains(t, err.Error(), "enable JetStream")
}

// The embedded server's store is locked for the daemon's lifetime: a second
// daemon on the same nats.embedded.store_dir is refused, naming the key, and
// starts once the first one stopped.
func TestServeRefusesASecondDaemonOnTheStoreDir(t *testing.T) {
	first := testOptions(t)
	d := start(t, openStore(t), first)
	second := testOptions(t)
	second.EmbeddedStoreDir = first.EmbeddedStoreDir
	store := openStore(t)
	err := Run(context.Background(), store, second, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats.embedded.store_dir "+first.EmbeddedStoreDir+": in use by another process")
	assert.Contains(t, err.Error(), "MCPTRAIL_NATS_EMBEDDED_STORE_DIR")
	d.stop(t)
	start(t, store, second)
}

// A shard consumes only its servers' subjects.
func TestServeShardFiltersByServer(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	opts.Servers, opts.Consumer = []string{"pve"}, "mcptrail-pve"
	start(t, store, opts)
	_, err := Publish(context.Background(), gateway(t, opts), events(0, 50, "pve"))
	require.NoError(t, err)
	_, err = Publish(context.Background(), gateway(t, opts), events(50, 80, "other"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 50)
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 0, queryInt(t, store, `SELECT count(*) FROM calls WHERE server <> 'pve'`))
	assert.Equal(t, 50, queryInt(t, store, `SELECT count(*) FROM calls`))
}

func TestReadyzBeforeStart(t *testing.T) {
	a := &httpAPI{m: newMetrics(func() float64 { return 0 }), log: slog.New(slog.DiscardHandler)}
	srv := a.handler()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	a.ready.Store(true)
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	a.live = func() bool { return false }
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

// SIGTERM during start-up is a clean stop, not a failure.
func TestServeCancelledDuringStartup(t *testing.T) {
	store := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	assert.NoError(t, Run(ctx, store, testOptions(t), testLogger(t), func() { t.Error("ready after cancel") }))
	assert.Less(t, time.Since(start), 10*time.Second)
}

// On loopback, health, readiness and metrics answer only a Host of the
// daemon's: a web page that rebinds its own name to 127.0.0.1 reads none of
// them. Beyond loopback any name may reach them (the network does anyway).
func TestLocalRoutesCheckTheHostOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		listen, host string
		want         int
	}{
		{"127.0.0.1:8474", "127.0.0.1:8474", http.StatusOK},
		{"127.0.0.1:8474", "localhost:8474", http.StatusOK},
		{"127.0.0.1:8474", "rebound.example:8474", http.StatusForbidden},
		{"127.0.0.1:8474", "127.0.0.1:9999", http.StatusForbidden},
		{"localhost:8474", "rebound.example:8474", http.StatusForbidden},
		{"0.0.0.0:8474", "10.1.2.3:8474", http.StatusOK},
		{"10.1.2.3:8474", "prometheus-target:8474", http.StatusOK},
	} {
		guard, err := localGuard(tc.listen, nil)
		require.NoError(t, err)
		a := &httpAPI{m: newMetrics(func() float64 { return 0 }), log: slog.New(slog.DiscardHandler), guardLocal: guard}
		a.ready.Store(true)
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Host = tc.host
			rec := httptest.NewRecorder()
			a.handler().ServeHTTP(rec, req)
			assert.Equal(t, tc.want, rec.Code, "listen %s, Host %s, %s", tc.listen, tc.host, path)
		}
	}
	guard, err := localGuard("127.0.0.1:8474", []string{"mcptrail.internal"})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	req.Host = "mcptrail.internal:8474"
	rec := httptest.NewRecorder()
	(&httpAPI{m: newMetrics(func() float64 { return 0 }), log: slog.New(slog.DiscardHandler), guardLocal: guard}).handler().ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, "http.allowed_hosts")
}
