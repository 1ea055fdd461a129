package ingest

// The JetStream source turns at-least-once delivery into exactly-once storage:
//
//  1. fetch up to BatchSize messages (waiting at most MaxWait for a full batch);
//  2. decode them in parallel;
//  3. append events, dead letters and the checkpoint (the highest stream
//     sequence of the batch) to the Sink in ONE transaction;
//  4. only then acknowledge.
//
// A crash between 3 and 4 redelivers messages that are already stored; their
// stream sequence is at or below the stored checkpoint, so they are skipped
// (and the Sink's id de-duplication is a second line of defence). A crash
// before 3 commits nothing, and the redelivery stores the batch once. A Sink
// error is retried with backoff and nothing is acknowledged until it succeeds.
// The next fetch is issued only after the previous batch is stored and
// acknowledged, so memory is bounded by one batch.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// Defaults of the JetStream source and of the stream it creates.
const (
	DefaultBatchSize    = 5000
	DefaultMaxWait      = time.Second
	DefaultStreamMaxAge = 7 * 24 * time.Hour
	// DefaultDuplicates is the stream's Nats-Msg-Id window. JetStream keeps
	// every id published within it in memory (about 120 bytes each, plus GC
	// headroom), so memory grows with publish rate x window: 30 s covers a
	// gateway's retries, and the store's id de-duplication catches the rest.
	DefaultDuplicates    = 30 * time.Second
	DefaultAckWait       = time.Minute
	DefaultDecodeWorkers = 2
)

// StreamSpec is the stream mcptrail needs: created when missing, otherwise
// updated in place for the settings mcptrail owns (subjects it needs, age and
// size limits, duplicate window), keeping everything an operator set (replicas,
// placement) untouched.
type StreamSpec struct {
	Name       string
	Subjects   []string      // e.g. mcp.audit.>
	MaxAge     time.Duration // 0: DefaultStreamMaxAge; < 0: unlimited
	MaxBytes   int64         // <= 0: unlimited
	Duplicates time.Duration // Nats-Msg-Id de-duplication window; 0: DefaultDuplicates
}

func (s StreamSpec) maxAge() time.Duration {
	switch {
	case s.MaxAge == 0:
		return DefaultStreamMaxAge
	case s.MaxAge < 0:
		return 0 // JetStream: 0 means unlimited
	}
	return s.MaxAge
}

func (s StreamSpec) maxBytes() int64 {
	if s.MaxBytes <= 0 {
		return -1
	}
	return s.MaxBytes
}

// duplicatesFor is the duplicate window, which JetStream requires to be no
// longer than the stream's max age.
func (s StreamSpec) duplicatesFor(maxAge time.Duration) time.Duration {
	d := s.Duplicates
	if d <= 0 {
		d = DefaultDuplicates
	}
	if maxAge > 0 && d > maxAge {
		d = maxAge
	}
	return d
}

// EnsureStream creates the stream of spec or brings an existing one in line
// with it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, spec.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := jetstream.StreamConfig{
			Name:        spec.Name,
			Description: "MCP gateway audit events (created by mcptrail)",
			Subjects:    spec.Subjects,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxAge:      spec.maxAge(),
			MaxBytes:    spec.maxBytes(),
			MaxMsgs:     -1,
			Duplicates:  spec.duplicatesFor(spec.maxAge()),
			Replicas:    1,
		}
		st, err = js.CreateStream(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s on %s: %w", spec.Name, strings.Join(spec.Subjects, ", "), err)
		}
		if err == nil {
			return st, nil
		}
		// Another daemon created it in the meantime: fall through to update it.
		if st, err = js.Stream(ctx, spec.Name); err != nil {
			return nil, fmt.Errorf("look up stream %s: %w", spec.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", spec.Name, err)
	}

	cfg := st.CachedInfo().Config
	changed := false
	for _, subj := range spec.Subjects {
		if !slices.Contains(cfg.Subjects, subj) {
			cfg.Subjects = append(cfg.Subjects, subj)
			changed = true
		}
	}
	if cfg.MaxAge != spec.maxAge() {
		cfg.MaxAge, changed = spec.maxAge(), true
	}
	if cfg.MaxBytes != spec.maxBytes() {
		cfg.MaxBytes, changed = spec.maxBytes(), true
	}
	if d := spec.duplicatesFor(cfg.MaxAge); cfg.Duplicates != d {
		cfg.Duplicates, changed = d, true
	}
	if !changed {
		return st, nil
	}
	st, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("update stream %s (subjects %s, max age %s, max bytes %d): %w",
			spec.Name, strings.Join(cfg.Subjects, ", "), cfg.MaxAge, cfg.MaxBytes, err)
	}
	return st, nil
}

