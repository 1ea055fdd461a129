// Package ingest moves audit events from their sources (files, stdin, NATS
// JetStream, core NATS) through decoding into batches, and hands each batch to a
// Sink that stores it. A source acknowledges a batch only after the Sink committed it.
package ingest

import (
	"context"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// DeadLetter is a rejected message or line, kept with its raw bytes so that
// nothing is silently dropped.
type DeadLetter struct {
	At     time.Time // when it was rejected
	Source string    // file path ("-" for stdin) or NATS subject
	Line   int64     // 1-based line number in a file or a batched NATS message; 0 for a single-event NATS message
	Seq    uint64    // JetStream stream sequence; 0 for files and core NATS
	Format string    // the format it was decoded as, or "auto" when undetectable
	Reason string    // machine-readable reason code (audit.Reason*)
	Detail string    // human-readable explanation
	Raw    []byte    // the raw bytes, truncated to the event size limit
	// Duplicate is set by the Sink's Append: a stream message's dead letter
	// stored already (the message was delivered again), not stored twice.
	Duplicate bool
}

// Checkpoint is the position of the last message of a batch in a durable
// source. The Sink stores it in the same transaction as the batch, so a source
// that restarts after a crash can skip what was committed but not acknowledged.
type Checkpoint struct {
	Consumer string // durable consumer (or other source) name
	Seq      uint64 // stream sequence of the last message in the batch
}

// Batch is what a source hands to the Sink in one piece: stored in one
// transaction, all or nothing.
type Batch struct {
	Events []audit.Event
	// Staged, when set, holds the events instead of Events: a Staging made
	// by the same Sink (see StagingSink).
	Staged      Staging
	DeadLetters []DeadLetter
	Checkpoint  *Checkpoint // nil for sources without positions (files, core NATS)
}

// Result counts what happened to a batch.
type Result struct {
	Ingested   int // new events stored
	Duplicates int // events whose id was already stored (or repeated in the batch), and redelivered dead letters (DeadLetter.Duplicate)
	Rejected   int // dead letters stored
}

// Add accumulates r2 into r.
func (r *Result) Add(r2 Result) {
	r.Ingested += r2.Ingested
	r.Duplicates += r2.Duplicates
	r.Rejected += r2.Rejected
}

// Staging holds a batch's events in a sink's own compact form (for DuckDB:
// Arrow columns), filled as they are decoded, so that a large batch does
// not sit in memory as Go structs for the garbage collector to scan.
type Staging interface {
	// Add copies events in and sets repeat[i] (when repeat is not nil) for
	// each event whose id is already held: repeats are not stored.
	Add(events []audit.Event, repeat []bool)
	// Len is the number of events held, repeats left out.
	Len() int
	// Release frees the staging; it is not used afterwards.
	Release()
}

// StagingSink is a Sink that can stage a batch as it is assembled.
type StagingSink interface {
	Sink
	// NewStaging returns an empty Staging sized for about capacity events.
	NewStaging(capacity int) Staging
}

// CheckpointTimer is a Sink that also tells when it stored a consumer's
// checkpoint (zero: never): a stream created after that is another stream
// than the one the checkpoint numbers (deleted and recreated while nothing
// read it), whose messages from the first on must be read.
type CheckpointTimer interface {
	CheckpointAt(ctx context.Context, consumer string) (seq uint64, at time.Time, err error)
}

// Sink stores batches. analytics.Store implements it.
type Sink interface {
	// Append stores the batch in one transaction and returns its counts.
	Append(ctx context.Context, b Batch) (Result, error)
	// Checkpoint returns the last committed sequence of a consumer, 0 if none.
	Checkpoint(ctx context.Context, consumer string) (uint64, error)
}
