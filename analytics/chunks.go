package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/duckdb/duckdb-go/v2/mapping"
)

// A query's result read a chunk (up to 2,048 rows) at a time, each column
// as a Go slice over DuckDB's own vector, instead of database/sql's row by
// row: there every value goes through the driver's conversion, an
// interface and a type switch (~150 ns), which for the hundreds of
// thousands of runs a recommendation reads cost more than the query. The
// driver executes the query (binding, interruption by the context); its
// materialized result is then read here, through the driver's result
// field as rawConnection reads its connection field.

// ColumnKind is the DuckDB type a column of ScanChunks' result must have.
type ColumnKind int

// The kinds a Chunk reads.
const (
	Int64Column     ColumnKind = iota // BIGINT
	Uint64Column                      // UBIGINT
	Float64Column                     // DOUBLE
	BoolColumn                        // BOOLEAN
	VarcharColumn                     // VARCHAR
	BlobColumn                        // BLOB
	TimestampColumn                   // TIMESTAMP WITH TIME ZONE
)

var kindTypes = map[ColumnKind]struct {
	t    mapping.Type
	name string
}{
	Int64Column:     {mapping.TypeBigInt, "BIGINT"},
	Uint64Column:    {mapping.TypeUBigInt, "UBIGINT"},
	Float64Column:   {mapping.TypeDouble, "DOUBLE"},
	BoolColumn:      {mapping.TypeBoolean, "BOOLEAN"},
	VarcharColumn:   {mapping.TypeVarchar, "VARCHAR"},
	BlobColumn:      {mapping.TypeBlob, "BLOB"},
	TimestampColumn: {mapping.TypeTimestampTZ, "TIMESTAMP WITH TIME ZONE"},
}

// errNoResultField says the driver changed its rows' layout: the pinned
// driver version keeps it; a new one needs resultOf updated.
var errNoResultField = errors.New("the DuckDB driver's rows have no result field `res` of type mapping.Result (duckdb-go changed; update analytics/chunks.go)")

// Chunk is one chunk of a result, valid only inside the function
// ScanChunks hands it to. Its columns have no NULL (ScanChunks checks).
type Chunk struct {
	size int
	data []unsafe.Pointer
}

// Len is the chunk's number of rows.
func (c *Chunk) Len() int { return c.size }

// Int64 is column col, a BIGINT column.
func (c *Chunk) Int64(col int) []int64 { return unsafe.Slice((*int64)(c.data[col]), c.size) }

// Uint64 is column col, a UBIGINT column.
func (c *Chunk) Uint64(col int) []uint64 { return unsafe.Slice((*uint64)(c.data[col]), c.size) }

// Float64 is column col, a DOUBLE column.
func (c *Chunk) Float64(col int) []float64 { return unsafe.Slice((*float64)(c.data[col]), c.size) }

// Micros is column col, a TIMESTAMP WITH TIME ZONE column, in
// microseconds since the epoch.
func (c *Chunk) Micros(col int) []int64 { return unsafe.Slice((*int64)(c.data[col]), c.size) }

// Bool is column col, a BOOLEAN column (one byte per value, 0 or 1).
func (c *Chunk) Bool(col int) []bool { return unsafe.Slice((*bool)(c.data[col]), c.size) }

// duckString is DuckDB's string_t (duckdb_string_t in duckdb.h): its
// length, then up to 12 bytes inline, or past those a 4-byte prefix and a
// pointer to the bytes.
type duckString struct {
	length uint32
	prefix [4]byte
	ptr    unsafe.Pointer
}

// Bytes is row's value of column col, a VARCHAR or BLOB column, in
// DuckDB's memory: valid only until the function given the chunk returns.
func (c *Chunk) Bytes(col, row int) []byte {
	s := &unsafe.Slice((*duckString)(c.data[col]), c.size)[row]
	if s.length <= 12 {
		return unsafe.Slice((*byte)(unsafe.Pointer(&s.prefix)), s.length)
	}
	return unsafe.Slice((*byte)(s.ptr), s.length)
}

