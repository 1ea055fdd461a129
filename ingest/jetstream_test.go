package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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

	"github.com/mcptrail/mcptrail/audit"
)

// restartableServer is a real NATS server with JetStream on a store folder
// that outlives it, so that a test can stop it and start it again.
type restartableServer struct {
	t          *testing.T
	store      string
	maxPayload int32 // the server's max_payload; 0: its default
	ns         *natsserver.Server
	nc         *nats.Conn
}

func (r *restartableServer) start() jetstream.JetStream {
	r.t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, MaxPayload: r.maxPayload,
		StoreDir: r.store, NoLog: true, NoSigs: true,
	})
	require.NoError(r.t, err)
	ns.Start()
	require.True(r.t, ns.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(r.t, err)
	r.ns, r.nc = ns, nc
	js, err := jetstream.New(nc)
	require.NoError(r.t, err)
	return js
}

func (r *restartableServer) stop() {
	if r.ns == nil {
		return
	}
	r.nc.Close()
	r.ns.Shutdown()
	r.ns.WaitForShutdown()
	r.ns = nil
}

func newRestartableServer(t *testing.T) *restartableServer {
	r := &restartableServer{t: t, store: t.TempDir()}
	t.Cleanup(r.stop)
	return r
}

// jsServer starts a real NATS server with JetStream in a temp dir.
func jsServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv := newRestartableServer(t)
	js := srv.start()
	return srv.nc, js
}

func jsEvent(i int, server string) []byte {
	return fmt.Appendf(nil, `{"id":"e%06d","ts":"2026-01-02T03:04:05.%09dZ","server":%q,"tool":"vm_list","decision":"allowed"}`, i, i, server)
}

// jsSetup creates the stream and the consumer as serve does (on the test
// server, a limits stream on 2.14 or later: AckNone).
func jsSetup(t *testing.T, js jetstream.JetStream, ackWait time.Duration) jetstream.Consumer {
	return jsSetupAcks(t, js, ackWait, AcksAuto)
}

func jsSetupAcks(t *testing.T, js jetstream.JetStream, ackWait time.Duration, acks Acks) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	_, err := EnsureStream(ctx, js, StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	require.NoError(t, err)
	c, err := EnsureConsumer(ctx, js, ConsumerSpec{Stream: "MCP_AUDIT", Durable: "mcptrail", BatchSize: 50, AckWait: ackWait, Acks: acks})
	require.NoError(t, err)
	return c
}

func jsPublish(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		_, err := js.Publish(context.Background(), "mcp.audit.pve", jsEvent(i, "pve"))
		require.NoError(t, err)
	}
}

// memSink stores batches in memory without id de-duplication, so that tests
// see exactly what the source hands over.
type memSink struct {
	mu      sync.Mutex
	events  []audit.Event
	dead    []DeadLetter
	cp      map[string]uint64
	cpAt    map[string]time.Time // when each checkpoint was stored (CheckpointTimer)
	appends int
	largest int // the most events (and dead letters) in one batch
	failN   int // fail this many appends first
}

func (s *memSink) Append(ctx context.Context, b Batch) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failN > 0 {
		s.failN--
		return Result{}, errors.New("disk full")
	}
	s.appends++
	s.largest = max(s.largest, len(b.Events)+len(b.DeadLetters))
	s.events = append(s.events, b.Events...)
	s.dead = append(s.dead, b.DeadLetters...)
	if b.Checkpoint != nil {
		if s.cp == nil {
			s.cp = map[string]uint64{}
		}
		s.cp[b.Checkpoint.Consumer] = b.Checkpoint.Seq
		if s.cpAt == nil {
			s.cpAt = map[string]time.Time{}
		}
		s.cpAt[b.Checkpoint.Consumer] = time.Now()
	}
	return Result{Ingested: len(b.Events), Rejected: len(b.DeadLetters)}, nil
}

func (s *memSink) Checkpoint(ctx context.Context, consumer string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp[consumer], nil
}

