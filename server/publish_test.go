package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/freeport"
)

// startNATS starts a JetStream server on addr with its store in dir.
func startNATS(t *testing.T, addr, dir string) *natsserver.Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	ns, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: p, NoLog: true, NoSigs: true, JetStream: true, StoreDir: dir})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return ns
}

// streamFixture is a JetStream server with the audit stream, and a client of
// it that reads the stream back.
type streamFixture struct {
	addr, dir string
	ns        *natsserver.Server
	nc        *nats.Conn
	js        jetstream.JetStream
}

func newStreamFixture(t *testing.T, cfg jetstream.StreamConfig) *streamFixture {
	t.Helper()
	f := &streamFixture{addr: freeport.Addr(t), dir: t.TempDir()}
	f.ns = startNATS(t, f.addr, f.dir)
	t.Cleanup(func() { f.ns.Shutdown(); f.ns.WaitForShutdown() })
	nc, err := nats.Connect("nats://"+f.addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f.nc = nc
	f.js, err = jetstream.New(nc)
	require.NoError(t, err)
	cfg.Name, cfg.Subjects = "MCP_AUDIT", []string{"mcp.audit.>"}
	_, err = f.js.CreateStream(context.Background(), cfg)
	require.NoError(t, err)
	return f
}

// restart stops the NATS server for down, then starts it again.
func (f *streamFixture) restart(t *testing.T, down time.Duration) {
	t.Helper()
	f.ns.Shutdown()
	f.ns.WaitForShutdown()
	time.Sleep(down)
	f.ns = startNATS(t, f.addr, f.dir)
}

type publishResult struct {
	st  PublishStats
	err error
}

// publish runs Publish in the background.
func (f *streamFixture) publish(opts PublishOptions, next func() (audit.Event, bool, error)) <-chan publishResult {
	opts.URL = "nats://" + f.addr
	done := make(chan publishResult, 1)
	go func() {
		st, err := Publish(context.Background(), opts, next)
		done <- publishResult{st, err}
	}()
	return done
}

func waitPublish(t *testing.T, done <-chan publishResult) publishResult {
	t.Helper()
	select {
	case r := <-done:
		t.Logf("published %d events in %d messages, %d sent again, %d duplicates, %d failed: %v",
			r.st.Published, r.st.Messages, r.st.Resent, r.st.Duplicates, r.st.Failed, r.err)
		return r
	case <-time.After(2 * time.Minute):
		t.Fatal("publish did not end")
	}
	return publishResult{}
}

// holdsEachOnce reads the whole stream back: events 0..n-1, each once.
func (f *streamFixture) holdsEachOnce(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, f.nc.IsConnected, 10*time.Second, 20*time.Millisecond)
	cons, err := f.js.OrderedConsumer(context.Background(), "MCP_AUDIT", jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	seen := map[string]int{}
	lines := 0
	for lines < n {
		batch, err := cons.FetchNoWait(1000)
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			got++
			sc := bufio.NewScanner(bytes.NewReader(m.Data()))
			for sc.Scan() {
				var e struct{ ID string }
				require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
				seen[e.ID]++
				lines++
			}
		}
		if got == 0 {
			break
		}
	}
	assert.Equal(t, n, lines, "events in the stream")
	assert.Len(t, seen, n, "distinct events")
	for i := range n {
		if id := fmt.Sprintf("ev-%07d", i); seen[id] != 1 {
			t.Fatalf("%s is in the stream %d times", id, seen[id])
		}
	}
}

// TestPublishBatchedAcrossAServerRestart: a batched publish goes on while
// the NATS server restarts; what was not acknowledged is sent again with the
// same Nats-Msg-Id, and the stream holds every event exactly once.
func TestPublishBatchedAcrossAServerRestart(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	const n = 40_000
	done := f.publish(PublishOptions{Batch: 64, Rate: 20_000, AckWait: 500 * time.Millisecond}, events(0, n, "pve"))
	time.Sleep(500 * time.Millisecond)
	f.restart(t, 300*time.Millisecond)
	r := waitPublish(t, done)
	require.NoError(t, r.err)
	assert.GreaterOrEqual(t, r.st.Published, n)
	assert.LessOrEqual(t, r.st.Messages, 2*n/64, "batched")
	f.holdsEachOnce(t, n)
}

// Events go to the configured subject with the server's name in place of
// its wildcard, as `publish` and `simulate --nats` pass nats.subject: never
// to a subject that keeps the wildcard as a token, which a gateway user
// allowed only its own server's subject may not publish to.
func TestPublishSendsOnTheConfiguredSubject(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{})
	for i, subject := range []string{"mcp.audit.>", "mcp.audit.", ""} {
		r := waitPublish(t, f.publish(PublishOptions{Subject: subject, Batch: 2}, events(3*i, 3*i+3, "pve")))
		require.NoError(t, r.err, subject)
	}
	cons, err := f.js.OrderedConsumer(context.Background(), "MCP_AUDIT", jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(100)
	require.NoError(t, err)
	n := 0
	for m := range batch.Messages() {
		n++
		assert.Equal(t, "mcp.audit.pve", m.Subject())
	}
	assert.Equal(t, 3*2, n, "two messages of each publish")
}