// String is row's value of column col, a VARCHAR column, copied.
func (c *Chunk) String(col, row int) string { return string(c.Bytes(col, row)) }

// ScanChunks runs query with args (named arguments, as for QueryContext)
// on a connection of db and hands each chunk of its result to each, in
// order. The result must have exactly the columns kinds names, in order,
// and no NULL in them: either is an error naming the column.
func ScanChunks(ctx context.Context, db *sql.DB, query string, args []any, kinds []ColumnKind, each func(*Chunk) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return ScanConnChunks(ctx, conn, query, args, kinds, each)
}

// ScanConnChunks is ScanChunks on conn: for a query that reads the
// connection's temporary tables.
func ScanConnChunks(ctx context.Context, conn *sql.Conn, query string, args []any, kinds []ColumnKind, each func(*Chunk) error) error {
	named := namedValues(args)
	return conn.Raw(func(dc any) error {
		qc, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("the DuckDB driver's connection %T runs no queries", dc)
		}
		rows, err := qc.QueryContext(ctx, query, named)
		if err != nil {
			return err
		}
		defer rows.Close()
		res, err := resultOf(rows)
		if err != nil {
			return err
		}
		if n := int(mapping.ColumnCount(res)); n != len(kinds) {
			return fmt.Errorf("the query has %d columns, read as %d", n, len(kinds))
		}
		for i, k := range kinds {
			if t := mapping.ColumnType(res, mapping.IdxT(i)); t != kindTypes[k].t {
				return fmt.Errorf("column %d (%s) is not %s", i+1, mapping.ColumnName(res, mapping.IdxT(i)), kindTypes[k].name)
			}
		}
		c := &Chunk{data: make([]unsafe.Pointer, len(kinds))}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			chunk := mapping.FetchChunk(*res)
			if chunk.Ptr == nil {
				return nil
			}
			err := readChunk(res, chunk, c, each)
			mapping.DestroyDataChunk(&chunk)
			if err != nil {
				return err
			}
		}
	})
}

// namedValues are a query's arguments as the driver takes them: each in its
// place, a sql.NamedArg by its name too.
func namedValues(args []any) []driver.NamedValue {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		if n, ok := a.(sql.NamedArg); ok {
			named[i].Name, named[i].Value = n.Name, n.Value
		}
	}
	return named
}

// readChunk points c at chunk's vectors and hands it to each.
func readChunk(res *mapping.Result, chunk mapping.DataChunk, c *Chunk, each func(*Chunk) error) error {
	c.size = int(mapping.DataChunkGetSize(chunk))
	for i := range c.data {
		vec := mapping.DataChunkGetVector(chunk, mapping.IdxT(i))
		// A mask, where there is one, holds a bit per row, set when valid.
		if mask := mapping.VectorGetValidity(vec); mask != nil {
			words := unsafe.Slice((*uint64)(mask), (c.size+63)/64)
			for row := range c.size {
				if words[row/64]&(1<<(row%64)) == 0 {
					return fmt.Errorf("column %d (%s) has a NULL", i+1, mapping.ColumnName(res, mapping.IdxT(i)))
				}
			}
		}
		c.data[i] = mapping.VectorGetData(vec)
	}
	return each(c)
}

// resultOf is the DuckDB result inside the driver's rows.
func resultOf(rows driver.Rows) (*mapping.Result, error) {
	return driverField[mapping.Result](rows, "res", errNoResultField)
}

// driverField is the field name, of type T, of the struct the driver's
// value v points to; missing fails with missing, naming v's type.
func driverField[T any](v any, name string, missing error) (*T, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: got %T", missing, v)
	}
	f := rv.Elem().FieldByName(name)
	if !f.IsValid() || f.Type() != reflect.TypeFor[T]() {
		return nil, fmt.Errorf("%w: got %T", missing, v)
	}
	return (*T)(unsafe.Pointer(f.UnsafeAddr())), nil
}