func (s *memSink) CheckpointAt(ctx context.Context, consumer string) (uint64, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp[consumer], s.cpAt[consumer], nil
}

// storedOnce fails t for each id stored twice and returns the ids stored.
func (s *memSink) storedOnce(t *testing.T) map[string]bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range s.events {
		assert.False(t, seen[e.ID], "duplicate %s", e.ID)
		seen[e.ID] = true
	}
	return seen
}

func (s *memSink) count() (events, dead int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events), len(s.dead)
}

// runSource runs src until stop is called or the test ends; stop cancels
// it and checks that Run returns nil within 10 s.
func runSource(t *testing.T, src interface{ Run(context.Context) error }) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("source did not stop within 10 s")
		}
	})
	t.Cleanup(stop)
	return stop
}

func waitDrained(t *testing.T, c jetstream.Consumer) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 15*time.Second, 20*time.Millisecond, "consumer not drained")
}

// A crash after the commit and before the ack: the batch is stored with its
// checkpoint but not acknowledged. The restarted source positions the
// consumer after the checkpoint, so the batch is not read again; where it
// cannot (no JetStream API to rewind with), JetStream redelivers the batch
// after the ack wait and the source skips it by the checkpoint. Either way
// it is stored once and new messages follow.
func TestJetStreamRedeliveryAfterCommitWithoutAck(t *testing.T) {
	for _, tc := range []struct {
		name        string
		acks        Acks
		rewind      bool
		redelivered int
	}{
		{"acknowledging nothing, rewound past the checkpoint", AcksNone, true, 0},
		{"AckAll, rewound past the checkpoint", AcksBatch, true, 0},
		{"AckAll, redelivered after the ack wait", AcksBatch, false, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := jsServer(t)
			ackWait := time.Hour // the rewind must not wait for it
			if !tc.rewind {
				ackWait = time.Second
			}
			c := jsSetupAcks(t, js, ackWait, tc.acks)
			jsPublish(t, js, 0, 100)
			sink := &memSink{}

			// The "crashed" process: fetch, store with the checkpoint, never ack.
			b, err := c.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
			require.NoError(t, err)
			var msgs []Message
			var last uint64
			for m := range b.Messages() {
				md, err := m.Metadata()
				require.NoError(t, err)
				msgs = append(msgs, Message{Data: m.Data(), Source: m.Subject(), Seq: md.Sequence.Stream})
				last = md.Sequence.Stream
			}
			require.Len(t, msgs, 100)
			events, dead, _ := DecodeMessages(context.Background(), msgs, audit.Options{}, 2)
			require.Empty(t, dead)
			_, err = sink.Append(context.Background(), Batch{Events: events, Checkpoint: &Checkpoint{Consumer: "MCP_AUDIT/mcptrail", Seq: last}})
			require.NoError(t, err)

			// The restarted process.
			var mu sync.Mutex
			redelivered := 0
			src := &JetStreamSource{
				Consumer: c, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 50, MaxWait: 200 * time.Millisecond,
				OnBatch: func(r BatchReport) {
					mu.Lock()
					redelivered += r.Redelivered
					mu.Unlock()
				},
			}
			if tc.rewind {
				src.JS = js
			}
			runSource(t, src)
			jsPublish(t, js, 100, 130)
			require.Eventually(t, func() bool { n, _ := sink.count(); return n == 130 }, 15*time.Second, 20*time.Millisecond)
			waitDrained(t, c)
			mu.Lock()
			assert.Equal(t, tc.redelivered, redelivered, "messages delivered again")
			mu.Unlock()
			assert.Len(t, sink.storedOnce(t), 130)
			cp, _ := sink.Checkpoint(context.Background(), "MCP_AUDIT/mcptrail")
			assert.Equal(t, uint64(130), cp)
		})
	}
}

// A database error: nothing is acknowledged until the batch is stored.
func TestJetStreamDatabaseErrorIsRetriedWithoutAck(t *testing.T) {
	for _, acks := range []Acks{AcksNone, AcksBatch} {
		t.Run(acks.String(), func(t *testing.T) { testDatabaseErrorIsRetried(t, acks) })
	}
}

