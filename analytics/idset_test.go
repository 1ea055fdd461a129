package analytics

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The set answers as a map would, through growth, wrap-around probing and
// hashes that share their low bits, and a released set comes back empty.
func TestIDSetAnswersAsAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	s := getIDSet(4) // grows several times below
	want := map[uint64]int32{}
	for i := range 5000 {
		h := r.Uint64()
		switch i % 4 {
		case 0:
			h &^= 0xffff // same low bits: one probe chain
		case 1:
			if len(want) > 0 {
				for k := range want { // a repeat
					h = k
					break
				}
			}
		}
		at, found := s.lookupOrAdd(h, int32(i))
		if w, ok := want[h]; ok {
			require.True(t, found, "hash %x added before", h)
			require.Equal(t, w, at)
			continue
		}
		require.False(t, found, "hash %x is new", h)
		want[h] = int32(i)
	}
	assert.Equal(t, len(want), s.n)
	for h, w := range want {
		at, found := s.lookupOrAdd(h, -1)
		require.True(t, found)
		require.Equal(t, w, at)
	}

	// Hashes 0 and 1 share a slot: findRepeats tells the ids apart.
	at, found := s.lookupOrAdd(0, 42)
	if !found {
		at, found = s.lookupOrAdd(1, 43)
		assert.True(t, found)
		assert.Equal(t, int32(42), at)
	}

	s.release()
	s = getIDSet(4)
	defer s.release()
	for h := range want {
		_, found := s.lookupOrAdd(h, 0)
		assert.False(t, found, "a released set is empty")
		break
	}
}

// BenchmarkBatchIDs fills the ids of one batch (122,880, ingest's batch
// size) as staging does, against a Go map made for the batch.
func BenchmarkBatchIDs(b *testing.B) {
	const n = 122880
	r := rand.New(rand.NewPCG(1, 2))
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = r.Uint64()
	}
	b.Run("idSet", func(b *testing.B) {
		for b.Loop() {
			s := getIDSet(n)
			for i, h := range hashes {
				s.lookupOrAdd(h, int32(i))
			}
			s.release()
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := make(map[uint64]int32, n)
			for i, h := range hashes {
				if _, ok := m[h]; !ok {
					m[h] = int32(i)
				}
			}
		}
	})
}
