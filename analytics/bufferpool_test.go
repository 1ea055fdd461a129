package analytics

import (
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBufferPoolReusesFreedBuffersZeroed(t *testing.T) {
	var p bufferPool
	b := p.Allocate(100)
	require.Len(t, b, 100)
	assert.Equal(t, 128, cap(b), "a class is a power of two")
	assert.Zero(t, uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64, "Arrow's alignment")
	for i := range b {
		b[i] = 0xff
	}
	p.Free(b)
	again := p.Allocate(90)
	assert.Same(t, unsafe.SliceData(b), unsafe.SliceData(again), "the freed buffer, not a new one")
	assert.Equal(t, make([]byte, 90), again, "zeroed")
	assert.Equal(t, make([]byte, 128), again[:128], "zeroed to its end, which Reallocate may hand out")
	other := p.Allocate(90)
	assert.NotSame(t, unsafe.SliceData(again), unsafe.SliceData(other), "a buffer is handed out once")
}

func TestBufferPoolReallocate(t *testing.T) {
	var p bufferPool
	b := p.Allocate(70)
	copy(b, "abc")
	in := p.Reallocate(120, b)
	assert.Same(t, unsafe.SliceData(b), unsafe.SliceData(in), "grown in its class")
	require.Len(t, in, 120)
	grown := p.Reallocate(1000, in)
	require.Len(t, grown, 1000)
	assert.Equal(t, "abc", string(grown[:3]), "content kept")
	assert.Same(t, unsafe.SliceData(b), unsafe.SliceData(p.Allocate(128)), "the outgrown buffer freed for reuse")
}

func TestBufferPoolHoldsBounded(t *testing.T) {
	var p bufferPool
	big := []([]byte){p.Allocate(bufferPoolHeld / 2), p.Allocate(bufferPoolHeld / 2), p.Allocate(bufferPoolHeld / 2)}
	for _, b := range big {
		p.Free(b)
	}
	assert.Equal(t, bufferPoolHeld, p.held, "the third is left to the garbage collector")
	p.Free(make([]byte, 100)) // not of a class: not the pool's
	assert.Equal(t, bufferPoolHeld, p.held)
}

// Records built with the pool, released and built again read back what
// was appended, as each batch's upkeep does.
func TestBufferPoolBuildsArrowRecordsAgain(t *testing.T) {
	var p bufferPool
	for round := range 3 {
		sb := array.NewStringBuilder(&p)
		ib := array.NewInt64Builder(&p)
		for i := range 1000 {
			if i%7 == round {
				sb.AppendNull()
			} else {
				sb.Append(string(rune('a' + (i+round)%26)))
			}
			ib.Append(int64(i * round))
		}
		strs, ints := sb.NewStringArray(), ib.NewInt64Array()
		sb.Release()
		ib.Release()
		for i := range 1000 {
			if i%7 == round {
				assert.True(t, strs.IsNull(i))
			} else {
				require.False(t, strs.IsNull(i), "round %d row %d", round, i)
				assert.Equal(t, string(rune('a'+(i+round)%26)), strs.Value(i))
			}
			assert.Equal(t, int64(i*round), ints.Value(i))
		}
		strs.Release()
		ints.Release()
		assert.Positive(t, p.held, "the released arrays' buffers are back in the pool")
	}
}
