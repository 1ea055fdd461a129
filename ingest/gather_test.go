package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// numbered stands in for a delivered message of size payload bytes; the
// gatherer calls only its Data.
type numbered struct {
	jetstream.Msg
	n, size int
}

func (m numbered) Data() []byte { return make([]byte, m.size) }

func numbers(fr fetchResult) []int {
	out := make([]int, len(fr.msgs))
	for i, m := range fr.msgs {
		out[i] = m.(numbered).n
	}
	return out
}

func TestGathererHandsOnFullFetchesThenLingers(t *testing.T) {
	g := newGatherer(4, 0)
	for i := range 8 { // as many as may wait
		g.add(numbered{n: i})
	}
	ctx := context.Background()
	for _, want := range [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}} {
		fr, ok := g.next(ctx)
		require.True(t, ok)
		assert.Equal(t, want, numbers(fr))
	}
	t0 := time.Now()
	g.add(numbered{n: 8})
	g.add(numbered{n: 9})
	fr, ok := g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{8, 9}, numbers(fr), "a short fetch after the linger")
	assert.GreaterOrEqual(t, time.Since(t0), fetchLinger/2)
}

func TestGathererDeliversAnErrorAfterTheMessagesBeforeIt(t *testing.T) {
	g := newGatherer(4, 0)
	for i := range 6 {
		g.add(numbered{n: i})
	}
	lost := errors.New("consumer deleted")
	g.fail(lost)
	ctx := context.Background()
	fr, ok := g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{0, 1, 2, 3}, numbers(fr))
	assert.NoError(t, fr.err)
	fr, ok = g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{4, 5}, numbers(fr))
	assert.ErrorIs(t, fr.err, lost)
}

// The handler blocks while two fetches wait, and close releases it.
func TestGathererBlocksTheHandlerUntilTaken(t *testing.T) {
	g := newGatherer(2, 0)
	for i := range 4 {
		g.add(numbered{n: i})
	}
	added := make(chan struct{})
	go func() { g.add(numbered{n: 4}); close(added) }()
	select {
	case <-added:
		t.Fatal("the handler did not wait for room")
	case <-time.After(50 * time.Millisecond):
	}
	fr, ok := g.next(context.Background())
	require.True(t, ok)
	assert.Equal(t, []int{0, 1}, numbers(fr))
	<-added

	g.add(numbered{n: 5}) // 2, 3, 4, 5: full
	released := make(chan struct{})
	go func() { g.add(numbered{n: 6}); close(released) }()
	g.close()
	<-released
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fr, ok = g.next(ctx)
	require.True(t, ok, "what arrived before close is still handed on")
	assert.Equal(t, []int{2, 3}, numbers(fr))
}

// TestGathererBoundsFetchesInBytes: batched messages make fetches by their
// payload, not their number; a message larger than the budget goes alone.
func TestGathererBoundsFetchesInBytes(t *testing.T) {
	g := newGatherer(100, 1000)
	for i := range 5 {
		g.add(numbered{n: i, size: 400})
	}
	ctx := context.Background()
	fr, ok := g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{0, 1}, numbers(fr), "two fit in 1000 bytes, a third would not")
	assert.True(t, fr.full, "more are waiting: a backlog")
	fr, ok = g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{2, 3}, numbers(fr))
	g.add(numbered{n: 5, size: 3000})
	fr, ok = g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{4}, numbers(fr), "the large one does not join")
	fr, ok = g.next(ctx)
	require.True(t, ok)
	assert.Equal(t, []int{5}, numbers(fr), "and goes alone")
}

// A small message after one that did not fit waits for the next fetch:
// fetches keep delivery order, whatever fits where.
func TestGathererKeepsDeliveryOrderAcrossTheByteBudget(t *testing.T) {
	g := newGatherer(100, 1000)
	for i, size := range []int{600, 600, 100, 300, 50} {
		g.add(numbered{n: i, size: size})
	}
	ctx := context.Background()
	for _, want := range [][]int{{0}, {1, 2, 3}} {
		fr, ok := g.next(ctx)
		require.True(t, ok)
		assert.Equal(t, want, numbers(fr))
	}
}

// TestFetchBytes: by default a fetch holds at most 1 MiB of payload (about
// 2,000 single events, or 35 messages of 64), whatever the messages'
// batching: all of it stays on the Go heap until decoded. A larger
// max_message_bytes raises it, so that the largest message fits in a pull.
func TestFetchBytes(t *testing.T) {
	assert.Equal(t, 1<<20, FetchBytes(DefaultFetchSize, DefaultMaxMessageBytes))
	assert.Equal(t, 1<<20, FetchBytes(100, DefaultMaxMessageBytes), "one largest message at least")
	assert.Equal(t, 8<<20, FetchBytes(DefaultFetchSize, 8<<20))
	assert.Equal(t, 4<<20, FetchBytes(16384, DefaultMaxMessageBytes), "fetch_size scales it")
}

// sized is a delivered message of a payload shared by all (the benchmark
// measures the gatherer, not allocating payloads).
type sized struct {
	jetstream.Msg
	b []byte
}

func (m sized) Data() []byte { return m.b }

// BenchmarkGathererSingleEvents: one op is one single-event message (about
// 550 bytes, as simulate writes them) added by the Consume handler and taken
// in fetches of the daemon's defaults, which a 1 MiB budget closes at
// ~1,900 messages.
func BenchmarkGathererSingleEvents(b *testing.B) { benchmarkGatherer(b, 550) }

// BenchmarkGathererBatched: one op is a message of 64 events (~35 KB); 1 MiB
// closes a fetch at ~30 of them.
func BenchmarkGathererBatched(b *testing.B) { benchmarkGatherer(b, 64*550) }

func benchmarkGatherer(b *testing.B, size int) {
	g := newGatherer(DefaultFetchSize, FetchBytes(DefaultFetchSize, DefaultMaxMessageBytes))
	m := sized{b: make([]byte, size)}
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for taken := 0; taken < b.N; {
			fr, ok := g.next(ctx)
			if !ok {
				return
			}
			taken += len(fr.msgs)
		}
	}()
	b.ResetTimer()
	for range b.N {
		g.add(m)
	}
	<-done
}
