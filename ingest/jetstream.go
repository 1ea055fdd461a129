package ingest

// The JetStream source turns at-least-once delivery into exactly-once storage:
//
//  1. pull messages continuously, decode them FetchSize at a time (in
//     parallel) and stage them in the Sink's form, until BatchSize messages
//     are in hand or MaxWait (the flush interval) passed since the first;
//  2. append the batch's events, dead letters and the checkpoint (the
//     highest stream sequence of the batch) to the Sink in ONE transaction;
//  3. only then acknowledge.
//
// A crash between 2 and 3 redelivers messages that are already stored; their
// stream sequence is at or below the stored checkpoint, so they are skipped
// (and the Sink's id de-duplication is a second line of defence). A crash
// before 2 commits nothing, and the redelivery stores the batch once. A Sink
// error is retried with backoff and nothing is acknowledged until it succeeds.
// The next batch fills while one is stored, and waits for it: memory is
// bounded by two batches.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// Defaults of the JetStream source.
const (
	// DefaultBatchSize is one DuckDB row group: a transaction that appends a
	// full row group writes it straight to the database file, while smaller
	// ones go through the write-ahead log and are written a second time at
	// the next checkpoint.
	DefaultBatchSize = 122880
	// DefaultFetchSize is the messages decoded and staged together (the
	// client keeps two of them requested ahead): large enough to amortise
	// each step (100-message fetches halved the throughput), small enough to
	// stay within the client's pending limits.
	DefaultFetchSize     = 4096
	DefaultMaxWait       = 2 * time.Second
	DefaultDecodeWorkers = 2
)

// JetStreamSource consumes a durable pull consumer into a Sink with
// exactly-once storage.
//
// The checkpoint (and AckAll, where the consumer acknowledges) rest on one
// invariant: every message at or below the checkpoint is stored. A message
// the server delivered that never reached the source (lost when a fetch ends
// on the client side first) would break it: the next batch's checkpoint and
// ack would pass over it. The source therefore checks that delivery
// sequences are contiguous, and, for a consumer that acknowledges nothing
// (whose lost last delivery nothing would bring back), asks the server what
// it delivered when nothing arrives (lostTail). On a loss it drops the
// fetched batch unstored and rewinds the consumer to after the checkpoint
// and its ack floor (JetStream delivers everything after it again, and the
// checkpoint skips what is already stored). See acks.go for the ack policy.
type JetStreamSource struct {
	Consumer jetstream.Consumer
	// JS lets the source rewind the consumer (at start and after a lost
	// delivery); without it the source waits for the ack wait instead. An
	// AckNone consumer (AcksNone) needs it.
	JS jetstream.JetStream
	// Stream, when set, lets the source notice a stream that was recreated
	// (its last sequence below the checkpoint) and stop skipping by the old
	// checkpoint.
	Stream jetstream.Stream
	Sink   Sink
	// CheckpointKey names the checkpoint row; use one per stream and consumer.
	CheckpointKey string
	BatchSize     int // events per transaction; DefaultBatchSize when <= 0
	FetchSize     int // messages decoded together; DefaultFetchSize when <= 0, at most BatchSize
	// MaxMessageBytes is the largest message the stream may hold
	// (ingest.max_message_bytes; DefaultMaxMessageBytes when <= 0): what
	// the client buffers must hold at least one.
	MaxMessageBytes int
	// MaxWait is the flush interval: a batch is stored at the latest this
	// long after its first message arrived (DefaultMaxWait when <= 0; at
	// most 5 s).
	MaxWait time.Duration
	Decode  audit.Options
	Workers int // DefaultDecodeWorkers when <= 0
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
	// an operator, or lost by the server, or deleted with its stream) to
	// create it again.
	Recreate func(ctx context.Context) (jetstream.Consumer, error)
	// RecreateStream, when set, is called before Recreate to create the
	// stream again should it be missing too (an idempotent EnsureStream).
	// A stream that was recreated (its creation time changed) restarts its
	// sequences, so the source drops its checkpoint and stores from 1 again.
	RecreateStream func(ctx context.Context) (jetstream.Stream, error)
	// OnRecreate is called with "stream" or "consumer" for each one found
	// recreated while the source runs.
	OnRecreate func(what string)
	// OnHealth reports whether ingestion works: false with the reason when
	// the stream or consumer is missing or the Sink refuses batches, true
	// once it is recreated and the Sink stores again. Called on changes only.
	OnHealth func(ok bool, reason string)
	// StoreThread, when set, is called by the goroutine that stores every
	// batch as it starts, and what it returns as that goroutine ends: the
	// daemon passes threadprio.Favor's, which gives the storing thread
	// priority over the others (DuckDB appends on it).
	StoreThread func() (release func())

	nextDelivery uint64 // the delivery sequence expected next; 0 = start of a new run
	// lastDelivery is the delivery sequence of the last message received
	// since the consumer was last reset or recreated (the server restarts
	// its delivery sequences then): lostTail compares it with the server's.
	lastDelivery  uint64
	streamCreated time.Time // when the stream in use was created, to notice a new one

	health Health
}

