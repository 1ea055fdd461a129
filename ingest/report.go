package ingest

import (
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// BatchReport tells an observer (metrics) what one batch did.
type BatchReport struct {
	Messages int    // messages in the batch (fetched or received)
	Seq      uint64 // highest stream sequence of the batch (0 for core NATS)
	// Checkpoint is the highest stream sequence stored once the batch is
	// (JetStream only): what a consumer that acknowledges nothing has
	// instead of an ack floor.
	Checkpoint uint64
	// Labels counts the batch's decoded events by input format and server;
	// Result says how many of the handed-over ones were new.
	Labels  map[EventLabel]*LabelCount
	Dead    []DeadLetter
	Skipped int // payloads that are not tool calls
	// Redelivered counts messages at or below the checkpoint: stored by an
	// earlier run whose acknowledgement was lost.
	Redelivered int
	Result      Result
	Commit      time.Duration // time spent in Sink.Append (the successful attempt)
	Attempts    int           // Append attempts (> 1 after database errors)
	// Fetch, Decode and Ack time the other steps (JetStream only), for the
	// debug log and profiling.
	Fetch, Decode, Ack time.Duration
}

// EventLabel is what metrics count events by.
type EventLabel struct {
	Format audit.Format // audit.FormatAuto when unknown
	Server string
}

// LabelCount counts one label's events in a batch.
type LabelCount struct {
	Handed      int // first of their id in the batch: handed to the Sink
	Repeats     int // repeating an id earlier in the batch: not stored
	Redelivered int // at or below the checkpoint: stored by an earlier run
}

// count adds events (formats parallel; repeat, when not nil, flags repeats
// within the batch) to the report's labels.
func (r *BatchReport) count(events []audit.Event, formats []audit.Format, repeat []bool, redelivered bool) {
	if r.Labels == nil {
		r.Labels = map[EventLabel]*LabelCount{}
	}
	var k EventLabel
	var c *LabelCount
	for i := range events {
		f := audit.FormatAuto
		if i < len(formats) && formats[i] != "" {
			f = formats[i]
		}
		// Batches are mostly one server and format: reuse the last entry.
		if c == nil || k.Format != f || k.Server != events[i].Server {
			k = EventLabel{Format: f, Server: events[i].Server}
			if c = r.Labels[k]; c == nil {
				c = &LabelCount{}
				r.Labels[k] = c
			}
		}
		switch {
		case redelivered:
			c.Redelivered++
		case repeat != nil && repeat[i]:
			c.Repeats++
		default:
			c.Handed++
		}
	}
}

// eventStaging is the Staging of sinks that take plain events: it holds
// them, repeats left out.
type eventStaging struct {
	events []audit.Event
	seen   map[string]struct{}
}

func newEventStaging(capacity int) *eventStaging {
	return &eventStaging{events: make([]audit.Event, 0, capacity), seen: make(map[string]struct{}, capacity)}
}

func (s *eventStaging) Add(events []audit.Event, repeat []bool) {
	for i := range events {
		_, dup := s.seen[events[i].ID]
		if repeat != nil {
			repeat[i] = dup
		}
		if !dup {
			s.seen[events[i].ID] = struct{}{}
			s.events = append(s.events, events[i])
		}
	}
}

func (s *eventStaging) Len() int { return len(s.events) }
func (s *eventStaging) Release() { s.events, s.seen = nil, nil }

// newStaging makes a Staging for sink: its own when it has one.
func newStaging(sink Sink, capacity int) Staging {
	if ss, ok := sink.(StagingSink); ok {
		return ss.NewStaging(capacity)
	}
	return newEventStaging(capacity)
}

// batchOf is the Batch that hands staged events to the Sink.
func batchOf(st Staging, dead []DeadLetter) Batch {
	if es, ok := st.(*eventStaging); ok {
		return Batch{Events: es.events, DeadLetters: dead}
	}
	return Batch{Staged: st, DeadLetters: dead}
}