func testDatabaseErrorIsRetried(t *testing.T, acks Acks) {
	_, js := jsServer(t)
	c := jsSetupAcks(t, js, time.Minute, acks)
	jsPublish(t, js, 0, 40)
	sink := &memSink{failN: 3}
	var mu sync.Mutex
	var stages []string
	runSource(t, &JetStreamSource{
		Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 200 * time.Millisecond,
		OnError: func(stage string, err error) {
			mu.Lock()
			stages = append(stages, stage)
			mu.Unlock()
		},
	})
	// While the sink fails, the batch stays unacknowledged.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stages) >= 1
	}, 5*time.Second, 10*time.Millisecond)
	if acks == AcksBatch {
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 40, info.NumAckPending)
	}

	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 40 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	mu.Lock()
	assert.Equal(t, []string{"append", "append", "append"}, stages)
	mu.Unlock()
}

// Undecodable and over-size payloads become dead letters with subject and
// stream sequence, and are acknowledged so that they are not redelivered.
func TestJetStreamDeadLettersAreAcked(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	ctx := context.Background()
	jsPublish(t, js, 0, 3)
	for _, p := range [][]byte{
		[]byte(`{not json`),
		fmt.Appendf(nil, `{"id":"big","ts":"2026-01-02T03:04:05Z","server":"pve","tool":"t","decision":"allowed","reason":"%0900d"}`, 0),
		[]byte(`{"id":"x","server":"pve","tool":"t","decision":"allowed"}`),
	} {
		_, err := js.Publish(ctx, "mcp.audit.bad", p)
		require.NoError(t, err)
	}
	sink := &memSink{}
	runSource(t, &JetStreamSource{
		Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 200 * time.Millisecond,
		Decode: audit.Options{MaxEventBytes: 512},
	})
	require.Eventually(t, func() bool { e, d := sink.count(); return e == 3 && d == 3 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	reasons := map[string]uint64{}
	for _, d := range sink.dead {
		assert.Equal(t, "mcp.audit.bad", d.Source)
		assert.NotEmpty(t, d.Raw)
		assert.LessOrEqual(t, len(d.Raw), 512)
		reasons[d.Reason] = d.Seq
	}
	assert.Equal(t, map[string]uint64{audit.ReasonMalformedJSON: 4, audit.ReasonTooLarge: 5, audit.ReasonMissingTS: 6}, reasons)
}

// An event is stored only from its own server's subject: one that names
// another server is dead-lettered as subject_mismatch (a gateway allowed to
// publish to mcp.audit.a must not write events for b). Server names that are
// not one subject token travel as SubjectToken writes them.
func TestJetStreamSubjectMismatchIsDeadLettered(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	ctx := context.Background()
	for i, m := range [][2]string{
		{"mcp.audit.pve", "pve"}, {"mcp.audit.other", "pve"}, {"mcp.audit.a_b", "a.b"}, {"mcp.audit.prod.pve", "pve"},
	} {
		_, err := js.Publish(ctx, m[0], jsEvent(i, m[1]))
		require.NoError(t, err)
	}
	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 100 * time.Millisecond})
	require.Eventually(t, func() bool { e, d := sink.count(); return e+d == 4 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.dead, 1)
	assert.Equal(t, audit.ReasonSubjectMismatch, sink.dead[0].Reason)
	assert.Equal(t, "mcp.audit.other", sink.dead[0].Source)
	assert.Contains(t, sink.dead[0].Detail, `server "pve"`)
	assert.Len(t, sink.events, 3)
}

// A stream deleted and recreated while the daemon was down restarts its
// sequences: told by a last sequence below the stored checkpoint, or, when
// it already holds more messages, by its creation after the checkpoint was
// stored; the source reads it from its first message, not past the old
// checkpoint.
func TestJetStreamRecreatedStreamIgnoresOldCheckpoint(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	jsPublish(t, js, 0, 5)
	st, err := js.Stream(context.Background(), "MCP_AUDIT")
	require.NoError(t, err)
	const key = "MCP_AUDIT/mcptrail"
	// stored reads the stream with checkpoint cp, stored at "at", until
	// want events are stored, and returns their ids.
	stored := func(c jetstream.Consumer, cp uint64, at time.Time, want int) map[string]bool {
		sink := &memSink{cp: map[string]uint64{key: cp}, cpAt: map[string]time.Time{key: at}}
		runSource(t, &JetStreamSource{Consumer: c, JS: js, Stream: st, Sink: sink, CheckpointKey: key, BatchSize: 50, MaxWait: 200 * time.Millisecond})
		require.Eventually(t, func() bool { n, _ := sink.count(); return n == want }, 10*time.Second, 20*time.Millisecond)
		waitDrained(t, c)
		return sink.storedOnce(t)
	}
	consumer := func(name string) jetstream.Consumer {
		c, err := EnsureConsumer(context.Background(), js, ConsumerSpec{Stream: "MCP_AUDIT", Durable: name, BatchSize: 50, AckWait: time.Minute})
		require.NoError(t, err)
		return c
	}
	created := st.CachedInfo().Created
	assert.Len(t, stored(c, 1000, time.Time{}, 5), 5, "a checkpoint past the stream's last sequence")
	seen := stored(consumer("younger"), 3, created.Add(-time.Hour), 5)
	for i := range 5 {
		assert.True(t, seen[fmt.Sprintf("e%06d", i)], "e%06d: a stream created after its checkpoint", i)
	}
	// A checkpoint stored after the stream was created numbers its messages.
	assert.Equal(t, map[string]bool{"e000003": true, "e000004": true}, stored(consumer("older"), 3, created.Add(time.Minute), 2), "the messages after the checkpoint")
}

// flakyStream fails its first Info calls, as a stream whose leader is being
// elected answers.
type flakyStream struct {
	jetstream.Stream
	fails atomic.Int32
}

func (s *flakyStream) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: timeout")
	}
	return s.Stream.Info(ctx, opts...)
}

