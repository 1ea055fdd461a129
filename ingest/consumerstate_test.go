package ingest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The consumer keeps its state in the server's memory: nothing of it is
// written to the store, and a server restart loses it. The source then
// starts after its checkpoint: nothing it stored is delivered again, and
// nothing after it is lost.
func TestConsumerStateInMemoryResumesFromTheCheckpoint(t *testing.T) {
	srv := newRestartableServer(t)
	spec := ConsumerSpec{Stream: "MCP_AUDIT", Durable: "mcptrail", BatchSize: 50, AckWait: time.Hour}
	setup := func(js jetstream.JetStream) jetstream.Consumer {
		_, err := EnsureStream(context.Background(), js, StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
		require.NoError(t, err)
		c, err := EnsureConsumer(context.Background(), js, spec)
		require.NoError(t, err)
		assert.True(t, c.CachedInfo().Config.MemoryStorage, "the consumer's state is kept in memory")
		return c
	}
	sink := &memSink{}
	var mu sync.Mutex
	redelivered := 0
	source := func(js jetstream.JetStream, c jetstream.Consumer) *JetStreamSource {
		return &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 50,
			MaxWait: 200 * time.Millisecond, OnBatch: func(r BatchReport) {
				mu.Lock()
				redelivered += r.Redelivered
				mu.Unlock()
			}}
	}

	js := srv.start()
	c := setup(js)
	jsPublish(t, js, 0, 200)
	stop := runSource(t, source(js, c))
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 200 }, 15*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	stop()
	matches, err := filepath.Glob(filepath.Join(srv.store, "jetstream", "*", "streams", "MCP_AUDIT", "obs", "*"))
	require.NoError(t, err)
	assert.Empty(t, matches, "no consumer state in the server's store")
	srv.stop()

	js = srv.start()
	c = setup(js) // as serve does at every start
	jsPublish(t, js, 200, 250)
	runSource(t, source(js, c))
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 250 }, 15*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	mu.Lock()
	assert.Zero(t, redelivered, "stored messages delivered again after the restart")
	mu.Unlock()
	assert.Len(t, sink.storedOnce(t), 250)
}

// An earlier mcptrail's consumer keeps its state on disk, or acknowledges
// each batch, neither of which the server can change in place:
// EnsureConsumer replaces a consumer of an mcptrail daemon and refuses to
// touch anyone else's.
func TestEnsureConsumerReplacesAnOnDiskConsumer(t *testing.T) {
	_, js := jsServer(t)
	ctx := context.Background()
	_, err := EnsureStream(ctx, js, StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	require.NoError(t, err)
	for _, tc := range []struct {
		durable, description string
		memory               bool // only its ack policy differs
		replaced             bool
	}{
		{"mcptrail", ConsumerDescription, false, true},
		{"mcptrail-acks", ConsumerDescription, true, true},
		{"audit-exporter", "another program's", false, false},
	} {
		_, err := js.CreateOrUpdateConsumer(ctx, "MCP_AUDIT", jetstream.ConsumerConfig{
			Durable: tc.durable, Description: tc.description, AckPolicy: jetstream.AckAllPolicy, MemoryStorage: tc.memory})
		require.NoError(t, err)
		c, err := EnsureConsumer(ctx, js, ConsumerSpec{Stream: "MCP_AUDIT", Durable: tc.durable})
		if !tc.replaced {
			require.Error(t, err)
			assert.Contains(t, err.Error(), "not an mcptrail daemon's")
			old, err := js.Consumer(ctx, "MCP_AUDIT", tc.durable)
			require.NoError(t, err, "another program's consumer is kept")
			assert.False(t, old.CachedInfo().Config.MemoryStorage)
			continue
		}
		require.NoError(t, err)
		assert.True(t, c.CachedInfo().Config.MemoryStorage)
		assert.Equal(t, jetstream.AckNonePolicy, c.CachedInfo().Config.AckPolicy)
	}
}