// ConsumerSpec is the durable pull consumer of one daemon (or shard).
type ConsumerSpec struct {
	Stream         string
	Durable        string
	FilterSubjects []string // empty: the whole stream
	BatchSize      int      // sizes MaxAckPending so that a full batch is always deliverable
	AckWait        time.Duration
	// AckEach makes the consumer AckExplicit and the source acknowledge every
	// message; the default (AckAll) acknowledges a whole batch with one ack.
	AckEach bool
}

// EnsureConsumer creates or updates the durable pull consumer of spec.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	batch := spec.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	ackWait := spec.AckWait
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	ackPolicy := jetstream.AckAllPolicy
	if spec.AckEach {
		ackPolicy = jetstream.AckExplicitPolicy
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		Description:   "mcptrail ingest into DuckDB",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     ackPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1, // never give up on a message: dropping one would lose an event
		// The default (1000) would cap every fetch at 1000 messages.
		MaxAckPending: max(4*batch, 20000),
	}
	switch len(spec.FilterSubjects) {
	case 0:
	case 1:
		cfg.FilterSubject = spec.FilterSubjects[0]
	default:
		cfg.FilterSubjects = spec.FilterSubjects
	}
	c, err := js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "ack policy") {
			hint = fmt.Sprintf(" (the existing consumer has another ack policy: delete it with `nats consumer rm %s %s`; the checkpoint in the database prevents duplicates)", spec.Stream, spec.Durable)
		}
		return nil, fmt.Errorf("create or update consumer %s on stream %s: %w%s", spec.Durable, spec.Stream, err, hint)
	}
	return c, nil
}

// RecoverPending makes the consumer redeliver at once what a previous run
// fetched and never acknowledged (it crashed, or its acks were lost), instead
// of after the ack wait: it resets the consumer to its ack floor. Call it
// before the source starts, and only when this process is the consumer's
// only user. It returns how many messages were pending. Servers without the
// reset API (before 2.14) keep the usual redelivery after the ack wait.
func RecoverPending(ctx context.Context, js jetstream.JetStream, c jetstream.Consumer) (int, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("consumer info: %w", err)
	}
	if info.NumAckPending == 0 {
		return 0, nil
	}
	if _, err := js.ResetConsumer(ctx, info.Stream, info.Name); err != nil {
		return info.NumAckPending, fmt.Errorf("reset consumer %s to its ack floor %d: %w", info.Name, info.AckFloor.Stream, err)
	}
	return info.NumAckPending, nil
}

// BatchReport tells an observer (metrics) what one batch did.
type BatchReport struct {
	Messages int    // messages in the batch (fetched or received)
	Seq      uint64 // highest stream sequence of the batch (0 for core NATS)
	// Events and Formats (parallel) are the decoded events handed to the
	// Sink; Result says how many of them were new.
	Events  []audit.Event
	Formats []audit.Format
	Dead    []DeadLetter
	Skipped int // payloads that are not tool calls
	// Redelivered counts messages at or below the checkpoint: stored by an
	// earlier run whose acknowledgement was lost. Their decoded events are in
	// RedeliveredEvents and RedeliveredFormats, for duplicate counts.
	Redelivered        int
	RedeliveredEvents  []audit.Event
	RedeliveredFormats []audit.Format
	Result             Result
	Commit             time.Duration // time spent in Sink.Append (the successful attempt)
	Attempts           int           // Append attempts (> 1 after database errors)
	// Fetch, Decode and Ack time the other steps (JetStream only), for the
	// debug log and profiling.
	Fetch, Decode, Ack time.Duration
}

