package analytics

import "sync"

// idSet maps the hashes of a batch's ids to the index of the event that
// holds each (staging.findRepeats): open addressing with linear probing in one
// flat array kept at most half full, and reused from batch to batch. A Go
// map made for each batch cost three times as much to fill
// (BenchmarkBatchIDs: 122,880 ids).
type idSet struct {
	slots   []idSlot
	n       int
	touched uint64 // what touch read, kept so that its reads are not dropped
}

type idSlot struct {
	hash uint64 // 0 marks an empty slot: a hash of 0 is kept as 1 (findRepeats compares the ids behind a hash anyway)
	at   int32
}

var idSets sync.Pool // *idSet, emptied

// getIDSet returns an empty set with room for capacity ids before it grows.
func getIDSet(capacity int) *idSet {
	if s, ok := idSets.Get().(*idSet); ok && len(s.slots) >= 2*capacity {
		return s
	}
	return newIDSet(capacity)
}

// newIDSet returns an empty set of its own (not the pool's) with room for
// capacity ids before it grows.
func newIDSet(capacity int) *idSet {
	size := 16
	for size < 2*capacity {
		size <<= 1
	}
	return &idSet{slots: make([]idSlot, size)}
}

// release empties s for the next batch.
func (s *idSet) release() {
	clear(s.slots)
	s.n = 0
	idSets.Put(s)
}

// lookupOrAdd returns the index kept for hash h and true, or keeps at for
// it and returns false.
func (s *idSet) lookupOrAdd(h uint64, at int32) (int32, bool) {
	if h == 0 {
		h = 1
	}
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		switch sl.hash {
		case h:
			return sl.at, true
		case 0:
			sl.hash, sl.at = h, at
			s.n++
			return 0, false
		}
	}
}

// touch reads the first slot of each hash, so that lookupOrAdd's reads of
// them soon after find them in the cache.
func (s *idSet) touch(hashes []uint64) {
	mask := uint64(len(s.slots) - 1)
	var sum uint64
	for _, h := range hashes {
		sum += s.slots[h&mask].hash
	}
	s.touched += sum
}

// grow doubles the slots, keeping every entry.
func (s *idSet) grow() {
	old := s.slots
	s.slots, s.n = make([]idSlot, 2*len(old)), 0
	for _, sl := range old {
		if sl.hash != 0 {
			s.lookupOrAdd(sl.hash, sl.at)
		}
	}
}
