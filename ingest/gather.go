package ingest

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fetchLinger is how long a fetch that has its first message waits for
// more before it is handed on short of FetchSize.
const fetchLinger = 50 * time.Millisecond

// gatherer turns the messages a Consume handler receives one by one into
// fetches of up to size messages and maxBytes of payload (batched messages
// hold many events each), in delivery order, for one goroutine to take with
// next. The handler blocks while two fetches wait untaken, so the client
// stops pulling until decoding catches up.
type gatherer struct {
	size     int
	maxBytes int // 0: no byte limit

	mu    sync.Mutex
	bytes int // payload bytes in msgs
	// head is how many messages, from the first, make the next fetch so
	// far (up to size of them and maxBytes of payload, at least one), and
	// headBytes their payload: the fetch is complete once head < len(msgs)
	// (the next message did not fit) or head == size. add keeps them up to
	// date in O(1): walking the messages held on every add cost ~4% of
	// serve's CPU with single events, ~2,000 of which fill 1 MiB.
	head      int
	headBytes int
	room      *sync.Cond // signalled when next takes messages or on close
	msgs      []jetstream.Msg
	first     time.Time // when msgs[0] arrived
	err       error
	closed    bool
	wake      chan struct{} // a first message, a full fetch or an error
}

func newGatherer(size, maxBytes int) *gatherer {
	g := &gatherer{size: size, maxBytes: maxBytes, msgs: make([]jetstream.Msg, 0, 2*size), wake: make(chan struct{}, 1)}
	g.room = sync.NewCond(&g.mu)
	return g
}

// add is the Consume handler: it is called for one message at a time.
func (g *gatherer) add(m jetstream.Msg) {
	g.mu.Lock()
	for (len(g.msgs) >= 2*g.size || (g.maxBytes > 0 && g.bytes >= 2*g.maxBytes)) && !g.closed {
		g.room.Wait()
	}
	if g.closed {
		// Unprocessed, hence unacknowledged: redelivered after the rewind
		// or a restart.
		g.mu.Unlock()
		return
	}
	g.msgs = append(g.msgs, m)
	size := len(m.Data())
	g.bytes += size
	n := len(g.msgs)
	if n == 1 {
		g.first = time.Now()
	}
	if g.head == n-1 {
		g.extendHead(size)
	}
	full := g.head < n || g.head == g.size
	g.mu.Unlock()
	if n == 1 || full {
		g.signal()
	}
}

// fail records the first error the consumer reports; next delivers it after
// the messages that arrived before it.
func (g *gatherer) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.signal()
}

func (g *gatherer) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// close releases a blocked handler and makes it drop what it receives.
func (g *gatherer) close() {
	g.mu.Lock()
	g.closed = true
	g.room.Broadcast()
	g.mu.Unlock()
}

// next waits for a full fetch, for fetchLinger after the first message of a
// short one, or for an error. ok is false when ctx ended first.
func (g *gatherer) next(ctx context.Context) (fr fetchResult, ok bool) {
	linger := time.NewTimer(time.Hour)
	defer linger.Stop()
	for {
		g.mu.Lock()
		n := len(g.msgs)
		k := g.head // the next fetch's messages
		switch {
		case k < n || n >= g.size || g.err != nil || (n > 0 && time.Since(g.first) >= fetchLinger):
			fr = g.take(k)
			if k == n {
				fr.err, g.err = g.err, nil
			}
			g.mu.Unlock()
			return fr, true
		case n > 0:
			linger.Reset(fetchLinger - time.Since(g.first))
		}
		g.mu.Unlock()
		select {
		case <-g.wake:
		case <-linger.C:
		case <-ctx.Done():
			return fetchResult{}, false
		}
	}
}

// extendHead adds the message after the head, of size payload bytes, to the
// next fetch if it fits; g.mu is held.
func (g *gatherer) extendHead(size int) bool {
	if g.head == g.size || (g.head > 0 && g.maxBytes > 0 && g.headBytes+size > g.maxBytes) {
		return false
	}
	g.head++
	g.headBytes += size
	return true
}

// take removes the first n messages; g.mu is held.
func (g *gatherer) take(n int) fetchResult {
	fr := fetchResult{took: time.Since(g.first), full: n == g.size || n < len(g.msgs)}
	for _, m := range g.msgs[:n] {
		g.bytes -= len(m.Data())
	}
	if n > 0 {
		fr.msgs = make([]jetstream.Msg, n)
		copy(fr.msgs, g.msgs)
		rest := copy(g.msgs, g.msgs[n:])
		clear(g.msgs[rest:])
		g.msgs = g.msgs[:rest]
		g.head, g.headBytes = 0, 0
		for _, m := range g.msgs {
			if !g.extendHead(len(m.Data())) {
				break
			}
		}
		g.first = time.Now() // the rest waits at most another linger
		g.room.Broadcast()
	}
	return fr
}
