package ingest

// The JetStream source's pipeline: fetches are decoded into the filling
// batch while the previous batch is stored and acknowledged.

import (
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// pipeline assembles batches from fetches and stores them, one batch
// filling while the previous one is stored.
type pipeline struct {
	src     *JetStreamSource
	dec     *Decoder
	scratch Decoded // one fetch's decoded events, reused
	repeat  []bool  // which of them repeat an id of the batch
	filling *filling
	storing *storing
	// stores hands batches to the goroutine that stores them all (one
	// goroutine, so that StoreThread applies to every batch), started by
	// the first flush; storerDone closes when it has ended.
	stores     chan func()
	storerDone chan struct{}
	// cp is the highest stream sequence handed to the Sink (or stored
	// before this run): messages at or below it are redeliveries.
	cp uint64
	// pending is what the stream held for the consumer beyond the last
	// message added (its NumPending).
	pending uint64
	// added counts the fetches taken in, so that Run can tell a failure
	// after a working run from repeated failures.
	added int
}

// storing is a batch handed to the Sink; done closes when it is stored and
// acknowledged, or abandoned (ok false) at shutdown.
type storing struct {
	done chan struct{}
	ok   bool
}

// filling is a batch being assembled from successive fetches.
type filling struct {
	deadline time.Time // flush_interval after its first message
	lastFull bool      // the last fetch added was a full FetchSize: a backlog
	msgs     int
	acks     Acks            // the consumer's policy when the batch began
	each     []jetstream.Msg // every message, for AcksEach
	last     jetstream.Msg   // the message with maxSeq, for AcksBatch
	maxSeq   uint64
	staged   Staging // the events to store
	dead     []DeadLetter
	rep      BatchReport
}

// fill adds fetches to the filling batch and hands batches over when they
// are full or their flush interval passed. It returns nil when ctx ends,
// a *gapError on a lost delivery, or a fetch error.
func (p *pipeline) fill(ctx context.Context, fetches <-chan fetchResult) error {
	flush := time.NewTimer(time.Hour)
	defer flush.Stop()
	// An AckNone consumer checks for a lost last delivery when idle
	// (JetStreamSource.lostTail).
	var idle <-chan time.Time
	idleCheck := time.NewTicker(p.src.MaxWait)
	defer idleCheck.Stop()
	if p.src.acks() == AcksNone {
		idle = idleCheck.C
	}
	suspect := false // the last idle check found a delivery not received
	for {
		var due <-chan time.Time
		if p.filling != nil {
			flush.Reset(time.Until(p.filling.deadline))
			due = flush.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-due:
			if !p.flush(ctx) {
				return nil
			}
		case <-idle:
			delivered, lost := p.src.lostTail(ctx)
			if lost && suspect {
				return &gapError{consumer: p.src.CheckpointKey, tail: true, got: delivered, want: p.src.lastDelivery}
			}
			suspect = lost
		case fr := <-fetches:
			idleCheck.Reset(p.src.MaxWait)
			suspect = false
			// A fetch that would overfill the batch is split: a batch of
			// exactly BatchSize events is whole row groups, which DuckDB
			// writes once, while a remainder left behind each batch became
			// a small row group that the next checkpoint had to merge and
			// rewrite (measured: 2.8 s at 1M rows instead of 0.3 s).
			for msgs := fr.msgs; len(msgs) > 0; {
				n := messagesFitting(msgs, p.src.BatchSize-p.filled())
				if n == 0 && p.filled() > 0 {
					// The next batched message does not fit: store what is
					// in hand first.
					if !p.flush(ctx) {
						return nil
					}
					continue
				}
				n = max(n, 1) // a message larger than a whole batch goes alone
				if err := p.add(ctx, fetchResult{msgs: msgs[:n], took: fr.took, full: fr.full}); err != nil {
					return err
				}
				msgs, fr.took = msgs[n:], 0
				if p.filled() >= p.src.BatchSize && !p.flush(ctx) {
					return nil
				}
			}
			if f := p.filling; f != nil && len(fr.msgs) > 0 {
				// A short fetch after a full one with nothing left pending:
				// a backlog has just been drained, and no more is coming
				// for now. Waiting out the flush interval would only delay
				// its last events.
				drained := !fr.full && f.lastFull && p.pending == 0
				if f.lastFull = fr.full; drained && !p.flush(ctx) {
					return nil
				}
			}
			if fr.err != nil {
				return fr.err
			}
		}
	}
}

func (p *pipeline) filled() int {
	if p.filling == nil {
		return 0
	}
	return p.filling.msgs
}

// add decodes one fetch into the filling batch. It fails when the deliveries
// do not follow the previous ones.
func (p *pipeline) add(ctx context.Context, fr fetchResult) error {
	fb, err := p.src.prepare(fr.msgs)
	if err != nil {
		return err
	}
	f := p.filling
	if f == nil {
		capacity := 0
		if fr.full {
			// A full fetch means a backlog: the batch will fill, so size it
			// once instead of growing it fetch by fetch.
			capacity = p.src.BatchSize
		}
		f = &filling{deadline: time.Now().Add(p.src.MaxWait), staged: newStaging(p.src.Sink, capacity), acks: p.src.acks()}
		p.filling = f
	}
	f.rep.Fetch += fr.took
	t0 := time.Now()
	// Messages in hand are decoded even when shutdown begins, so that the
	// final flush stores them. Decoding goes in runs of "already stored" and
	// "new" messages, in order, so that the Decoder's Intercept state sees
	// every message once.
	dctx := context.WithoutCancel(ctx)
	in := fb.in
	for start := 0; start < len(in); {
		old := in[start].Seq <= p.cp
		end := start + 1
		for end < len(in) && (in[end].Seq <= p.cp) == old {
			end++
		}
		out := &p.scratch
		out.Events, out.Formats, out.Dead, out.Skipped = out.Events[:0], out.Formats[:0], nil, 0
		if err := p.dec.DecodeAppend(dctx, in[start:end], out); err != nil {
			return err
		}
		if old {
			f.rep.Redelivered += end - start
			f.rep.count(out.Events, out.Formats, nil, true)
		} else {
			p.repeat = slices.Grow(p.repeat[:0], len(out.Events))[:len(out.Events)]
			f.staged.Add(out.Events, p.repeat)
			f.rep.count(out.Events, out.Formats, p.repeat, false)
			f.dead = append(f.dead, out.Dead...)
			f.rep.Skipped += out.Skipped
		}
		clear(out.Events) // the staging copied them; drop the payloads
		start = end
	}
	f.rep.Decode += time.Since(t0)
	f.msgs += len(in)
	p.added++
	p.pending = fb.pending
	// Keep only what acknowledging needs: the raw payloads are decoded.
	if f.acks == AcksEach {
		f.each = append(f.each, fb.msgs...)
	}
	if fb.maxSeq >= f.maxSeq {
		f.maxSeq, f.last = fb.maxSeq, fb.last
	}
	return nil
}

// drop discards the filling batch unstored.
func (p *pipeline) drop() {
	if p.filling != nil {
		p.filling.staged.Release()
		p.filling = nil
	}
}

// flush waits until the batch being stored is done, then starts storing
// the filling one. false when the previous batch was abandoned (shutdown):
// nothing after it may be stored or acknowledged, or its messages would
// fall below the checkpoint unstored.
func (p *pipeline) flush(ctx context.Context) bool {
	if !p.wait() {
		return false
	}
	f := p.filling
	if f == nil {
		return true
	}
	p.filling = nil
	st := &storing{done: make(chan struct{})}
	p.storing = st
	cp := p.cp
	p.cp = max(p.cp, f.maxSeq)
	if p.stores == nil {
		p.startStorer()
	}
	p.stores <- func() {
		defer close(st.done)
		st.ok = p.src.store(ctx, f, cp)
	}
	return true
}

// startStorer starts the goroutine that stores the batches flush hands it,
// one at a time (flush waits for the previous batch first).
func (p *pipeline) startStorer() {
	p.stores, p.storerDone = make(chan func()), make(chan struct{})
	go func() {
		defer close(p.storerDone)
		if p.src.StoreThread != nil {
			defer p.src.StoreThread()()
		}
		for store := range p.stores {
			store()
		}
	}()
}

// close waits for the batch being stored and ends the storing goroutine.
func (p *pipeline) close() {
	p.wait()
	if p.stores != nil {
		close(p.stores)
		<-p.storerDone
		p.stores = nil
	}
}

// wait waits for the batch being stored; false when it was abandoned.
func (p *pipeline) wait() bool {
	st := p.storing
	if st == nil {
		return true
	}
	<-st.done
	if !st.ok {
		return false
	}
	p.storing = nil
	return true
}

type fetchResult struct {
	msgs []jetstream.Msg
	err  error
	took time.Duration
	full bool // FetchSize messages came (a part of a split fetch keeps it)
}
