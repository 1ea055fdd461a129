package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/mcptrail/mcptrail/audit"
)

// stagingSchema mirrors the calls table up to ingested_at; args travel as
// text and become JSON in the INSERT.
var stagingSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	{Name: "server", Type: arrow.BinaryTypes.String},
	{Name: "tool", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "method", Type: arrow.BinaryTypes.String},
	{Name: "decision", Type: arrow.BinaryTypes.String},
	{Name: "status", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "gateway", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "grant", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "agent", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "session", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "request_id", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "rule", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "reason", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "error_code", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "latency_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "args_hash", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "arg_keys", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "args", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "policy_version", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String), Nullable: true},
}, nil)

var viewSeq atomic.Int64

// Positions in stagingSchema of the id and of the columns that are not
// plain strings.
const (
	colID, colTS, colErrorCode, colLatency, colArgKeys, colAttrs = 0, 1, 14, 15, 17, 20
	numCols                                                      = 21
)

// dataHint is, per column of stagingSchema, the value bytes per row (x16)
// of the last batch registered: a new batch reserves its string buffers
// once, instead of growing them as it fills.
var dataHint [numCols]atomic.Int64

// chunk holds up to chunkRows rows of one server and grant as Arrow
// columns, handed to DuckDB as one record of the batch's view: the columns
// are built in Go memory and crossed into DuckDB once, instead of one cgo
// call per value. Strings are copied into the columns' buffers, which hold
// no pointers for the garbage collector. The columns are plain slices
// rather than arrow-go builders, whose per-value capacity checks and
// generic offset encoding made staging twice as slow.
type chunk struct {
	key       int32 // index in columns.keys
	n         int
	strs      [numCols]strColumn // the string columns (others stay empty)
	ts        []int64            // microseconds
	errorCode nullVals[int64]
	latency   nullVals[float64]
	argKeys   listColumn
	attrKeys  listColumn // each row's attribute keys, sorted
	attrVals  listColumn // their values, in the same order
}

func isString(col int) bool { return stagingSchema.Field(col).Type.ID() == arrow.STRING }

func newChunk(key int32, rows int) *chunk {
	s := &chunk{
		key:       key,
		ts:        make([]int64, 0, rows),
		errorCode: newNullVals[int64](rows),
		latency:   newNullVals[float64](rows),
		argKeys:   newListColumn(rows, reserve(colArgKeys, rows)),
		attrKeys:  newListColumn(rows, 0),
		attrVals:  newListColumn(rows, 0),
	}
	for i := range s.strs {
		if isString(i) {
			s.strs[i] = newStrColumn(rows, reserve(i, rows))
		}
	}
	return s
}

// reserve is the string bytes to reserve for a column of rows rows: an
// eighth more than the last batch needed, for batches a little wordier.
func reserve(col, rows int) int {
	return int(dataHint[col].Load() * int64(rows) / 16 * 9 / 8)
}

// noteSizes records a batch's string bytes per row for the next batch's
// reserve.
func noteSizes(chunks []*chunk, rows int) {
	if rows == 0 {
		return
	}
	var bytes [numCols]int64
	for _, ch := range chunks {
		for col := range ch.strs {
			bytes[col] += int64(len(ch.strs[col].data))
		}
		bytes[colArgKeys] += int64(len(ch.argKeys.values.data))
	}
	for col := range bytes {
		if isString(col) || col == colArgKeys {
			dataHint[col].Store(bytes[col] * 16 / int64(rows))
		}
	}
}

// record assembles the chunk's columns into one Arrow record.
func (c *chunk) record() arrow.RecordBatch {
	arrs := make([]arrow.Array, numCols)
	for i := range arrs {
		f := stagingSchema.Field(i)
		switch i {
		case colTS:
			arrs[i] = fixedArray(f.Type, c.n, nil, arrow.Int64Traits.CastToBytes(c.ts))
		case colErrorCode:
			arrs[i] = fixedArray(f.Type, c.n, &c.errorCode.valid, arrow.Int64Traits.CastToBytes(c.errorCode.values))
		case colLatency:
			arrs[i] = fixedArray(f.Type, c.n, &c.latency.valid, arrow.Float64Traits.CastToBytes(c.latency.values))
		case colArgKeys:
			arrs[i] = c.argKeys.array(f.Type, c.n)
		case colAttrs:
			arrs[i] = c.attrsArray()
		default:
			arrs[i] = c.strs[i].array(c.n)
		}
	}
	rec := array.NewRecordBatch(stagingSchema, arrs, int64(c.n))
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

// register makes the batch visible to SQL on conn as a view; release drops it.
func (c *columns) register(ctx context.Context, conn *sql.Conn) (string, func(), error) {
	if c.recs == nil {
		c.recs = c.records()
	}
	reader, err := array.NewRecordReader(stagingSchema, c.recs)
	if err != nil {
		return "", nil, fmt.Errorf("append: arrow batch: %w", err)
	}
	name := fmt.Sprintf("staging_arrow_%d", viewSeq.Add(1))
	unregister, err := registerReader(conn, reader, name)
	if err != nil {
		return "", nil, fmt.Errorf("append: register arrow batch: %w", err)
	}
	return name, func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `DROP VIEW IF EXISTS `+name)
		unregister()
	}, nil
}

