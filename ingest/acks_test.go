package ingest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChooseAcks(t *testing.T) {
	for _, tc := range []struct {
		want      Acks
		retention jetstream.RetentionPolicy
		version   string
		got       Acks
	}{
		{AcksAuto, jetstream.LimitsPolicy, "2.14.0", AcksNone},
		{AcksAuto, jetstream.LimitsPolicy, "2.15.2", AcksNone},
		{AcksAuto, jetstream.LimitsPolicy, "3.0.0-beta.1", AcksNone},
		{AcksAuto, jetstream.LimitsPolicy, "2.12.4", AcksBatch}, // no consumer reset
		{AcksAuto, jetstream.LimitsPolicy, "", AcksBatch},
		{AcksAuto, jetstream.LimitsPolicy, "garbled", AcksBatch},
		{AcksAuto, jetstream.InterestPolicy, "2.15.2", AcksBatch}, // deletes what is delivered to AckNone
		{AcksAuto, jetstream.WorkQueuePolicy, "2.15.2", AcksEach}, // the only policy it accepts
		{AcksEach, jetstream.LimitsPolicy, "2.15.2", AcksEach},    // asked for
		{AcksBatch, jetstream.LimitsPolicy, "2.15.2", AcksBatch},
	} {
		assert.Equal(t, tc.got, ChooseAcks(tc.want, tc.retention, tc.version), "%s on a %s stream, server %q", tc.want, tc.retention, tc.version)
	}
}

// The consumer acknowledges nothing only on a limits stream: an interest
// stream would delete what is merely delivered, and a work-queue stream
// accepts only consumers that acknowledge every message.
func TestEnsureConsumerAcknowledgesNothingOnlyOnALimitsStream(t *testing.T) {
	_, js := jsServer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		retention jetstream.RetentionPolicy
		policy    jetstream.AckPolicy
	}{
		{jetstream.LimitsPolicy, jetstream.AckNonePolicy},
		{jetstream.InterestPolicy, jetstream.AckAllPolicy},
		{jetstream.WorkQueuePolicy, jetstream.AckExplicitPolicy},
	} {
		name := "S_" + tc.retention.String()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"s." + tc.retention.String() + ".>"}, Retention: tc.retention})
		require.NoError(t, err)
		c, err := EnsureConsumer(ctx, js, ConsumerSpec{Stream: name, Durable: "mcptrail"})
		require.NoError(t, err, "stream with %s retention", tc.retention)
		assert.Equal(t, tc.policy, c.CachedInfo().Config.AckPolicy, "stream with %s retention", tc.retention)
	}
}

// A consumer that acknowledges nothing has its ack floor at what it
// delivered: what a crashed run fetched and never stored must still come
// again, which only the checkpoint can tell.
func TestJetStreamAckNoneRedeliversWhatWasFetchedAndNeverStored(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetupAcks(t, js, time.Hour, AcksNone)
	jsPublish(t, js, 0, 60)
	sink := &memSink{}
	// The first 20 stored, as a run that committed one batch would have.
	run := func(n int) {
		b, err := c.Fetch(n, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		var msgs []Message
		for m := range b.Messages() {
			md, err := m.Metadata()
			require.NoError(t, err)
			msgs = append(msgs, Message{Data: m.Data(), Source: m.Subject(), Seq: md.Sequence.Stream})
		}
		require.Len(t, msgs, n)
		events, _, _ := DecodeMessages(context.Background(), msgs, audit.Options{}, 2)
		_, err = sink.Append(context.Background(), Batch{Events: events, Checkpoint: &Checkpoint{Consumer: "MCP_AUDIT/mcptrail", Seq: msgs[n-1].Seq}})
		require.NoError(t, err)
	}
	run(20)
	// The crash: 30 more delivered, never stored.
	b, err := c.Fetch(30, jetstream.FetchMaxWait(2*time.Second))
	require.NoError(t, err)
	for range b.Messages() {
	}
	info, err := c.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(50), info.AckFloor.Stream, "an AckNone consumer's ack floor is what it delivered")

	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 50, MaxWait: 200 * time.Millisecond})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 60 }, 10*time.Second, 20*time.Millisecond)
	assert.Len(t, sink.storedOnce(t), 60)
	cp, _ := sink.Checkpoint(context.Background(), "MCP_AUDIT/mcptrail")
	assert.Equal(t, uint64(60), cp)
}