func (s *JetStreamSource) defaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.FetchSize <= 0 {
		s.FetchSize = DefaultFetchSize
	}
	s.FetchSize = min(s.FetchSize, s.BatchSize)
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

// Run consumes until ctx is cancelled; then it stores and acknowledges what
// it holds (within ShutdownGrace) and returns nil. It returns an error only
// when it cannot start (the checkpoint cannot be read).
//
// Fetching, decoding and storing overlap: a fetcher goroutine pulls the
// next messages while the last ones are decoded and staged, and one batch
// fills while the previous one is committed. Memory is bounded by two
// staged batches (Arrow columns, about 30 MB each for 122,880 events) and
// five fetches (one decoding, two waiting in the gatherer, two requested
// ahead by the client); a full batch waits until the previous one is stored
// and acknowledged, so commits and acknowledgements stay in stream order.
func (s *JetStreamSource) Run(ctx context.Context) error {
	s.defaults()
	if s.JS == nil && s.acks() == AcksNone {
		return fmt.Errorf("jetstream source: consumer %s acknowledges nothing (AckNone), so only a rewind brings back a lost delivery: set JS", s.CheckpointKey)
	}
	var cp uint64
	var cpAt time.Time
	var err error
	if t, ok := s.Sink.(CheckpointTimer); ok {
		cp, cpAt, err = t.CheckpointAt(ctx, s.CheckpointKey)
	} else {
		cp, err = s.Sink.Checkpoint(ctx, s.CheckpointKey)
	}
	if err != nil {
		return fmt.Errorf("jetstream source: %w", err)
	}
	if s.Stream != nil {
		info, ok := s.streamInfo(ctx)
		if !ok {
			return nil
		}
		if info != nil {
			s.streamCreated = info.Created
			// A stream deleted and recreated while the daemon was down
			// restarts its sequences, so the old checkpoint would skip new
			// messages: seen when they are fewer than the checkpoint, or
			// when the stream is younger than it (the server's clock against
			// the store's: a skew costs a re-read, which ids de-duplicate).
			switch {
			case info.State.LastSeq < cp:
				s.Log.Warn("stream sequence is below the stored checkpoint: the stream was recreated; ignoring the old checkpoint",
					"stream", info.Config.Name, "last_seq", info.State.LastSeq, "checkpoint", cp)
				cp = 0
			case cp > 0 && !cpAt.IsZero() && info.Created.After(cpAt):
				s.Log.Warn("the stream was created after the stored checkpoint: it was recreated while the daemon was down; ignoring the old checkpoint",
					"stream", info.Config.Name, "created", info.Created, "checkpoint", cp, "checkpoint_at", cpAt)
				cp = 0
			}
		}
	}
	if !s.resync(ctx, cp) {
		return nil
	}
	s.Log.Info("jetstream ingest started", "consumer", s.CheckpointKey, "checkpoint", cp,
		"batch_size", s.BatchSize, "fetch_size", s.FetchSize, "flush_interval", s.MaxWait)
	if s.Started != nil {
		s.Started()
	}

	// Payloads are borrowed: the NATS client allocates each one, and nothing
	// modifies them.
	opts := s.Decode
	opts.Borrow = true
	p := &pipeline{src: s, dec: &Decoder{Opts: opts, Workers: s.Workers, CheckSubject: true}, cp: cp}
	defer p.close()
	var bo backoff
	lost := false // the consumer is missing and recreating it failed
	for ctx.Err() == nil {
		// One fetcher per contiguous run of deliveries: a gap or a fetch
		// error stops it before the consumer is rewound or recreated.
		fetches, stopFetcher := s.startFetcher(ctx)
		added := p.added
		err := p.fill(ctx, fetches)
		stopFetcher()
		if err == nil {
			break // ctx ended
		}
		if p.added > added {
			bo.reset() // the failure follows a working run: start the backoff over
		}
		p.drop() // unacknowledged: redelivered after the rewind
		if !p.wait() {
			return nil
		}
		var gap *gapError
		recreated := false
		switch {
		case errors.As(err, &gap):
			s.fail("fetch", err)
			if !s.resync(ctx, p.cp) {
				return nil
			}
			continue
		case lost || consumerMissing(err) || errors.Is(err, jetstream.ErrStreamNotFound):
			// lost: the last recreate failed, and fetching from the missing
			// consumer now fails otherwise ("no responders"): try again.
			s.fail("fetch", err)
			s.health.Set("missing", fmt.Sprintf("the stream or the consumer %s is missing: recreating it (%v)", s.CheckpointKey, err), s.OnHealth)
			recreated = s.recreate(ctx, p)
			lost = !recreated && s.Recreate != nil
		default:
			s.fail("fetch", err)
		}
		if !bo.wait(ctx) || !s.resync(ctx, p.cp) {
			return nil
		}
		if recreated {
			s.health.Set("missing", "", s.OnHealth)
		}
	}
	// Shutting down: store what is filling.
	p.flush(ctx)
	return nil
}