// The recreated stream is noticed even when the stream cannot say what it
// is at once: the source asks again instead of reading the new stream by
// the old stream's checkpoint, which would pass over its first messages
// for good.
func TestJetStreamRecreatedStreamIsNoticedAfterAFailedInfo(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	jsPublish(t, js, 0, 5)
	st, err := js.Stream(context.Background(), "MCP_AUDIT")
	require.NoError(t, err)
	const key = "MCP_AUDIT/mcptrail"
	flaky := &flakyStream{Stream: st}
	flaky.fails.Store(2)
	sink := &memSink{cp: map[string]uint64{key: 1000}, cpAt: map[string]time.Time{key: time.Now().Add(-time.Hour)}}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Stream: flaky, Sink: sink, CheckpointKey: key, BatchSize: 50, MaxWait: 200 * time.Millisecond})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 5 }, 10*time.Second, 20*time.Millisecond)
	assert.Len(t, sink.storedOnce(t), 5)
}

func TestEnsureStreamUpdatesLimitsAndKeepsSubjects(t *testing.T) {
	_, js := jsServer(t)
	ctx := context.Background()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MCP_AUDIT", Subjects: []string{"other.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	st, err := EnsureStream(ctx, js, StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}, MaxBytes: 1 << 30})
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	assert.Equal(t, []string{"other.>", "mcp.audit.>"}, cfg.Subjects)
	assert.Equal(t, DefaultStreamMaxAge, cfg.MaxAge)
	assert.Equal(t, int64(1<<30), cfg.MaxBytes)
	assert.Equal(t, DefaultDuplicates, cfg.Duplicates)

	// Nats-Msg-Id de-duplication within the window.
	for range 2 {
		_, err = js.Publish(ctx, "mcp.audit.pve", jsEvent(1, "pve"), jetstream.WithMsgID("e000001"))
		require.NoError(t, err)
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs)
}