// JetStreamSource consumes a durable pull consumer into a Sink with
// exactly-once storage.
//
// Both the checkpoint and AckAll rest on one invariant: every message at or
// below the checkpoint is stored. A message the server delivered that never
// reached the source (lost when a fetch ends on the client side first) would
// break it: the next batch's checkpoint and ack would pass over it. The
// source therefore checks that delivery sequences are contiguous; on a gap it
// drops the fetched batch unstored and rewinds the consumer to its ack floor
// (JetStream redelivers everything unacknowledged, and the checkpoint skips
// what is already stored).
type JetStreamSource struct {
	Consumer jetstream.Consumer
	// JS lets the source rewind the consumer (at start and after a lost
	// delivery); without it the source waits for the ack wait instead.
	JS jetstream.JetStream
	// Stream, when set, lets the source notice a stream that was recreated
	// (its last sequence below the checkpoint) and stop skipping by the old
	// checkpoint.
	Stream jetstream.Stream
	Sink   Sink
	// CheckpointKey names the checkpoint row; use one per stream and consumer.
	CheckpointKey string
	BatchSize     int // DefaultBatchSize when <= 0
	// MaxWait is the flush interval: a fetch returns a partial batch after
	// it (DefaultMaxWait when <= 0; at most 5 s, so that shutdown, which
	// lets the fetch in flight finish, stays prompt).
	MaxWait time.Duration
	Decode  audit.Options
	Workers int  // DefaultDecodeWorkers when <= 0
	AckEach bool // must match the consumer's ack policy (ConsumerSpec.AckEach)
	// Prefetch issues the next fetch while the current batch is decoded and
	// stored, so that transport and database work overlap; memory then holds
	// up to two batches instead of one.
	Prefetch bool
	// ShutdownGrace bounds how long the batch in hand may still take to be
	// stored once ctx is cancelled (5 s when 0). Past it the batch is abandoned
	// unacknowledged: it is redelivered after a restart, never lost.
	ShutdownGrace time.Duration
	Log           *slog.Logger
	// Started is called once the checkpoint is read and the first fetch is
	// about to be issued.
	Started func()
	// OnBatch is called after each stored and acknowledged batch.
	OnBatch func(BatchReport)
	// OnError is called for each error the loop survives, with its stage
	// ("fetch", "append" or "ack").
	OnError func(stage string, err error)
	// Recreate, when set, is called when the consumer disappears (deleted by
	// an operator, or lost by the server) to create it again.
	Recreate func(ctx context.Context) (jetstream.Consumer, error)

	nextDelivery uint64 // the delivery sequence expected next; 0 = start of a new run
}

func (s *JetStreamSource) defaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxWait <= 0 {
		s.MaxWait = DefaultMaxWait
	}
	s.MaxWait = min(s.MaxWait, 5*time.Second)
	if s.Workers <= 0 {
		s.Workers = DefaultDecodeWorkers
	}
	if s.ShutdownGrace <= 0 {
		s.ShutdownGrace = 5 * time.Second
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.CheckpointKey == "" {
		s.CheckpointKey = s.Consumer.CachedInfo().Stream + "/" + s.Consumer.CachedInfo().Name
	}
}

// Run consumes until ctx is cancelled; then it stores and acknowledges the
// batch in hand (within ShutdownGrace) and returns nil. It returns an error
// only when it cannot start (the checkpoint cannot be read).
func (s *JetStreamSource) Run(ctx context.Context) error {
	s.defaults()
	cp, err := s.Sink.Checkpoint(ctx, s.CheckpointKey)
	if err != nil {
		return fmt.Errorf("jetstream source: %w", err)
	}
	if s.Stream != nil && cp > 0 {
		if info, err := s.Stream.Info(ctx); err == nil && info.State.LastSeq < cp {
			// The stream was deleted and recreated: its sequences restarted,
			// so the old checkpoint would skip new messages. Ids still
			// de-duplicate whatever the new stream repeats.
			s.Log.Warn("stream sequence is below the stored checkpoint: the stream was recreated; ignoring the old checkpoint",
				"stream", info.Config.Name, "last_seq", info.State.LastSeq, "checkpoint", cp)
			cp = 0
		}
	}
	if !s.resync(ctx) {
		return nil
	}
	s.Log.Info("jetstream ingest started", "consumer", s.CheckpointKey, "checkpoint", cp,
		"batch_size", s.BatchSize, "flush_interval", s.MaxWait)
	if s.Started != nil {
		s.Started()
	}

	dec := &Decoder{Opts: s.Decode, Workers: s.Workers}
	var bo backoff
	// With Prefetch, the next fetch runs while the current batch is decoded
	// and stored; next holds its result.
	var next chan fetchResult
	defer func() {
		if next != nil {
			<-next // unprocessed: redelivered after a restart (resync rewinds at start)
		}
	}()
	for ctx.Err() == nil {
		var fr fetchResult
		if next != nil {
			fr, next = <-next, nil
		} else {
			fr = s.timedFetch()
		}
		if s.Prefetch && len(fr.msgs) > 0 && fr.err == nil && ctx.Err() == nil {
			next = make(chan fetchResult, 1)
			go func(ch chan<- fetchResult) { ch <- s.timedFetch() }(next)
		}
		if len(fr.msgs) > 0 {
			b, gap := s.prepare(fr.msgs)
			if gap != nil {
				s.fail("fetch", gap)
				if next != nil {
					<-next // its deliveries are rewound too
					next = nil
				}
				if !s.resync(ctx) {
					return nil
				}
				continue
			}
			c, ok := s.process(ctx, dec, b, cp, fr.took)
			if !ok {
				return nil // shutting down with an unstored batch: it will be redelivered
			}
			cp = c
		}
		if fr.err != nil {
			s.fail("fetch", fr.err)
			if errors.Is(fr.err, jetstream.ErrConsumerNotFound) || errors.Is(fr.err, jetstream.ErrConsumerDeleted) {
				s.recreate(ctx)
			}
			if !bo.wait(ctx) {
				return nil
			}
			continue
		}
		bo.reset()
	}
	return nil
}