// consumeStopWait bounds how long stopConsume waits for the client to
// unsubscribe.
const consumeStopWait = 5 * time.Second

// stopConsume stops a Consume and waits until the client has unsubscribed
// its inbox. The client unsubscribes on its own goroutine after Stop
// returns; a rewind sent before then reached the server first, which
// redelivered the rewound messages to this consumption's pull requests
// still waiting there, lost with it: the source then received nothing
// until the ack wait (TestJetStreamLostDeliveryRewinds under load: 4 runs
// of 450 stalled so before, none of 600 since). Once the unsubscribe is on
// the connection ahead of the rewind, the server drops those requests
// first.
func stopConsume(cc jetstream.ConsumeContext) {
	cc.Stop()
	select {
	case <-cc.Closed():
	case <-time.After(consumeStopWait):
	}
}

// fetchBytesPerMessage sizes a fetch's byte budget (FetchBytes): 1 MiB for
// the default FetchSize, about 2,000 single events or 35 messages of 64.
// Everything pulled is held until it is decoded, and serve's Go heap runs
// under a soft limit: at 1 KiB per message (4 MiB fetches, 8 MiB pulled
// ahead) its live heap averaged 164 MB against 120 MB, the collector ran
// 153 times against 55 while 1M events in 64-event messages were stored,
// and they were stored ~25% slower (README, benchmarks). Single events
// drained at the same rate with either.
const fetchBytesPerMessage = 256

// FetchBytes is the most payload one fetch of fetchSize messages holds: a
// fetch is handed on when it has fetchSize messages or this many bytes, and
// the client pulls up to two of them ahead. It is at least maxMessageBytes,
// so that the largest batched message fits in a pull.
func FetchBytes(fetchSize, maxMessageBytes int) int {
	return max(fetchSize*fetchBytesPerMessage, maxMessageBytes)
}

// pullBytes is what the client requests ahead: two fetches, and at least
// the largest message the server accepts (its max_payload, headers and
// subject besides). A message larger than a pull's max bytes is never
// delivered: the server answers that it exceeds them, which the client
// takes for the end of the pull, so the consumer would wait on it forever
// without an error. Only a server that accepts more than ingest.max_message_bytes
// (an external one; the embedded server's max_payload is set from it) can hold one.
func (s *JetStreamSource) pullBytes(fetchBytes int) int {
	n := 2 * fetchBytes
	if s.JS != nil {
		if mp := int(s.JS.Conn().MaxPayload()); mp > 0 {
			n = max(n, mp+pullHeadroom)
		}
	}
	return n
}

// pullHeadroom is room for a message's subject and reply beside its
// max_payload of headers and data.
const pullHeadroom = 4 << 10

func (s *JetStreamSource) maxMessageBytes() int {
	if s.MaxMessageBytes > 0 {
		return s.MaxMessageBytes
	}
	return DefaultMaxMessageBytes
}

