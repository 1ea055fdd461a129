package analytics

import (
	"math/bits"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bufferPool is an Arrow allocator that keeps the buffers its records free
// for the records that follow, in classes of powers of two: each batch's
// upkeep builds the same few megabytes of records (its sessions, runs and
// tails), which from Go's allocator came as fresh memory every batch, 16
// MiB of allocations a batch against 5 (BenchmarkBatchUpkeep).
type bufferPool struct {
	mu   sync.Mutex
	free [bits.UintSize][][]byte // by class: 1<<class bytes
	held int                     // bytes in free
}

// bufferPoolHeld bounds the bytes a pool keeps between batches.
const bufferPoolHeld = 32 << 20

var _ memory.Allocator = (*bufferPool)(nil)

// bufferClass is the class of a buffer of n bytes: the least power of two
// of at least n, and at least 64, which Go aligns to 64 bytes as Arrow
// wants its buffers.
func bufferClass(n int) int { return bits.Len(uint(max(n, 64) - 1)) }

// Allocate returns size zeroed bytes, a freed buffer's when one fits.
func (p *bufferPool) Allocate(size int) []byte {
	c := bufferClass(size)
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c] = p.free[c][:k-1]
		p.held -= cap(b)
		p.mu.Unlock()
		clear(b)
		return b[:size]
	}
	p.mu.Unlock()
	return make([]byte, size, 1<<c)
}

// Reallocate grows b to size bytes, in place when its class holds them.
func (p *bufferPool) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		return b[:size]
	}
	grown := p.Allocate(size)
	copy(grown, b)
	p.Free(b)
	return grown
}

// Free keeps b for a later Allocate, unless the pool holds enough or b is
// not one of its buffers.
func (p *bufferPool) Free(b []byte) {
	c := bufferClass(cap(b))
	if cap(b) != 1<<c {
		return
	}
	p.mu.Lock()
	if p.held+cap(b) <= bufferPoolHeld {
		p.free[c] = append(p.free[c], b[:cap(b)])
		p.held += cap(b)
	}
	p.mu.Unlock()
}