type fetchResult struct {
	msgs []jetstream.Msg
	err  error
	took time.Duration
}

func (s *JetStreamSource) timedFetch() fetchResult {
	t0 := time.Now()
	msgs, err := s.fetch()
	return fetchResult{msgs, err, time.Since(t0)}
}

func (s *JetStreamSource) fail(stage string, err error) {
	s.Log.Error("jetstream ingest: "+stage+" failed", "err", err)
	if s.OnError != nil {
		s.OnError(stage, err)
	}
}

func (s *JetStreamSource) recreate(ctx context.Context) {
	if s.Recreate == nil {
		return
	}
	c, err := s.Recreate(ctx)
	if err != nil {
		s.fail("fetch", fmt.Errorf("recreate consumer: %w", err))
		return
	}
	s.Log.Warn("consumer was missing and has been recreated", "consumer", s.CheckpointKey)
	s.Consumer = c
	s.nextDelivery = 0
}

// resync makes sure that no delivery the source has not seen is
// outstanding: at start (a previous run may have crashed holding a batch),
// after a gap, and after the consumer was recreated. It rewinds the consumer
// to its ack floor, or, where the server cannot, waits for the ack wait (after
// which JetStream redelivers the unacknowledged messages before anything
// newer). The next delivery then starts a new contiguous run. false when ctx
// ended first.
func (s *JetStreamSource) resync(ctx context.Context) bool {
	s.nextDelivery = 0
	if s.JS != nil {
		n, err := RecoverPending(ctx, s.JS, s.Consumer)
		if err == nil {
			if n > 0 {
				s.Log.Warn("rewound the consumer to its ack floor: redelivering messages delivered earlier and never acknowledged", "messages", n)
			}
			return true
		}
		s.fail("fetch", err)
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := s.Consumer.Info(ictx)
	cancel()
	if err == nil && info.NumAckPending == 0 {
		return true
	}
	ackWait := DefaultAckWait
	if err == nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait
	}
	s.Log.Warn("waiting for the ack wait before fetching, so that unacknowledged messages come back first", "wait", ackWait)
	return wait.Sleep(ctx, ackWait+time.Second)
}

// fetch pulls one batch: it returns when BatchSize messages arrived or
// MaxWait passed, with whatever arrived. The server ends the request at
// MaxWait, after the last message it delivered, so nothing delivered is left
// behind (a client-side deadline could drop messages still in flight).
func (s *JetStreamSource) fetch() ([]jetstream.Msg, error) {
	b, err := s.Consumer.Fetch(s.BatchSize, jetstream.FetchMaxWait(s.MaxWait))
	if err != nil {
		return nil, err
	}
	msgs := make([]jetstream.Msg, 0, min(s.BatchSize, 1024))
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	err = b.Error()
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
		err = nil
	}
	return msgs, err
}

// fetched is a batch with its parsed metadata.
type fetched struct {
	msgs   []jetstream.Msg
	in     []Message
	maxSeq uint64
	last   jetstream.Msg // the message with maxSeq
}

// prepare parses the batch's metadata and checks that its deliveries follow
// the previous ones without a gap.
func (s *JetStreamSource) prepare(msgs []jetstream.Msg) (fetched, error) {
	b := fetched{msgs: msgs, in: make([]Message, len(msgs))}
	for i, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return b, fmt.Errorf("message on %s without JetStream metadata: %w", m.Subject(), err)
		}
		if s.nextDelivery != 0 && md.Sequence.Consumer != s.nextDelivery {
			got, want := md.Sequence.Consumer, s.nextDelivery
			s.nextDelivery = 0
			return b, fmt.Errorf("delivery %d arrived where %d was expected: a message was lost between NATS and mcptrail "+
				"(or another process consumes the durable consumer %s)", got, want, s.CheckpointKey)
		}
		s.nextDelivery = md.Sequence.Consumer + 1
		b.in[i] = Message{Data: m.Data(), Source: m.Subject(), Seq: md.Sequence.Stream}
		if md.Sequence.Stream >= b.maxSeq {
			b.maxSeq, b.last = md.Sequence.Stream, m
		}
	}
	return b, nil
}

