package audit

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// Agents repeat their arguments: the same VM polled, the same node listed
// (200,000 simulated calls hold 9,315 distinct argument objects). What
// applyArgs derives from an args object is a pure function of its raw text,
// so a cache keyed by that text skips the canonical encoding and the
// SHA-256 for a repeat. The cache is direct-mapped and lock-free: each slot
// holds an immutable entry, a decoder replaces whatever its slot held, and
// a lookup compares the whole raw text, so a collision only costs a miss. A
// text is kept only when it misses twice in a row in its slot: arguments
// that never repeat (a fresh id in every call) cost a hash and no
// allocation.

// argsCacheSlots is the number of entries kept (a power of two).
const argsCacheSlots = 1 << 14

// argsCacheMaxRaw is the longest raw args text cached: longer ones rarely
// repeat, and each entry keeps its text and canonical form.
const argsCacheMaxRaw = 256

// argsEntry is what applyArgs derives from one raw args text. Its strings
// and slices are shared by every event decoded from a repeat and never
// written.
type argsEntry struct {
	raw       string
	hash      string   // args_hash
	keys      []string // arg_keys: sorted distinct top-level keys, nil for {}
	canonical []byte   // the canonical encoding (Event.Args copies it)
}

var argsCache struct {
	seed  maphash.Seed
	slots [argsCacheSlots]atomic.Pointer[argsEntry]
	// seen is, per slot, the hash of the last text that missed there.
	seen [argsCacheSlots]atomic.Uint64
}

func init() { argsCache.seed = maphash.MakeSeed() }

// cachedArgs returns the entry of raw (nil on a miss) and raw's hash, for
// cacheArgs.
func cachedArgs(raw string) (*argsEntry, uint64) {
	if len(raw) > argsCacheMaxRaw {
		return nil, 0
	}
	h := maphash.String(argsCache.seed, raw)
	if e := argsCache.slots[h&(argsCacheSlots-1)].Load(); e != nil && e.raw == raw {
		return e, h
	}
	return nil, h
}

// cacheArgs keeps what was derived from raw (whose hash cachedArgs gave)
// when raw is the second text in a row to miss in its slot. The entry owns
// copies of its strings, in one buffer: raw and keys may alias a borrowed
// payload.
func cacheArgs(h uint64, raw, hash string, keys []string, canonical []byte) {
	if len(raw) > argsCacheMaxRaw {
		return
	}
	slot := h & (argsCacheSlots - 1)
	if argsCache.seen[slot].Swap(h) != h {
		return
	}
	size := len(raw) + len(canonical)
	for _, k := range keys {
		size += len(k)
	}
	buf := make([]byte, 0, size)
	own := func(s string) string {
		at := len(buf)
		buf = append(buf, s...)
		return unsafe.String(unsafe.SliceData(buf[at:]), len(s))
	}
	e := &argsEntry{raw: own(raw), hash: hash}
	at := len(buf)
	buf = append(buf, canonical...)
	e.canonical = buf[at:len(buf):len(buf)]
	if len(keys) > 0 {
		e.keys = make([]string, len(keys))
		for i, k := range keys {
			e.keys[i] = own(k)
		}
	}
	argsCache.slots[slot].Store(e)
}