// droppingConsumer loses one delivery between the server and the source,
// as a client-side drop would.
type droppingConsumer struct {
	jetstream.Consumer
	seq     uint64 // stream sequence to lose, once
	dropped atomic.Bool
}

func (c *droppingConsumer) Consume(handler jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	return c.Consumer.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil && md.Sequence.Stream == c.seq && c.dropped.CompareAndSwap(false, true) {
			return
		}
		handler(m)
	}, opts...)
}

// A delivery that never reaches the source must not be acknowledged by a
// later AckAll or passed over by the checkpoint: the source notices the gap
// in delivery sequences, drops what it holds unstored and rewinds the
// consumer, which delivers the lost message again. The last delivery lost,
// with nothing after it to show a gap, comes back after the ack wait to an
// AckAll consumer, and to one that acknowledges nothing because the source
// asks the server what it delivered once nothing arrived for two flush
// intervals.
func TestJetStreamLostDeliveryRewinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		acks Acks
		lost uint64
	}{
		{"acknowledging nothing", AcksNone, 8},
		{"AckAll", AcksBatch, 8},
		{"acknowledging nothing, the last delivery", AcksNone, 20},
		// The first delivery after the start's rewind: the reset restarts
		// delivery sequences at 1, so delivery 2 arriving first is a gap.
		{"acknowledging nothing, the first delivery", AcksNone, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { testLostDelivery(t, tc.acks, tc.lost) })
	}
}

func testLostDelivery(t *testing.T, acks Acks, lost uint64) {
	_, js := jsServer(t)
	c := jsSetupAcks(t, js, time.Hour, acks)
	jsPublish(t, js, 0, 20)
	lossy := &droppingConsumer{Consumer: c, seq: lost}
	sink := &memSink{}
	var errs sync.Map
	runSource(t, &JetStreamSource{
		Consumer: lossy, JS: js, Sink: sink, BatchSize: 5, FetchSize: 5, MaxWait: time.Second,
		OnError: func(stage string, err error) { errs.Store(err.Error(), stage) },
	})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 20 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	require.True(t, lossy.dropped.Load())
	sink.mu.Lock()
	for i, e := range sink.events {
		assert.Equal(t, fmt.Sprintf("e%06d", i), e.ID)
	}
	sink.mu.Unlock()
	gap := false
	errs.Range(func(k, v any) bool {
		gap = gap || strings.Contains(k.(string), "was lost")
		return true
	})
	assert.True(t, gap, "the gap was not reported")
}

// Batches fill from several fetches while the previous one is stored; every
// message is still stored once, in order, and acknowledged.
func TestJetStreamPipelineExactlyOnce(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	sink := &memSink{}
	var mu sync.Mutex
	var sizes []int
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 64, FetchSize: 16, MaxWait: time.Second,
		OnBatch: func(r BatchReport) { mu.Lock(); sizes = append(sizes, r.Messages); mu.Unlock() }})
	jsPublish(t, js, 0, 1000)
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1000 }, 20*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i, e := range sink.events {
		require.Equal(t, fmt.Sprintf("e%06d", i), e.ID)
	}
	assert.Equal(t, uint64(1000), sink.cp["MCP_AUDIT/mcptrail"])
	mu.Lock()
	defer mu.Unlock()
	assert.Greater(t, slices.Max(sizes), 16, "batches should span several fetches")
	assert.LessOrEqual(t, slices.Max(sizes), 64)
}

// A backlog is stored in batches of exactly BatchSize messages, even when
// the fetch size does not divide it: fetches are split at the batch's end,
// so that each batch is whole DuckDB row groups.
func TestJetStreamBatchesAreCutAtBatchSize(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	jsPublish(t, js, 0, 1000)
	sink := &memSink{}
	var mu sync.Mutex
	var sizes []int
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, FetchSize: 16, MaxWait: 5 * time.Second,
		OnBatch: func(r BatchReport) { mu.Lock(); sizes = append(sizes, r.Messages); mu.Unlock() }})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1000 }, 20*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	sink.mu.Lock()
	for i, e := range sink.events {
		require.Equal(t, fmt.Sprintf("e%06d", i), e.ID)
	}
	sink.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, slices.Repeat([]int{50}, 20), sizes)
}

