package ingest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tidSink is a memSink that notes the thread each batch is stored on.
type tidSink struct {
	memSink
	mu   sync.Mutex
	tids []int
}

func (s *tidSink) Append(ctx context.Context, b Batch) (Result, error) {
	s.mu.Lock()
	s.tids = append(s.tids, syscall.Gettid())
	s.mu.Unlock()
	return s.memSink.Append(ctx, b)
}

// TestJetStreamStoresEveryBatchOnTheStoreThread: StoreThread is called
// once, by the goroutine that then stores every batch (here it locks that
// goroutine to its thread, as threadprio.Favor does: every batch is stored
// on that thread), and its release once, when the source stops.
func TestJetStreamStoresEveryBatchOnTheStoreThread(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Hour)
	jsPublish(t, js, 0, 1000)
	sink := &tidSink{}
	var calls, releases atomic.Int32
	var storeTID atomic.Int64
	stop := runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, FetchSize: 16, MaxWait: 5 * time.Second,
		StoreThread: func() func() {
			runtime.LockOSThread()
			calls.Add(1)
			storeTID.Store(int64(syscall.Gettid()))
			return func() {
				releases.Add(1)
				runtime.UnlockOSThread()
			}
		}})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1000 }, 20*time.Second, 20*time.Millisecond)
	stop()
	assert.Equal(t, int32(1), calls.Load(), "StoreThread called once")
	assert.Equal(t, int32(1), releases.Load(), "released when the source stopped")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.tids, 20, "batches of 50")
	for i, tid := range sink.tids {
		assert.Equal(t, int(storeTID.Load()), tid, "batch %d stored on the store thread", i)
	}
}