// startFetcher consumes continuously (the client keeps pull requests for
// up to two fetches outstanding, so the server never waits for the next
// request) and hands the messages on FetchSize at a time from its own
// goroutine, so that transport and decoding overlap. Messages arrive through
// a Consume handler, which costs about a microsecond less per message than
// an iterator's Next (measured: a discarding consumer drained 1M events in
// 3.9-4.5 s instead of 5.2-5.5 s). It stops after an error (which it
// delivers) or when stop is called; stop waits for it.
func (s *JetStreamSource) startFetcher(ctx context.Context) (<-chan fetchResult, func()) {
	fctx, cancel := context.WithCancel(ctx)
	out := make(chan fetchResult, 1)
	done := make(chan struct{})
	// Fetches and what the client buffers are bounded in bytes as well as
	// messages: a batched message holds many events, and 2 x FetchSize of
	// them would hold hundreds of megabytes.
	fetchBytes := FetchBytes(s.FetchSize, s.maxMessageBytes())
	g := newGatherer(s.FetchSize, fetchBytes)
	cc, err := s.Consumer.Consume(g.add, jetstream.PullMaxBytes(s.pullBytes(fetchBytes)),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { g.fail(err) }))
	if err != nil {
		out <- fetchResult{err: fmt.Errorf("pull from consumer %s: %w", s.CheckpointKey, err)}
		close(done)
		return out, cancel
	}
	go func() {
		defer close(done)
		// Stopping drops what the client holds unprocessed: unacknowledged,
		// it is redelivered after the rewind or a restart.
		defer stopConsume(cc)
		defer g.close()
		for {
			fr, ok := g.next(fctx)
			if !ok {
				return
			}
			select {
			case out <- fr:
			case <-fctx.Done():
				return
			}
			if fr.err != nil {
				return
			}
		}
	}()
	return out, func() { cancel(); g.close(); <-done }
}

func (s *JetStreamSource) fail(stage string, err error) {
	s.Log.Error("jetstream ingest: "+stage+" failed", "err", err)
	if s.OnError != nil {
		s.OnError(stage, err)
	}
}

// streamSettle is how long recreate waits before it creates a deleted stream
// again.
const streamSettle = time.Second

// recreate creates the stream (when RecreateStream is set) and the consumer
// again; true when both exist now. A new stream restarts its sequences, so
// the checkpoint in hand no longer applies.
func (s *JetStreamSource) recreate(ctx context.Context, p *pipeline) bool {
	if s.Recreate == nil {
		return false
	}
	if s.RecreateStream != nil {
		// The server tells the consumer it is gone while it still removes
		// the deleted stream's files: a stream created in that moment
		// under the same name loses its own files to the removal (measured
		// under load: "error opening msg block file"). Let it finish.
		if !wait.Sleep(ctx, streamSettle) {
			return false
		}
		st, err := s.RecreateStream(ctx)
		if err != nil {
			s.fail("fetch", fmt.Errorf("recreate stream: %w", err))
			return false
		}
		s.Stream = st
	}
	if s.Stream != nil {
		info, ok := s.streamInfo(ctx)
		if !ok {
			return false
		}
		if info != nil && !info.Created.Equal(s.streamCreated) {
			known := !s.streamCreated.IsZero()
			s.streamCreated = info.Created
			if known {
				s.Log.Warn("the stream was deleted and has been recreated: its sequences start again; ignoring the old checkpoint",
					"stream", info.Config.Name, "checkpoint", p.cp)
				p.cp = 0
				if s.OnRecreate != nil {
					s.OnRecreate("stream")
				}
			}
		}
	}
	c, err := s.Recreate(ctx)
	if err != nil {
		s.fail("fetch", fmt.Errorf("recreate consumer: %w", err))
		return false
	}
	s.Log.Warn("consumer was missing and has been recreated", "consumer", s.CheckpointKey)
	s.Consumer = c
	s.nextDelivery, s.lastDelivery = 0, 0
	if s.OnRecreate != nil {
		s.OnRecreate("consumer")
	}
	return true
}

// streamInfo asks the stream what it is until it answers (a stream whose
// leader is being elected fails for a moment): without its creation time
// a recreated stream would be read by the old stream's checkpoint, which
// passes over as many of its first messages. nil when the stream is
// missing (the consumer's fetch then fails and recreates both); false when
// ctx ended first.
func (s *JetStreamSource) streamInfo(ctx context.Context) (*jetstream.StreamInfo, bool) {
	var bo backoff
	deadline := time.Now().Add(streamInfoPatience)
	for {
		info, err := s.Stream.Info(ctx)
		if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return info, true
		}
		if time.Now().After(deadline) {
			// Not a moment's election but a lasting refusal (the user may
			// not read stream info): go on as before, without it.
			s.fail("fetch", fmt.Errorf("stream info: %w; going on without the stream's creation time (a stream recreated meanwhile is noticed by its sequences only)", err))
			return nil, true
		}
		s.fail("fetch", fmt.Errorf("stream info: %w", err))
		if !bo.wait(ctx) {
			return nil, false
		}
	}
}

