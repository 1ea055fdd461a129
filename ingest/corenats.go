package ingest

// Core mode (nats.jetstream: false) is for gateways that publish to plain NATS
// without JetStream. It is AT-MOST-ONCE: core NATS keeps no copy of a message,
// so a message is lost when the daemon is down, restarting, or crashes with
// a batch in memory, and when the daemon falls behind by more than the
// subscription's pending limits (the client drops the excess and reports a
// slow consumer, counted in OnDropped). The limits are what keep memory
// bounded: an unbounded backlog measured 1.3 GB RSS. Use JetStream for an
// audit trail that must be complete.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/audit"
)

// Default pending limits of a core-mode subscription.
const (
	DefaultPendingMsgs  = 65536
	DefaultPendingBytes = 64 << 20
)

// CoreSource subscribes to plain NATS subjects, optionally in a queue group
// (several daemons then share the traffic, each message going to one), and
// stores batches in a Sink without checkpoints.
type CoreSource struct {
	Conn     *nats.Conn
	Subjects []string
	Queue    string // queue group; empty for a plain subscription
	Sink     Sink
	// BatchSize and MaxWait: a batch is stored when it is full or MaxWait
	// after its first message, whichever comes first.
	BatchSize    int
	MaxWait      time.Duration
	Decode       audit.Options
	Workers      int
	PendingMsgs  int // per-subscription client-side limit; DefaultPendingMsgs when <= 0
	PendingBytes int // DefaultPendingBytes when <= 0
	Log          *slog.Logger
	Started      func()
	OnBatch      func(BatchReport)
	OnError      func(stage string, err error)
	// OnDropped receives the number of messages the client dropped because
	// the pending limits were reached since the last call.
	OnDropped func(n int)
	// OnHealth reports false with the reason while the Sink refuses batches,
	// true once it stores again (on changes only).
	OnHealth func(ok bool, reason string)
	// StoreThread, when set, is called by Run's goroutine, which stores
	// every batch, once it is subscribed, and what it returns as Run ends
	// (JetStreamSource.StoreThread's counterpart).
	StoreThread func() (release func())

	health Health
}

// Run subscribes and stores batches until ctx is cancelled; then it
// unsubscribes, stores the batch in hand and returns nil.
func (s *CoreSource) Run(ctx context.Context) error {
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxWait <= 0 {
		s.MaxWait = DefaultMaxWait
	}
	if s.Workers <= 0 {
		s.Workers = DefaultDecodeWorkers
	}
	if s.PendingMsgs <= 0 {
		s.PendingMsgs = DefaultPendingMsgs
	}
	if s.PendingBytes <= 0 {
		s.PendingBytes = DefaultPendingBytes
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if len(s.Subjects) == 0 {
		return errors.New("core source: no subjects")
	}

	// The handler blocks on this channel while a batch is being stored, so
	// the backlog accumulates in the subscription, whose limits bound it.
	ch := make(chan *nats.Msg, s.BatchSize)
	done := make(chan struct{})
	handler := func(m *nats.Msg) {
		select {
		case ch <- m:
		case <-done:
		}
	}
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		close(done)
	}()
	for _, subj := range s.Subjects {
		var sub *nats.Subscription
		var err error
		if s.Queue != "" {
			sub, err = s.Conn.QueueSubscribe(subj, s.Queue, handler)
		} else {
			sub, err = s.Conn.Subscribe(subj, handler)
		}
		if err != nil {
			return fmt.Errorf("core source: subscribe to %s: %w", subj, err)
		}
		subs = append(subs, sub)
		if err := sub.SetPendingLimits(s.PendingMsgs, s.PendingBytes); err != nil {
			return fmt.Errorf("core source: pending limits on %s: %w", subj, err)
		}
	}
	// The round trip confirms the subscriptions before the source reports
	// itself started (and the daemon ready).
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.Conn.FlushWithContext(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("core source: confirm subscriptions: %w", err)
	}
	s.Log.Info("core NATS ingest started (at-most-once)", "subjects", s.Subjects, "queue", s.Queue,
		"pending_msgs", s.PendingMsgs, "pending_bytes", s.PendingBytes)
	if s.Started != nil {
		s.Started()
	}
	if s.StoreThread != nil {
		defer s.StoreThread()()
	}

	dec := &Decoder{Opts: s.Decode, Workers: s.Workers, CheckSubject: true}
	dropped := make([]int, len(subs))
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var batch []Message
	flush := func() {
		if len(batch) > 0 {
			s.store(ctx, dec, batch)
			batch = batch[:0]
		}
		for i, sub := range subs {
			if n, err := sub.Dropped(); err == nil && n > dropped[i] {
				if s.OnDropped != nil {
					s.OnDropped(n - dropped[i])
				}
				dropped[i] = n
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			// Unsubscribe first so nothing more arrives, then keep what did.
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
		drain:
			for len(batch) < s.BatchSize {
				select {
				case m := <-ch:
					batch = appendMessages(batch, m.Data, m.Subject, 0, m.Header)
				default:
					break drain
				}
			}
			flush()
			return nil
		case m := <-ch:
			if len(batch) == 0 {
				timer.Reset(s.MaxWait)
			}
			batch = appendMessages(batch, m.Data, m.Subject, 0, m.Header)
			if len(batch) >= s.BatchSize {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// store decodes and appends one batch. A database error is retried with
// backoff until it succeeds or ctx ends (meanwhile the pending limits drop
// new messages); at shutdown the batch gets one attempt.
func (s *CoreSource) store(ctx context.Context, dec *Decoder, msgs []Message) {
	out, err := dec.Decode(context.WithoutCancel(ctx), msgs)
	if err != nil {
		return
	}
	// Staged like a JetStream batch: the staging flags the repeats the
	// metrics count.
	st := newStaging(s.Sink, len(out.Events))
	defer st.Release()
	repeat := make([]bool, len(out.Events))
	st.Add(out.Events, repeat)
	b := batchOf(st, out.Dead)
	rep := BatchReport{Messages: len(msgs), Dead: out.Dead, Skipped: out.Skipped}
	rep.count(out.Events, out.Formats, repeat, false)
	var bo backoff
	for {
		rep.Attempts++
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		t0 := time.Now()
		res, err := s.Sink.Append(wctx, b)
		cancel()
		if err == nil {
			rep.Result, rep.Commit = res, time.Since(t0)
			s.health.Set("commit", "", s.OnHealth)
			break
		}
		s.health.Set("commit", "storing events fails, retrying: "+err.Error(), s.OnHealth)
		s.Log.Error("core ingest: store batch failed", "messages", len(msgs), "attempt", rep.Attempts, "err", err)
		if s.OnError != nil {
			s.OnError("append", err)
		}
		if !bo.wait(ctx) {
			s.Log.Error("core ingest: shutting down with an unstored batch; it is lost (core NATS is at-most-once)", "messages", len(msgs))
			return
		}
	}
	if s.OnBatch != nil {
		s.OnBatch(rep)
	}
}