// process stores and acknowledges one batch and returns the new checkpoint.
// ok is false when ctx was cancelled before the batch could be stored.
func (s *JetStreamSource) process(ctx context.Context, dec *Decoder, fb fetched, cp uint64, fetchTime time.Duration) (next uint64, ok bool) {
	// The batch in hand is finished even when shutdown begins (flush), but
	// only for ShutdownGrace: an unstored batch is simply redelivered later.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.ShutdownGrace, cancel) })
	defer stop()

	in, maxSeq := fb.in, fb.maxSeq
	rep := BatchReport{Messages: len(in), Seq: maxSeq, Fetch: fetchTime}
	t0 := time.Now()
	var batch Batch
	// Decode in runs of "already stored" and "new" messages, in order, so
	// that the Decoder's Intercept state sees every message once.
	for start := 0; start < len(in); {
		old := in[start].Seq <= cp
		end := start + 1
		for end < len(in) && (in[end].Seq <= cp) == old {
			end++
		}
		out, err := dec.Decode(wctx, in[start:end])
		if err != nil {
			return cp, false
		}
		if old {
			rep.Redelivered += end - start
			rep.RedeliveredEvents = append(rep.RedeliveredEvents, out.Events...)
			rep.RedeliveredFormats = append(rep.RedeliveredFormats, out.Formats...)
		} else {
			batch.Events = append(batch.Events, out.Events...)
			rep.Formats = append(rep.Formats, out.Formats...)
			batch.DeadLetters = append(batch.DeadLetters, out.Dead...)
			rep.Skipped += out.Skipped
		}
		start = end
	}
	rep.Events, rep.Dead = batch.Events, batch.DeadLetters
	rep.Decode = time.Since(t0)

	if maxSeq > cp {
		batch.Checkpoint = &Checkpoint{Consumer: s.CheckpointKey, Seq: maxSeq}
		var bo backoff
		for {
			rep.Attempts++
			t0 := time.Now()
			res, err := s.Sink.Append(wctx, batch)
			if err == nil {
				rep.Result, rep.Commit = res, time.Since(t0)
				break
			}
			// Never acknowledge what is not stored: keep the batch and retry.
			s.fail("append", fmt.Errorf("store batch up to stream sequence %d (%d messages, attempt %d): %w", maxSeq, len(in), rep.Attempts, err))
			if ctx.Err() != nil || !bo.wait(ctx) {
				s.Log.Warn("shutting down with an unstored batch; it will be redelivered", "messages", len(in), "last_seq", maxSeq)
				return cp, false
			}
		}
		cp = maxSeq
	}

	t0 = time.Now()
	s.ack(wctx, fb.msgs, fb.last)
	rep.Ack = time.Since(t0)
	s.Log.Debug("batch stored", "messages", rep.Messages, "last_seq", maxSeq, "ingested", rep.Result.Ingested,
		"duplicates", rep.Result.Duplicates+rep.Redelivered, "rejected", rep.Result.Rejected,
		"fetch", rep.Fetch, "decode", rep.Decode, "commit", rep.Commit, "ack", rep.Ack)
	if s.OnBatch != nil {
		s.OnBatch(rep)
	}
	return cp, true
}

// ack acknowledges a stored batch. A lost acknowledgement only causes a
// redelivery, which the checkpoint then skips, so failures are logged, not
// retried.
func (s *JetStreamSource) ack(ctx context.Context, msgs []jetstream.Msg, last jetstream.Msg) {
	if s.AckEach {
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				s.fail("ack", err)
				return
			}
		}
		return
	}
	// AckAll: acknowledging the highest sequence acknowledges the whole batch.
	// The double ack waits for the server's confirmation, so a clean shutdown
	// never leaves the last batch to be redelivered.
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := last.DoubleAck(actx); err != nil {
		s.fail("ack", err)
	}
}

// backoff waits 100 ms, doubling up to 5 s.
type backoff struct{ d time.Duration }

func (b *backoff) reset() { b.d = 0 }

// wait sleeps for the next interval; false when ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	if b.d == 0 {
		b.d = 100 * time.Millisecond
	} else {
		b.d = min(2*b.d, 5*time.Second)
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