// streamInfoPatience is how long streamInfo asks a stream that fails to
// answer: well past a leader election.
var streamInfoPatience = 30 * time.Second // a var: tests wait less

// resync makes sure that no delivery the source has not seen is
// outstanding: at start (a previous run may have crashed holding a batch),
// after a gap, and after the consumer was recreated. It rewinds the consumer
// to after its ack floor and the checkpoint cp (Rewind), or, where the
// server cannot, waits for the ack wait (after which JetStream redelivers
// the unacknowledged messages before anything newer). The next delivery
// then starts a new contiguous run. false when ctx ended first.
func (s *JetStreamSource) resync(ctx context.Context, cp uint64) bool {
	s.nextDelivery = 0
	var bo backoff
	for s.JS != nil {
		next, err := Rewind(ctx, s.JS, s.Consumer, cp)
		if err == nil {
			if next > 0 {
				// The reset restarts delivery sequences at 1: a first
				// delivery numbered later was lost (to a pull request left
				// waiting from before the reset, say), a gap like any other.
				s.nextDelivery, s.lastDelivery = 1, 0
				s.Log.Info("positioned the consumer after its checkpoint: what was delivered and never stored comes again, what is stored does not",
					"consumer", s.CheckpointKey, "checkpoint", cp, "next_seq", next)
			}
			return true
		}
		if consumerMissing(err) {
			return true // nothing is outstanding; the next fetch recreates it
		}
		s.fail("fetch", err)
		if s.acks() != AcksNone {
			break
		}
		// Nothing redelivers to an AckNone consumer: only the rewind brings
		// back what it delivered and the source did not store.
		if !bo.wait(ctx) {
			return false
		}
	}

	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	info, err := s.Consumer.Info(ictx)
	cancel()
	if (err == nil && info.NumAckPending == 0) || consumerMissing(err) {
		return true
	}
	ackWait := DefaultAckWait
	if err == nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait
	}
	s.Log.Warn("waiting for the ack wait before fetching, so that unacknowledged messages come back first", "wait", ackWait)
	return wait.Sleep(ctx, ackWait+time.Second)
}

// consumerMissing tells the errors of a consumer that does not exist (any
// more): one deleted while its recreation failed (the server may refuse to
// create it again while it still removes the deleted one's files).
func consumerMissing(err error) bool {
	// An API error with the consumer-not-found code matches
	// ErrConsumerNotFound too (jetstream.APIError compares codes).
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}

// lostTail tells whether the server delivered a message after the last
// one the source received: a loss that no later delivery reveals as a gap
// (the newest messages lost while nothing follows them). JetStream
// redelivers such a loss after the ack wait, except to an AckNone consumer,
// which only a rewind brings it back to. The pipeline asks when nothing
// arrived for a flush interval, twice in a row before it rewinds, so that a
// message merely still on its way is not taken for lost.
//
// It compares delivery sequences: the stream sequence a consumer reports
// as delivered is how far it looked, which for a filtered consumer (a
// shard) runs past its last message.
func (s *JetStreamSource) lostTail(ctx context.Context) (uint64, bool) {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := s.Consumer.Info(ictx)
	if err != nil {
		return 0, false // a missing consumer shows at the next fetch
	}
	// With messages still pending, the next delivery would show the gap.
	return info.Delivered.Consumer, info.NumPending == 0 && info.Delivered.Consumer > s.lastDelivery
}

// gapError is a delivery sequence that does not follow the previous one.
// With tail set, got is the last delivery the server made and want the
// last one received (lostTail).
type gapError struct {
	got, want uint64
	consumer  string
	tail      bool
}

func (e *gapError) Error() string {
	if e.tail {
		return fmt.Sprintf("the server made %d deliveries and the last to arrive was delivery %d: a message was lost between NATS and mcptrail "+
			"(or another process consumes the durable consumer %s)", e.got, e.want, e.consumer)
	}
	return fmt.Sprintf("delivery %d arrived where %d was expected: a message was lost between NATS and mcptrail "+
		"(or another process consumes the durable consumer %s)", e.got, e.want, e.consumer)
}

