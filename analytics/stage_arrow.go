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

// columns builds a batch as Arrow columns, handed to DuckDB as a view: the
// columns are built in Go memory and crossed into DuckDB once, instead of
// one cgo call per value as with the Appender. Strings are copied into the
// columns' buffers, which hold no pointers for the garbage collector.
// The columns are plain slices rather than arrow-go builders, whose
// per-value capacity checks and generic offset encoding made staging
// twice as slow.
type columns struct {
	n         int
	strs      [numCols]strColumn // the string columns (others stay empty)
	ts        []int64            // microseconds
	errorCode nullVals[int64]
	latency   nullVals[float64]
	argKeys   listColumn
	attrs     *array.MapBuilder // rare: arrow-go's builder
	rec       arrow.RecordBatch // built at the first register, kept for retries
}

func isString(col int) bool { return stagingSchema.Field(col).Type.ID() == arrow.STRING }

func newColumns(capacity int) *columns {
	c := &columns{
		ts:        make([]int64, 0, capacity),
		errorCode: newNullVals[int64](capacity),
		latency:   newNullVals[float64](capacity),
		argKeys:   newListColumn(capacity, reserve(colArgKeys, capacity)),
		attrs:     array.NewBuilder(memory.DefaultAllocator, stagingSchema.Field(colAttrs).Type).(*array.MapBuilder),
	}
	for i := range c.strs {
		if isString(i) {
			c.strs[i] = newStrColumn(capacity, reserve(i, capacity))
		}
	}
	c.attrs.Reserve(capacity)
	return c
}

// reserve is the string bytes to reserve for a column of capacity rows: an
// eighth more than the last batch needed, for batches a little wordier.
func reserve(col, capacity int) int {
	return int(dataHint[col].Load() * int64(capacity) / 16 * 9 / 8)
}

// id is the id of the i-th event added (before register).
func (c *columns) id(i int) string { return c.strs[colID].value(i) }

// record assembles the columns into one Arrow record.
func (c *columns) record() arrow.RecordBatch {
	if rows := int64(c.n); rows > 0 {
		for i := range c.strs {
			if isString(i) {
				dataHint[i].Store(int64(len(c.strs[i].data)) * 16 / rows)
			}
		}
		dataHint[colArgKeys].Store(int64(len(c.argKeys.values.data)) * 16 / rows)
	}
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
			arrs[i] = c.attrs.NewArray()
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
	if c.rec == nil {
		c.rec = c.record()
	}
	reader, err := array.NewRecordReader(stagingSchema, []arrow.RecordBatch{c.rec})
	if err != nil {
		return "", nil, fmt.Errorf("append: arrow batch: %w", err)
	}
	name := fmt.Sprintf("staging_arrow_%d", viewSeq.Add(1))
	var release func()
	err = conn.Raw(func(dc any) error {
		release, err = registerArrowView(dc.(driver.Conn), reader, name)
		return err
	})
	if err != nil {
		reader.Release()
		return "", nil, fmt.Errorf("append: register arrow batch: %w", err)
	}
	return name, func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `DROP VIEW IF EXISTS `+name)
		release()
		reader.Release()
	}, nil
}

func (c *columns) release() {
	if c.rec != nil {
		c.rec.Release()
		c.rec = nil
	}
	c.attrs.Release()
	*c = columns{}
}

// add appends one event as a row.
func (c *columns) add(e *audit.Event) {
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
	if len(e.Attrs) > 0 {
		c.attrs.Append(true)
		ks := make([]string, 0, len(e.Attrs))
		for k := range e.Attrs {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		ak, av := c.attrs.KeyBuilder().(*array.StringBuilder), c.attrs.ItemBuilder().(*array.StringBuilder)
		for _, k := range ks {
			ak.Append(k)
			av.Append(e.Attrs[k])
		}
	} else {
		c.attrs.AppendNull()
	}
	c.n++
}
