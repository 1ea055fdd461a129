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

// storeThread is a StoreThread that locks its caller to its thread, as
// threadprio.Favor does, and notes its calls, its releases and the thread.
type storeThread struct {
	calls, releases atomic.Int32
	tid             atomic.Int64
}

func (st *storeThread) hook() func() {
	runtime.LockOSThread()
	st.calls.Add(1)
	st.tid.Store(int64(syscall.Gettid()))
	return func() {
		st.releases.Add(1)
		runtime.UnlockOSThread()
	}
}

// check asserts that StoreThread was called and released once, and that
// the sink stored batches batches, each on the store thread.
func (st *storeThread) check(t *testing.T, sink *tidSink, batches int) {
	t.Helper()
	assert.Equal(t, int32(1), st.calls.Load(), "StoreThread called once")
	assert.Equal(t, int32(1), st.releases.Load(), "released when the source stopped")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.tids, batches)
	for i, tid := range sink.tids {
		assert.Equal(t, int(st.tid.Load()), tid, "batch %d stored on the store thread", i)
	}
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
	var st storeThread
	stop := runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, BatchSize: 50, FetchSize: 16, MaxWait: 5 * time.Second,
		StoreThread: st.hook})
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1000 }, 20*time.Second, 20*time.Millisecond)
	stop()
	st.check(t, sink, 20) // batches of 50
}

// TestCoreStoresEveryBatchOnTheStoreThread: the same in core mode, where
// Run's own goroutine stores.
func TestCoreStoresEveryBatchOnTheStoreThread(t *testing.T) {
	nc, _ := jsServer(t)
	sink := &tidSink{}
	var st storeThread
	started := make(chan struct{})
	stop := runSource(t, &CoreSource{Conn: nc, Subjects: []string{"mcp.audit.>"}, Sink: sink, BatchSize: 50, MaxWait: 5 * time.Second,
		Started: func() { close(started) }, StoreThread: st.hook})
	<-started
	for i := range 1000 {
		require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(i, "pve")))
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1000 }, 20*time.Second, 20*time.Millisecond)
	stop()
	st.check(t, sink, 20) // batches of 50
}