// The end of a backlog is stored as soon as it is drained, not a flush
// interval later; a trickle of events still waits for the interval.
func TestJetStreamFlushesWhenABacklogIsDrained(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	jsPublish(t, js, 0, 200) // 12 full fetches of 16, then 8
	sink := &memSink{}
	start := time.Now()
	stored := make(chan time.Duration, 10)
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 1000, FetchSize: 16, MaxWait: 5 * time.Second,
		OnBatch: func(r BatchReport) { stored <- time.Since(start) }})
	select {
	case took := <-stored:
		assert.Less(t, took, 4*time.Second)
	case <-time.After(4 * time.Second):
		t.Fatal("the drained backlog waited for the flush interval")
	}
	n, _ := sink.count()
	require.Equal(t, 200, n)

	jsPublish(t, js, 200, 205)
	time.Sleep(time.Second)
	n, _ = sink.count()
	assert.Equal(t, 200, n, "a trickle is stored at the flush interval, not fetch by fetch")
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 205 }, 10*time.Second, 20*time.Millisecond)
}

// consumerToDelete is a stream holding 100 events and the durable consumer
// (spec) that an operator is about to delete, with a sink for the source.
func consumerToDelete(t *testing.T) (jetstream.JetStream, jetstream.Consumer, ConsumerSpec, *memSink) {
	t.Helper()
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	jsPublish(t, js, 0, 100)
	return js, c, ConsumerSpec{Stream: "MCP_AUDIT", Durable: "mcptrail", BatchSize: 50, AckWait: time.Hour}, &memSink{}
}

// An operator deletes the durable consumer while the source runs: the
// source notices, recreates it, and the new consumer's redeliveries of what
// is already stored are skipped by the checkpoint.
func TestJetStreamRecreatesADeletedConsumer(t *testing.T) {
	js, c, spec, sink := consumerToDelete(t)
	var mu sync.Mutex
	var stages []string
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 100 * time.Millisecond,
		OnError:  func(stage string, err error) { mu.Lock(); stages = append(stages, stage+": "+err.Error()); mu.Unlock() },
		Recreate: func(ctx context.Context) (jetstream.Consumer, error) { return EnsureConsumer(ctx, js, spec) }})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 100 }, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, js.DeleteConsumer(context.Background(), "MCP_AUDIT", "mcptrail"))
	jsPublish(t, js, 100, 200)
	require.Eventually(t, func() bool { n, _ := sink.count(); return n >= 200 }, 20*time.Second, 20*time.Millisecond)
	c2, err := js.Consumer(context.Background(), "MCP_AUDIT", "mcptrail")
	require.NoError(t, err)
	waitDrained(t, c2)
	sink.mu.Lock()
	for i, e := range sink.events {
		require.Equal(t, fmt.Sprintf("e%06d", i), e.ID)
	}
	assert.Len(t, sink.events, 200)
	sink.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	assert.NotEmpty(t, stages, "the lost consumer was reported")
}

// The server may refuse to create a deleted consumer again while it still
// removes the deleted one's files (seen under load: code 500, "open
// .../obs/..."): the source tries again at its next fetch instead of
// waiting the ack wait for deliveries that a missing consumer cannot hold.
func TestJetStreamRetriesAFailedRecreate(t *testing.T) {
	js, c, spec, sink := consumerToDelete(t)
	var attempts atomic.Int32
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 100 * time.Millisecond,
		Recreate: func(ctx context.Context) (jetstream.Consumer, error) {
			if attempts.Add(1) == 1 {
				return nil, errors.New("the server still removes the deleted consumer")
			}
			return EnsureConsumer(ctx, js, spec)
		}})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 100 }, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, js.DeleteConsumer(context.Background(), "MCP_AUDIT", "mcptrail"))
	jsPublish(t, js, 100, 200)
	require.Eventually(t, func() bool { n, _ := sink.count(); return n >= 200 }, 15*time.Second, 20*time.Millisecond,
		"stored after a second recreate, not an ack wait (1 min) later")
	assert.GreaterOrEqual(t, attempts.Load(), int32(2))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.events, 200, "each event once: the redeliveries are skipped by the checkpoint")
	for i, e := range sink.events {
		require.Equal(t, fmt.Sprintf("e%06d", i), e.ID)
	}
}