// registerReader makes reader's records a view named name on conn;
// unregister, once the view is dropped, frees the stream and releases the
// reader (which registerReader also does on error).
func registerReader(conn *sql.Conn, reader array.RecordReader, name string) (unregister func(), err error) {
	var release func()
	err = conn.Raw(func(dc any) error {
		release, err = registerArrowView(dc.(driver.Conn), reader, name)
		return err
	})
	if err != nil {
		reader.Release()
		return nil, err
	}
	return func() {
		release()
		reader.Release()
	}, nil
}

// attrsArray builds the attrs column, a map per row (null without
// attributes), with arrow-go's builder: most events carry none.
func (c *chunk) attrsArray() arrow.Array {
	b := array.NewBuilder(memory.DefaultAllocator, stagingSchema.Field(colAttrs).Type).(*array.MapBuilder)
	defer b.Release()
	b.Reserve(c.n)
	kb, vb := b.KeyBuilder().(*array.StringBuilder), b.ItemBuilder().(*array.StringBuilder)
	for i := range c.n {
		if !c.attrKeys.valid.get(i) {
			b.AppendNull()
			continue
		}
		b.Append(true)
		from, to := c.attrKeys.items(i)
		for j := from; j < to; j++ {
			kb.Append(c.attrKeys.values.value(j))
			vb.Append(c.attrVals.values.value(j))
		}
	}
	return b.NewArray()
}

// attr is row i's value of the attribute key, "" when it has none.
func (c *chunk) attr(i int, key string) string {
	from, to := c.attrKeys.items(i)
	for j := from; j < to; j++ {
		if c.attrKeys.values.value(j) == key {
			return c.attrVals.values.value(j)
		}
	}
	return ""
}

// sessionKey is row i's session key as SessionKey reads it once insertCalls
// has stored the row without a derived session (the same prefixes): its
// session, else its conversation's or trace's, else its gateway's, else "".
// The runs' Go path files a call under the session their SQL path finds.
func (c *chunk) sessionKey(i int) string {
	s := &c.strs
	if v := s[colSession].value(i); v != "" {
		return v
	}
	if v := c.attr(i, audit.AttrConversationID); v != "" {
		return "conversation:" + v
	}
	if v := c.attr(i, audit.AttrTraceID); v != "" {
		return "trace:" + v
	}
	if v := s[colGateway].value(i); v != "" {
		return "gateway:" + v
	}
	return ""
}

// add appends one event as a row.
func (c *chunk) add(e *audit.Event) {
	method := e.Method
	if method == "" {
		method = audit.DefaultMethod
	}
	s := &c.strs
	s[colID].add(e.ID)
	c.ts = append(c.ts, e.TS.UnixMicro())
	s[2].add(e.Server)
	s[3].addOpt(e.Tool)
	s[4].add(method)
	s[5].add(string(e.Decision))
	s[6].addOpt(e.Status)
	s[7].addOpt(e.Gateway)
	s[8].addOpt(e.Grant)
	s[9].addOpt(e.Agent)
	s[10].addOpt(e.Session)
	s[11].addOpt(e.RequestID)
	s[12].addOpt(e.Rule)
	s[13].addOpt(e.Reason)
	c.errorCode.add(e.ErrorCode)
	c.latency.add(e.LatencyMS)
	s[16].addOpt(e.ArgsHash)
	c.argKeys.add(e.ArgKeys)
	s[18].addOpt(unsafe.String(unsafe.SliceData(e.Args), len(e.Args)))
	s[19].addOpt(e.PolicyVersion)
	// Attributes in key order, so that the stored map does not depend on
	// Go's map iteration.
	keys := make([]string, 0, len(e.Attrs))
	for k := range e.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	c.attrKeys.add(keys)
	for i, k := range keys {
		keys[i] = e.Attrs[k]
	}
	c.attrVals.add(keys)
	c.n++
}