// fetched is one fetch with its parsed metadata.
type fetched struct {
	msgs    []jetstream.Msg
	in      []Message
	maxSeq  uint64
	last    jetstream.Msg // the message with maxSeq
	pending uint64        // the last message's NumPending
}

// prepare parses the fetch's metadata and checks that its deliveries follow
// the previous ones without a gap.
func (s *JetStreamSource) prepare(msgs []jetstream.Msg) (fetched, error) {
	b := fetched{msgs: msgs, in: make([]Message, 0, len(msgs))}
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return b, fmt.Errorf("message on %s without JetStream metadata: %w", m.Subject(), err)
		}
		if s.nextDelivery != 0 && md.Sequence.Consumer != s.nextDelivery {
			got, want := md.Sequence.Consumer, s.nextDelivery
			s.nextDelivery = 0
			return b, &gapError{got: got, want: want, consumer: s.CheckpointKey}
		}
		s.nextDelivery = md.Sequence.Consumer + 1
		s.lastDelivery = md.Sequence.Consumer
		b.in = appendMessages(b.in, m.Data(), m.Subject(), md.Sequence.Stream, m.Headers())
		b.pending = md.NumPending
		if md.Sequence.Stream >= b.maxSeq {
			b.maxSeq, b.last = md.Sequence.Stream, m
		}
	}
	return b, nil
}

// store stores and acknowledges one batch; cp is the checkpoint before it.
// It is false when ctx was cancelled before the batch could be stored.
func (s *JetStreamSource) store(ctx context.Context, f *filling, cp uint64) bool {
	// The batch in hand is finished even when shutdown begins (flush), but
	// only for ShutdownGrace: an unstored batch is simply redelivered later.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(s.ShutdownGrace, cancel) })
	defer stop()

	defer f.staged.Release()
	rep := f.rep
	rep.Messages, rep.Seq, rep.Dead, rep.Checkpoint = f.msgs, f.maxSeq, f.dead, max(cp, f.maxSeq)
	batch := batchOf(f.staged, f.dead)
	if f.maxSeq > cp {
		batch.Checkpoint = &Checkpoint{Consumer: s.CheckpointKey, Seq: f.maxSeq}
		var bo backoff
		for {
			rep.Attempts++
			t0 := time.Now()
			res, err := s.Sink.Append(wctx, batch)
			if err == nil {
				rep.Result, rep.Commit = res, time.Since(t0)
				s.health.Set("commit", "", s.OnHealth)
				break
			}
			// Never acknowledge what is not stored: keep the batch and retry.
			s.health.Set("commit", "storing events fails, retrying: "+err.Error(), s.OnHealth)
			s.fail("append", fmt.Errorf("store batch up to stream sequence %d (%d messages, attempt %d): %w", f.maxSeq, f.msgs, rep.Attempts, err))
			if ctx.Err() != nil || !bo.wait(ctx) {
				s.Log.Warn("shutting down with an unstored batch; it will be redelivered", "messages", f.msgs, "last_seq", f.maxSeq)
				return false
			}
		}
	}

	t0 := time.Now()
	s.ack(wctx, f)
	rep.Ack = time.Since(t0)
	s.Log.Debug("batch stored", "messages", rep.Messages, "last_seq", f.maxSeq, "ingested", rep.Result.Ingested,
		"duplicates", rep.Result.Duplicates+rep.Redelivered, "rejected", rep.Result.Rejected,
		"fetch", rep.Fetch, "decode", rep.Decode, "commit", rep.Commit, "ack", rep.Ack)
	if s.OnBatch != nil {
		s.OnBatch(rep)
	}
	return true
}

// acks is the ack policy of the consumer in use.
func (s *JetStreamSource) acks() Acks {
	if info := s.Consumer.CachedInfo(); info != nil {
		return acksOf(info.Config.AckPolicy)
	}
	return AcksBatch
}

// ack acknowledges a stored batch as its consumer's policy asks. A lost
// acknowledgement only causes a redelivery, which the checkpoint then
// skips, so failures are logged, not retried.
func (s *JetStreamSource) ack(ctx context.Context, f *filling) {
	switch f.acks {
	case AcksNone: // the checkpoint committed with the batch is the record
		return
	case AcksEach:
		for _, m := range f.each {
			if err := m.Ack(); err != nil {
				s.fail("ack", err)
				return
			}
		}
		return
	}
	last := f.last
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
	return wait.Sleep(ctx, b.d)
}