// healthLog records OnHealth and OnRecreate calls.
type healthLog struct {
	mu        sync.Mutex
	states    []string
	recreated []string
}

func (h *healthLog) onHealth(ok bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok {
		reason = "ok"
	}
	h.states = append(h.states, reason)
}

func (h *healthLog) onRecreate(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recreated = append(h.recreated, what)
}

func (h *healthLog) get() (states, recreated []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.states), slices.Clone(h.recreated)
}

// Anyone deletes the stream while the source runs: the source recreates the
// stream and its consumer, reports itself unhealthy meanwhile, and stores
// the events published afterwards although their sequences restart below
// the checkpoint.
func TestJetStreamRecreatesADeletedStream(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	ctx := context.Background()
	sspec := StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}}
	cspec := ConsumerSpec{Stream: "MCP_AUDIT", Durable: "mcptrail", BatchSize: 50, AckWait: time.Hour}
	st, err := js.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	jsPublish(t, js, 0, 100)
	sink := &memSink{}
	var h healthLog
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Stream: st, Sink: sink, BatchSize: 50, MaxWait: 50 * time.Millisecond,
		Recreate:       func(ctx context.Context) (jetstream.Consumer, error) { return EnsureConsumer(ctx, js, cspec) },
		RecreateStream: func(ctx context.Context) (jetstream.Stream, error) { return EnsureStream(ctx, js, sspec) },
		OnRecreate:     h.onRecreate, OnHealth: h.onHealth})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 100 }, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, js.DeleteStream(ctx, "MCP_AUDIT"))
	require.Eventually(t, func() bool { _, r := h.get(); return len(r) == 2 }, 10*time.Second, 20*time.Millisecond)
	jsPublish(t, js, 100, 150)
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 150 }, 10*time.Second, 20*time.Millisecond)
	states, recreated := h.get()
	assert.Equal(t, []string{"stream", "consumer"}, recreated)
	require.Len(t, states, 2)
	assert.Contains(t, states[0], "missing: recreating it")
	assert.Equal(t, "ok", states[1])
	info, err := js.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	assert.Equal(t, uint64(50), info.CachedInfo().State.LastSeq, "a new stream")
}

// A Sink that refuses batches makes the source unhealthy until it stores
// again.
func TestJetStreamFailingCommitIsUnhealthyUntilOneSucceeds(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	jsPublish(t, js, 0, 5)
	sink := &memSink{failN: 3}
	var h healthLog
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, MaxWait: 50 * time.Millisecond, OnHealth: h.onHealth})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 5 }, 10*time.Second, 20*time.Millisecond)
	states, _ := h.get()
	require.Len(t, states, 2)
	assert.Contains(t, states[0], "storing events fails, retrying")
	assert.Equal(t, "ok", states[1])
}

// firstFailSink refuses every batch that holds the event first.
type firstFailSink struct {
	memSink
	first    string
	attempts atomic.Int64
}

func (s *firstFailSink) Append(ctx context.Context, b Batch) (Result, error) {
	if len(b.Events) > 0 && b.Events[0].ID == s.first {
		s.attempts.Add(1)
		return Result{}, errors.New("disk full")
	}
	return s.memSink.Append(ctx, b)
}

