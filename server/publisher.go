package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// publisher sends messages through JetStream asynchronously and sends again,
// with the same Nats-Msg-Id, each one whose acknowledgement does not come.
type publisher struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	attempts int
	ackWait  time.Duration
	start    time.Time
	first    bool        // the first message has been sent
	stop     func(error) // ends publishing with its cause

	mu       sync.Mutex
	st       PublishStats
	firstErr error
	tries    map[string]int // sends so far per Nats-Msg-Id, of messages not yet acknowledged
	retry    []resend       // messages waiting to be sent again
	refused  int            // messages JetStream refused since the last acknowledgement
	since    time.Time      // the first of those refusals
	last     time.Time      // the latest of them
	span     time.Duration  // how long refusals may go on before publishing stops

	// awaiting counts the asynchronous sends whose acknowledgement or error
	// handler has not finished: the client counts a message done before
	// its handler runs, so drain waits for these too.
	awaiting int
	// handlerDelay holds each handler back (tests: the window between the
	// client's count and the handler, made wide).
	handlerDelay time.Duration
}

// refusalsToStop and DefaultRefusalSpan bound how long JetStream may refuse
// messages, with no acknowledgement between them, before publishing stops: a
// stream that is full or sealed refuses the rest too, and each would wait out
// its attempts. Both must be passed: a leader election or a stream deleted
// and created again refuses every message in flight for a second or so.
const (
	refusalsToStop     = 100
	DefaultRefusalSpan = 30 * time.Second
)

// maxBackoff caps the wait before a message is sent again: with the default
// 8 attempts (250 ms doubling to 15 s) a message is tried for about 31 s,
// longer than DefaultRefusalSpan, so that a stream away for less than the
// span loses nothing.
const maxBackoff = 15 * time.Second

// errRefused ends publishing when JetStream refuses message after message.
var errRefused = errors.New("JetStream refuses every message")

// defaultAckWait is how long a message waits for its acknowledgement before
// it is sent again: under the stream's 5 s duplicate window
// (ingest.DefaultDuplicates), so that the stream drops the copy.
const defaultAckWait = 4 * time.Second

// resend is a message to send again once due.
type resend struct {
	m   *nats.Msg
	due time.Time
}

func newPublisher(nc *nats.Conn, opts PublishOptions, stop func(error)) (*publisher, error) {
	inFlight := opts.InFlight
	if inFlight <= 0 {
		inFlight = DefaultPublishInFlight
	}
	ackWait := opts.AckWait
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	span := opts.RefusalSpan
	if span <= 0 {
		span = DefaultRefusalSpan
	}
	p := &publisher{nc: nc, attempts: opts.Attempts, ackWait: ackWait, span: span, tries: map[string]int{}, start: time.Now(), stop: stop,
		handlerDelay: opts.handlerDelay}
	if p.attempts <= 0 {
		p.attempts = DefaultPublishAttempts
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(inFlight),
		jetstream.WithPublishAsyncTimeout(ackWait),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			p.handled(func() { p.acked(m, ack) })
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			p.handled(func() { p.failed(m, err) })
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	p.js = js
	return p, nil
}

// handled runs an asynchronous send's handler, record, and then counts
// the send as no longer awaited.
func (p *publisher) handled(record func()) {
	if p.handlerDelay > 0 {
		time.Sleep(p.handlerDelay)
	}
	record()
	p.mu.Lock()
	p.awaiting--
	p.mu.Unlock()
}

func (p *publisher) acked(m *nats.Msg, ack *jetstream.PubAck) {
	n := ingest.EventsIn(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tries, m.Header.Get(jetstream.MsgIDHeader))
	p.refused = 0
	p.st.Published += n
	p.st.Messages++
	if ack.Duplicate {
		p.st.Duplicates += n
	}
}

// failed schedules a message that was not acknowledged to be sent again,
// after a backoff that doubles with each attempt, or gives up on it. A
// message lost with the connection does not use up an attempt: it waits for
// the reconnection, however long the NATS server is away.
func (p *publisher) failed(m *nats.Msg, err error) {
	id := m.Header.Get(jetstream.MsgIDHeader)
	local := p.lostWithConnection(err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if local {
		p.refused = 0 // the connection, not the stream, stopped this one
		p.tries[id]--
		p.resendAfter(m, 250*time.Millisecond)
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		now := time.Now()
		// A pause longer than a message's wait and backoff between two
		// refusals (nothing was sent, or all of it was lost with the
		// connection) starts a new streak: the stream was not seen
		// refusing in between.
		if p.refused == 0 || now.Sub(p.last) > p.ackWait+maxBackoff {
			p.refused, p.since = 0, now
		}
		p.last = now
		if p.refused++; p.refused >= refusalsToStop && now.Sub(p.since) >= p.span {
			p.stop(fmt.Errorf("publish: %w: %d messages refused over %s with none acknowledged, the last on %s: %w",
				errRefused, p.refused, now.Sub(p.since).Round(time.Second), m.Subject, err))
		}
	}
	tries := p.tries[id]
	if tries >= p.attempts || errors.Is(err, nats.ErrPermissionViolation) {
		delete(p.tries, id)
		p.st.Failed += ingest.EventsIn(m)
		if p.firstErr == nil {
			p.firstErr = fmt.Errorf("%s after %d attempt(s): %w", m.Subject, tries, err)
		}
		return
	}
	p.resendAfter(m, min(250*time.Millisecond<<min(max(tries-1, 0), 6), maxBackoff))
}

// resendAfter schedules m to be sent again after d, as a new message: the
// reply subject was set by the failed publish. p.mu is held.
func (p *publisher) resendAfter(m *nats.Msg, d time.Duration) {
	again := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header}
	p.retry = append(p.retry, resend{m: again, due: time.Now().Add(d)})
}

// lostWithConnection tells a send that failed because the connection went
// away (the client fails every pending acknowledgement on reconnecting)
// from one the server answered or let time out.
func (p *publisher) lostWithConnection(err error) bool {
	switch {
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrReconnectBufExceeded):
		return true
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return !p.nc.IsConnected()
	}
	return false
}

