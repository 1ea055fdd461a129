package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// Two sources in one queue group share the traffic: every message is stored
// by exactly one of them.
func TestCoreSourceQueueGroup(t *testing.T) {
	nc, _ := jsServer(t)
	sinks := []*memSink{{}, {}}
	var started sync.WaitGroup
	for _, s := range sinks {
		started.Add(1)
		runSource(t, &CoreSource{
			Conn: nc, Subjects: []string{"mcp.audit.>"}, Queue: "mcptrail", Sink: s,
			BatchSize: 100, MaxWait: 50 * time.Millisecond, Started: started.Done,
		})
	}
	started.Wait()
	for i := range 1000 {
		require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(i, "pve")))
	}
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		a, _ := sinks[0].count()
		b, _ := sinks[1].count()
		return a+b == 1000
	}, 10*time.Second, 10*time.Millisecond)
	a, _ := sinks[0].count()
	b, _ := sinks[1].count()
	assert.Positive(t, a)
	assert.Positive(t, b)
}

// blockingSink holds every append until released, to overflow the pending
// limits.
type blockingSink struct {
	memSink
	release chan struct{}
}

func (s *blockingSink) Append(ctx context.Context, b Batch) (Result, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	return s.memSink.Append(ctx, b)
}

// A consumer slower than its publishers drops at the pending limits instead
// of growing without bound, and counts what it dropped.
func TestCoreSourcePendingLimitsDropAndCount(t *testing.T) {
	nc, _ := jsServer(t)
	sink := &blockingSink{release: make(chan struct{})}
	var dropped atomic.Int64
	started := make(chan struct{})
	runSource(t, &CoreSource{
		Conn: nc, Subjects: []string{"mcp.audit.>"}, Sink: sink,
		BatchSize: 10, MaxWait: 10 * time.Millisecond, PendingMsgs: 20,
		Started:   func() { close(started) },
		OnDropped: func(n int) { dropped.Add(int64(n)) },
	})
	<-started
	for i := range 500 {
		require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(i, "pve")))
	}
	require.NoError(t, nc.Flush())
	time.Sleep(100 * time.Millisecond)
	close(sink.release)
	require.Eventually(t, func() bool { return dropped.Load() > 0 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		n, _ := sink.count()
		return int64(n)+dropped.Load() == 500
	}, 5*time.Second, 10*time.Millisecond)
	n, _ := sink.count()
	assert.Less(t, n, 500)
}

// Core mode checks the subject too.
func TestCoreSourceSubjectMismatchIsDeadLettered(t *testing.T) {
	nc, _ := jsServer(t)
	sink := &memSink{}
	started := make(chan struct{})
	runSource(t, &CoreSource{
		Conn: nc, Subjects: []string{"mcp.audit.>"}, Sink: sink,
		BatchSize: 10, MaxWait: 20 * time.Millisecond, Started: func() { close(started) },
	})
	<-started
	require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(1, "pve")))
	require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(2, "other")))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { e, d := sink.count(); return e == 1 && d == 1 }, 5*time.Second, 10*time.Millisecond)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Equal(t, audit.ReasonSubjectMismatch, sink.dead[0].Reason)
	assert.Equal(t, "pve", sink.events[0].Server)
}

// A Sink that refuses batches makes core mode unhealthy until it stores again.
func TestCoreSourceFailingCommitIsUnhealthyUntilOneSucceeds(t *testing.T) {
	nc, _ := jsServer(t)
	sink := &memSink{failN: 2}
	var h healthLog
	started := make(chan struct{})
	runSource(t, &CoreSource{
		Conn: nc, Subjects: []string{"mcp.audit.>"}, Sink: sink, BatchSize: 10, MaxWait: 10 * time.Millisecond,
		Started: func() { close(started) }, OnHealth: h.onHealth,
	})
	<-started
	require.NoError(t, nc.Publish("mcp.audit.pve", jsEvent(1, "pve")))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { n, _ := sink.count(); return n == 1 }, 5*time.Second, 10*time.Millisecond)
	states, _ := h.get()
	require.Len(t, states, 2)
	assert.Contains(t, states[0], "storing events fails, retrying: disk full")
	assert.Equal(t, "ok", states[1])
}