// A batch abandoned unstored at shutdown: the batch filling behind it must
// not be stored either, or its checkpoint would pass over the abandoned
// messages and they would be skipped on redelivery.
func TestJetStreamShutdownStoresNothingAfterAnAbandonedBatch(t *testing.T) {
	for _, acks := range []Acks{AcksNone, AcksBatch} {
		t.Run(acks.String(), func(t *testing.T) {
			_, js := jsServer(t)
			c := jsSetupAcks(t, js, time.Hour, acks)
			jsPublish(t, js, 0, 10)
			sink := &firstFailSink{first: "e000000"}
			stop := runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 5, MaxWait: time.Second,
				ShutdownGrace: 100 * time.Millisecond})
			require.Eventually(t, func() bool {
				info, err := c.Info(context.Background())
				return err == nil && info.NumPending == 0 && info.Delivered.Stream == 10 && sink.attempts.Load() >= 2
			}, 5*time.Second, 10*time.Millisecond)
			stop()
			n, _ := sink.count()
			assert.Zero(t, n, "nothing may be stored after an abandoned batch")
			cp, _ := sink.Checkpoint(context.Background(), "MCP_AUDIT/mcptrail")
			assert.Zero(t, cp, "the checkpoint may not pass over the abandoned batch")
			if acks == AcksBatch {
				info, err := c.Info(context.Background())
				require.NoError(t, err)
				assert.Equal(t, uint64(0), info.AckFloor.Stream, "nothing may be acknowledged")
			}
		})
	}
}

// consumerMissing knows the server's answer for a missing consumer however
// it arrives: the client's sentinel errors, or the API error wrapped by a
// call such as consumer info.
func TestConsumerMissing(t *testing.T) {
	apiErr := &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeConsumerNotFound, Description: "consumer not found"}
	assert.True(t, consumerMissing(fmt.Errorf("consumer info: %w", apiErr)))
	assert.True(t, consumerMissing(jetstream.ErrConsumerDeleted))
	assert.False(t, consumerMissing(&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}))
	assert.False(t, consumerMissing(errors.New("nats: no responders available for request")))
}

// TestJetStreamDeliversAMessageLargerThanItsPulls: a server that accepts
// larger messages than ingest.max_message_bytes (an external one) may hold
// a message larger than two fetches; it is delivered and stored, not left
// to stall the consumer (a pull smaller than a message never delivers it,
// and the client reports no error).
func TestJetStreamDeliversAMessageLargerThanItsPulls(t *testing.T) {
	srv := newRestartableServer(t)
	srv.maxPayload = 8 << 20
	js := srv.start()
	c := jsSetup(t, js, time.Hour)

	jsPublish(t, js, 0, 10)
	var lines [][]byte
	for i := 10; i < 30010; i++ {
		lines = append(lines, jsEvent(i, "pve"))
	}
	big := nats.NewMsg("mcp.audit.pve")
	big.Header.Set(contentTypeHeader, BatchContentType)
	big.Data = bytes.Join(lines, []byte("\n"))
	require.Greater(t, len(big.Data), 2*FetchBytes(DefaultFetchSize, DefaultMaxMessageBytes), "larger than two fetches")
	_, err := js.PublishMsg(context.Background(), big)
	require.NoError(t, err)
	jsPublish(t, js, 30010, 30020)

	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50000, MaxWait: time.Second})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 30020 }, 20*time.Second, 20*time.Millisecond,
		"every event, the large message's too")
	assert.Len(t, sink.storedOnce(t), 30020)
}

// A stream that never says what it is (a user that may not read stream
// info) does not keep the source from starting: after a while it goes on
// without the creation time, as it did before asking again.
func TestJetStreamStartsThoughTheStreamNeverSaysWhatItIs(t *testing.T) {
	patience := streamInfoPatience
	streamInfoPatience = 500 * time.Millisecond
	t.Cleanup(func() { streamInfoPatience = patience })
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	jsPublish(t, js, 0, 5)
	st, err := js.Stream(context.Background(), "MCP_AUDIT")
	require.NoError(t, err)
	flaky := &flakyStream{Stream: st}
	flaky.fails.Store(1 << 30)
	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Stream: flaky, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 50, MaxWait: 200 * time.Millisecond})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 5 }, 10*time.Second, 20*time.Millisecond)
}