// Publish ends only once it knows what became of every message: the
// client counts a message done before its acknowledgement's handler runs,
// and a publish that ended in that moment reported the last events neither
// published nor failed, a refused one as success.
func TestPublishWaitsForTheLastHandlers(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{})
	more := events(0, 2, "pve") // the first is sent alone, the second asynchronously
	next := func() (audit.Event, bool, error) {
		e, ok, err := more()
		if !ok {
			// The second's acknowledgement arrives and its handler starts
			// (held back for 200 ms) before Publish waits for the rest.
			time.Sleep(50 * time.Millisecond)
		}
		return e, ok, err
	}
	r := waitPublish(t, f.publish(PublishOptions{Batch: 1, handlerDelay: 200 * time.Millisecond}, next))
	require.NoError(t, r.err)
	assert.Equal(t, 2, r.st.Published)
	assert.Equal(t, 2, r.st.Messages)
}

// A message lost with the connection does not use up an attempt: an outage
// far longer than two attempts' backoff loses nothing.
func TestPublishOutlastsALongOutage(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	const n = 5_000
	done := f.publish(PublishOptions{Batch: 1, Rate: 5_000, Attempts: 2, AckWait: 300 * time.Millisecond}, events(0, n, "pve"))
	time.Sleep(300 * time.Millisecond)
	f.restart(t, 3*time.Second)
	r := waitPublish(t, done)
	require.NoError(t, r.err)
	assert.Zero(t, r.st.Failed)
	f.holdsEachOnce(t, n)
}

// The first message, sent on its own, is sent again like any other when the
// server goes away before it is acknowledged, for longer than a send waits.
func TestPublishRetriesTheFirstMessage(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	asked, release := make(chan struct{}), make(chan struct{})
	rest := events(0, 10, "pve")
	first := true
	done := f.publish(PublishOptions{Batch: 1, AckWait: 300 * time.Millisecond}, func() (audit.Event, bool, error) {
		if first {
			first = false
			close(asked)
			<-release // the server is down when the first event goes out
		}
		return rest()
	})
	<-asked
	f.ns.Shutdown()
	f.ns.WaitForShutdown()
	close(release)
	time.Sleep(11 * time.Second) // longer than the 10 s the first send once waited
	f.ns = startNATS(t, f.addr, f.dir)
	r := waitPublish(t, done)
	require.NoError(t, r.err)
	f.holdsEachOnce(t, 10)
}

// A stream that refuses message after message (here: full, discarding new
// messages) stops the publish early with the stream's reason, instead of
// every remaining message waiting out its attempts.
func TestPublishStopsWhenTheStreamRefusesEverything(t *testing.T) {
	f := newStreamFixture(t, jetstream.StreamConfig{MaxMsgs: 10, Discard: jetstream.DiscardNew})
	const n = 200_000
	r := waitPublish(t, f.publish(PublishOptions{Batch: 1, RefusalSpan: time.Second}, events(0, n, "pve")))
	require.Error(t, r.err)
	assert.ErrorIs(t, r.err, errRefused)
	assert.Contains(t, r.err.Error(), "maximum messages exceeded")
	assert.Equal(t, 10, r.st.Published)
	assert.Positive(t, r.st.Failed)
	assert.Less(t, r.st.Published+r.st.Failed, n/2, "it stopped long before the end")
}

// A stream away for a moment (deleted and created again, as in a leader
// election) refuses every message in flight; the publish waits it out and
// loses nothing.
func TestPublishWaitsOutAStreamAwayForAMoment(t *testing.T) {
	cfg := jetstream.StreamConfig{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}, Duplicates: 10 * time.Minute}
	f := newStreamFixture(t, cfg)
	const n = 10_000
	done := f.publish(PublishOptions{Batch: 1, Rate: 5_000, RefusalSpan: 3 * time.Second}, events(0, n, "pve"))
	time.Sleep(300 * time.Millisecond)
	ctx := context.Background()
	require.NoError(t, f.js.DeleteStream(ctx, "MCP_AUDIT"))
	time.Sleep(time.Second)
	_, err := f.js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	r := waitPublish(t, done)
	require.NoError(t, r.err)
	assert.Zero(t, r.st.Failed)
	// The deleted stream's messages are gone: the new one holds the rest,
	// and every event was acknowledged by one of the two.
	assert.GreaterOrEqual(t, r.st.Published, n)
}