// send publishes m, and first whatever is due to be sent again. The first
// message goes synchronously, so that a missing stream is one clear error
// instead of a flood of asynchronous failures.
func (p *publisher) send(ctx context.Context, m *nats.Msg) error {
	if !p.first {
		p.first = true
		return p.sendFirst(ctx, m)
	}
	if err := p.resendDue(ctx, false); err != nil {
		return err
	}
	return p.sendAsync(ctx, m)
}

func (p *publisher) sendFirst(ctx context.Context, m *nats.Msg) error {
	pctx, cancel := context.WithTimeout(ctx, p.ackWait)
	defer cancel()
	p.count(m)
	ack, err := p.js.PublishMsg(pctx, m)
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("publish to %s: no JetStream stream captures this subject: start `mcptrail serve` first (it creates the stream) or create one on mcp.audit.>: %w", m.Subject, err)
	case errors.Is(err, nats.ErrPermissionViolation), ctx.Err() != nil:
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	case err != nil:
		// Lost, late or refused for now (a restart, an election): sent
		// again as any other; a stream that keeps refusing stops the
		// publish (refusalsToStop).
		p.failed(m, err)
		return nil
	}
	p.acked(m, ack)
	return nil
}

// count notes one more send of m.
func (p *publisher) count(m *nats.Msg) {
	p.mu.Lock()
	p.tries[m.Header.Get(jetstream.MsgIDHeader)]++
	p.mu.Unlock()
}

func (p *publisher) sendAsync(ctx context.Context, m *nats.Msg) error {
	// While the connection is away, hold back instead of filling the
	// reconnect buffer with messages whose acknowledgements will be failed.
	for !p.nc.IsConnected() && !p.nc.IsClosed() {
		if !wait.Sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	p.count(m)
	for {
		_, err := p.js.PublishMsgAsync(m)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			continue // the window is full: wait for acknowledgements and retry
		}
		if err != nil {
			// Not handed to the connection (e.g. closed): the error handler
			// never hears of it, so it is retried from here.
			p.failed(m, err)
			return nil
		}
		p.mu.Lock()
		p.awaiting++ // its handler may have run already: then back to 0
		p.mu.Unlock()
		return nil
	}
}

// resendDue sends again the messages whose backoff is over (all of them
// with all).
func (p *publisher) resendDue(ctx context.Context, all bool) error {
	p.mu.Lock()
	var due []*nats.Msg
	keep := p.retry[:0]
	now := time.Now()
	for _, r := range p.retry {
		if all || !r.due.After(now) {
			due = append(due, r.m)
		} else {
			keep = append(keep, r)
		}
	}
	p.retry = keep
	p.st.Resent += len(due)
	p.mu.Unlock()
	for _, m := range due {
		if err := p.sendAsync(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// drain waits until every message is acknowledged or given up on, sending
// again what is due meanwhile.
func (p *publisher) drain(ctx context.Context) error {
	for {
		select {
		case <-p.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		// The client is done with every message; their handlers may still
		// be recording what became of the last ones.
		for p.handlersRunning() {
			if !wait.Sleep(ctx, time.Millisecond) {
				return ctx.Err()
			}
		}
		p.mu.Lock()
		var next time.Time
		for _, r := range p.retry {
			if next.IsZero() || r.due.Before(next) {
				next = r.due
			}
		}
		p.mu.Unlock()
		if next.IsZero() {
			return nil
		}
		if !wait.Sleep(ctx, time.Until(next)) {
			return ctx.Err()
		}
		if err := p.resendDue(ctx, false); err != nil {
			return err
		}
	}
}

func (p *publisher) handlersRunning() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.awaiting > 0
}

// finish reports the stats and the error that ended publishing: err, or
// the permission the server refused, or the events never acknowledged.
func (p *publisher) finish(ctx context.Context, err error) (PublishStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.st
	for _, r := range p.retry { // stopped before they could be sent again
		st.Failed += ingest.EventsIn(r.m)
	}
	st.Duration = time.Since(p.start)
	if st.Duration > 0 {
		st.Rate = float64(st.Published) / st.Duration.Seconds()
	}
	if cause := context.Cause(ctx); err != nil && (errors.Is(cause, nats.ErrPermissionViolation) || errors.Is(cause, errRefused)) {
		err = cause
	}
	if err == nil && st.Failed > 0 {
		err = fmt.Errorf("publish: %d of %d events were not acknowledged by JetStream: %w", st.Failed, st.Published+st.Failed, p.firstErr)
	}
	return st, err
}
