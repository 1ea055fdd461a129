package analytics

import (
	"hash/maphash"
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
	for i := range events {
		e := &events[i]
		dup := s.holds(e.ID)
		if repeat != nil {
			repeat[i] = dup
		}
		if dup {
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

// holds reports whether id is already staged; if not, it records id as the
// next event's.
func (s *staging) holds(id string) bool {
	j, ok := s.seen.lookupOrAdd(hashID(id), int32(s.n))
	if !ok {
		return false
	}
	if s.cols.id(int(j)) == id {
		return true
	}
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