// A consumer that received everything and waits (here a shard, beside
// another shard's traffic) must not take the server's count of deliveries
// for a lost one, which would rewind it every two flush intervals.
func TestJetStreamIdleShardLosesNothingAndRewindsNever(t *testing.T) {
	_, js := jsServer(t)
	ctx := context.Background()
	_, err := EnsureStream(ctx, js, StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	require.NoError(t, err)
	c, err := EnsureConsumer(ctx, js, ConsumerSpec{Stream: "MCP_AUDIT", Durable: "shard-pve", FilterSubjects: []string{"mcp.audit.pve"}})
	require.NoError(t, err)
	require.Equal(t, jetstream.AckNonePolicy, c.CachedInfo().Config.AckPolicy)
	jsPublish(t, js, 0, 5)
	sink := &memSink{}
	var errs atomic.Int64
	source := func() *JetStreamSource {
		return &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/shard-pve", BatchSize: 50, MaxWait: 50 * time.Millisecond,
			OnError: func(stage string, err error) { errs.Add(1); t.Logf("%s: %v", stage, err) }}
	}
	stop := runSource(t, source())
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 5 }, 10*time.Second, 10*time.Millisecond)
	for i := 5; i < 25; i++ { // another shard's, while this one waits
		_, err := js.Publish(ctx, "mcp.audit.other", jsEvent(i, "other"))
		require.NoError(t, err)
	}
	time.Sleep(20 * 50 * time.Millisecond) // ten idle checks' pairs
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(5), info.Delivered.Consumer)
	assert.Zero(t, errs.Load(), "an idle shard reported a loss")

	// A restart, with nothing new: the server's deliveries are the previous
	// run's, none of them lost.
	stop()
	runSource(t, source())
	time.Sleep(20 * 50 * time.Millisecond)
	assert.Zero(t, errs.Load(), "a restarted idle shard reported a loss")
	assert.Len(t, sink.storedOnce(t), 5)
}

// failingResets is the real JetStream context with its first consumer
// resets refused, as a server busy electing a leader would.
type failingResets struct {
	jetstream.JetStream
	fails atomic.Int64
}

func (j *failingResets) ResetConsumerToSequence(ctx context.Context, stream, consumer string, seq uint64) (*jetstream.ConsumerResetResponse, error) {
	if j.fails.Add(-1) >= 0 {
		return nil, errors.New("nats: timeout")
	}
	return j.JetStream.ResetConsumerToSequence(ctx, stream, consumer, seq)
}

// Only a rewind brings back what an AckNone consumer delivered and the
// source did not store: a rewind that fails is tried again, where an AckAll
// consumer could fall back on the ack wait.
func TestJetStreamAckNoneRetriesAFailedRewind(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetupAcks(t, js, time.Hour, AcksNone)
	jsPublish(t, js, 0, 40)
	// A crashed run: 25 delivered, none stored.
	b, err := c.Fetch(25, jetstream.FetchMaxWait(2*time.Second))
	require.NoError(t, err)
	for range b.Messages() {
	}
	flaky := &failingResets{JetStream: js}
	flaky.fails.Store(2)
	sink := &memSink{}
	var mu sync.Mutex
	var failed []string
	runSource(t, &JetStreamSource{Consumer: c, JS: flaky, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 50, MaxWait: 100 * time.Millisecond,
		OnError: func(stage string, err error) {
			mu.Lock()
			defer mu.Unlock()
			failed = append(failed, err.Error())
		}})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 40 }, 10*time.Second, 10*time.Millisecond)
	assert.Len(t, sink.storedOnce(t), 40)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, failed, 2, "each failed rewind is reported")
	// The consumer's ack floor (25: what it delivered) says nothing of
	// what is stored, and the error does not name it.
	assert.Contains(t, failed[0], "to stream sequence 1 (after the checkpoint 0)")
	assert.NotContains(t, failed[0], "ack floor")
}
