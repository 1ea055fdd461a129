package analytics

import (
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// staging is a batch on its way into DuckDB: its events as Arrow columns,
// without repeated ids, and the batch's time range for de-duplication
// against stored calls.
type staging struct {
	cols *columns
	// seen maps the hash of each id to the index of the event holding it;
	// integers keep the garbage collector out of a large batch.
	seen *idSet
	// collided holds, exactly, ids whose hash an earlier id already took.
	collided   map[string]struct{}
	n, repeats int
	lo, hi     time.Time
	// derive holds the keys of the staged events that get a derived
	// session if they are new.
	derive []sessionKeys
	// findRepeats' answers, the events it found new and their ids'
	// hashes, reused from call to call.
	dups   []bool
	fresh  []int
	hashes []uint64
}

var idSeed = maphash.MakeSeed()

func hashID(id string) uint64 { return maphash.String(idSeed, id) }

func newStaging(capacity int) *staging {
	return &staging{cols: newColumns(capacity), seen: getIDSet(capacity)}
}

// NewStaging implements ingest.StagingSink.
func (s *Store) NewStaging(capacity int) ingest.Staging { return newStaging(capacity) }

// Add implements ingest.Staging: the first event of each id is kept.
func (s *staging) Add(events []audit.Event, repeat []bool) {
	dups := s.findRepeats(events)
	for i := range events {
		e := &events[i]
		if repeat != nil {
			repeat[i] = dups[i]
		}
		if dups[i] {
			s.repeats++
			continue
		}
		s.cols.add(e)
		if needsDerivedSession(e) {
			s.derive = append(s.derive, keysOf(e))
		}
		if s.n == 0 || e.TS.Before(s.lo) {
			s.lo = e.TS
		}
		if s.n == 0 || e.TS.After(s.hi) {
			s.hi = e.TS
		}
		s.n++
	}
}

// findRepeats says, for each of events, whether its id is already staged
// or taken by an earlier one of events, recording the others' ids as the
// events they will be staged as. It runs before any of them is staged, in
// loops of nothing else: the set is a few MB read at random, and there the
// cache misses of consecutive ids overlap (touch's most, its loop the
// shortest), where between two events' staging each one stalled alone.
func (s *staging) findRepeats(events []audit.Event) []bool {
	s.dups = slices.Grow(s.dups[:0], len(events))[:len(events)]
	s.hashes = s.hashes[:0]
	for i := range events {
		s.hashes = append(s.hashes, hashID(events[i].ID))
	}
	s.seen.touch(s.hashes)
	s.fresh = s.fresh[:0] // positions in events of the ids new to the batch
	for i := range events {
		id := events[i].ID
		j, found := s.seen.lookupOrAdd(s.hashes[i], int32(s.n+len(s.fresh)))
		dup := found && s.idAt(int(j), events) == id
		if found && !dup {
			dup = s.collides(id)
		}
		s.dups[i] = dup
		if !dup {
			s.fresh = append(s.fresh, i)
		}
	}
	return s.dups
}

// idAt is the id of the j-th event of the batch: staged, or one of events
// that findRepeats is going through.
func (s *staging) idAt(j int, events []audit.Event) string {
	if j < s.n {
		return s.cols.id(j)
	}
	return events[s.fresh[j-s.n]].ID
}

// collides reports whether id, whose hash an earlier id of another value
// took, is a repeat of an id that met the same collision before, and
// records it if not.
func (s *staging) collides(id string) bool {
	if _, ok := s.collided[id]; ok {
		return true
	}
	if s.collided == nil {
		s.collided = map[string]struct{}{}
	}
	s.collided[strings.Clone(id)] = struct{}{}
	return false
}

// Len implements ingest.Staging.
func (s *staging) Len() int { return s.n }

// Release implements ingest.Staging.
func (s *staging) Release() {
	s.cols.release()
	if s.seen != nil {
		s.seen.release()
	}
	s.seen, s.collided, s.derive = nil, nil, nil
}
