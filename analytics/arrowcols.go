package analytics

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bitmap is an Arrow validity bitmap: bit i is set when row i is not null.
type bitmap struct {
	bits  []byte
	rows  int
	nulls int
}

func newBitmap(capacity int) bitmap { return bitmap{bits: make([]byte, 0, (capacity+7)/8)} }

func (b *bitmap) add(valid bool) {
	if b.rows%8 == 0 {
		b.bits = append(b.bits, 0)
	}
	if valid {
		b.bits[b.rows/8] |= 1 << (b.rows % 8)
	} else {
		b.nulls++
	}
	b.rows++
}

func (b *bitmap) get(i int) bool { return b.bits[i/8]&(1<<(i%8)) != 0 }

// buffer is the bitmap for Arrow: none when no row is null.
func (b *bitmap) buffer() *memory.Buffer {
	if b == nil || b.nulls == 0 {
		return nil
	}
	return memory.NewBufferBytes(b.bits)
}

// strColumn is an Arrow string column: offsets into one byte buffer.
type strColumn struct {
	offsets []int32 // rows+1
	data    []byte
	valid   bitmap
}

func newStrColumn(capacity, dataBytes int) strColumn {
	offsets := make([]int32, 1, capacity+1)
	return strColumn{offsets: offsets, data: make([]byte, 0, dataBytes), valid: newBitmap(capacity)}
}

func (c *strColumn) add(s string) { c.put(s, true) }

// addOpt adds s, or a null for "": SQL users test optional fields with IS NULL.
func (c *strColumn) addOpt(s string) { c.put(s, s != "") }

func (c *strColumn) put(s string, valid bool) {
	c.valid.add(valid)
	c.data = append(c.data, s...)
	c.offsets = append(c.offsets, int32(len(c.data)))
}

// value is row i; it aliases the column's buffer, which is only appended to.
func (c *strColumn) value(i int) string {
	b := c.data[c.offsets[i]:c.offsets[i+1]]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func (c *strColumn) arrayData(n int) arrow.ArrayData {
	return array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{
		c.valid.buffer(), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(c.offsets)), memory.NewBufferBytes(c.data),
	}, nil, c.valid.nulls, 0)
}

func (c *strColumn) array(n int) arrow.Array {
	d := c.arrayData(n)
	defer d.Release()
	return array.NewStringData(d)
}

// nullVals is a column of fixed-width values that may be null.
type nullVals[T int64 | float64] struct {
	values []T
	valid  bitmap
}

func newNullVals[T int64 | float64](capacity int) nullVals[T] {
	return nullVals[T]{values: make([]T, 0, capacity), valid: newBitmap(capacity)}
}

func (c *nullVals[T]) add(v *T) {
	var x T
	if v != nil {
		x = *v
	}
	c.values = append(c.values, x)
	c.valid.add(v != nil)
}

// fixedArray wraps fixed-width values (and their validity) as an Arrow array.
func fixedArray(t arrow.DataType, n int, valid *bitmap, values []byte) arrow.Array {
	nulls := 0
	if valid != nil {
		nulls = valid.nulls
	}
	d := array.NewData(t, n, []*memory.Buffer{valid.buffer(), memory.NewBufferBytes(values)}, nil, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// listColumn is an Arrow list of strings; an empty list is stored as null.
type listColumn struct {
	offsets []int32 // into values, rows+1
	values  strColumn
	valid   bitmap
}

func newListColumn(capacity, dataBytes int) listColumn {
	return listColumn{offsets: make([]int32, 1, capacity+1), values: newStrColumn(2*capacity, dataBytes), valid: newBitmap(capacity)}
}

func (c *listColumn) add(items []string) {
	c.valid.add(len(items) > 0)
	for _, s := range items {
		c.values.add(s)
	}
	c.offsets = append(c.offsets, int32(len(c.values.offsets)-1))
}

// items is the range of row i's items in values.
func (c *listColumn) items(i int) (from, to int) { return int(c.offsets[i]), int(c.offsets[i+1]) }

func (c *listColumn) array(t arrow.DataType, n int) arrow.Array {
	child := c.values.arrayData(len(c.values.offsets) - 1)
	defer child.Release()
	d := array.NewData(t, n, []*memory.Buffer{c.valid.buffer(), memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(c.offsets))},
		[]arrow.ArrayData{child}, c.valid.nulls, 0)
	defer d.Release()
	return array.NewListData(d)
}
