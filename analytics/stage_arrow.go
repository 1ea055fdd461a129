//go:build duckdb_arrow

package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/mcptrail/mcptrail/audit"
)

// StagingPath names how batches reach DuckDB in this build.
const StagingPath = "arrow"

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

// dataHint is, per column of stagingSchema, the value bytes per row (x16)
// of the last batch registered: a new batch reserves its string buffers
// once, instead of doubling them as it fills (that growth, copying each
// buffer again, was a third of staging's time).
var dataHint [21]atomic.Int64

// columns builds a batch as Arrow columns, handed to DuckDB as a view: the
// columns are built in Go memory and crossed into DuckDB once, instead of
// one cgo call per value as with the Appender. Strings are copied into the
// columns' buffers, which hold no pointers for the garbage collector.
type columns struct {
	b   *array.RecordBuilder
	ids *array.StringBuilder
	rec arrow.RecordBatch // built at the first register, kept for retries
}

func newColumns(capacity int) *columns {
	b := array.NewRecordBuilder(memory.DefaultAllocator, stagingSchema)
	b.Reserve(capacity)
	for i, f := range b.Fields() {
		if sb, ok := f.(*array.StringBuilder); ok && capacity > 0 {
			// An eighth more than last time, for batches a little wordier.
			sb.ReserveData(int(dataHint[i].Load() * int64(capacity) / 16 * 9 / 8))
		}
	}
	return &columns{b: b, ids: b.Field(0).(*array.StringBuilder)}
}

// id is the id of the i-th event added (before register).
func (c *columns) id(i int) string { return c.ids.Value(i) }

// register makes the batch visible to SQL on conn as a view; release drops it.
func (c *columns) register(ctx context.Context, conn *sql.Conn) (string, func(), error) {
	if c.rec == nil {
		if rows := int64(c.ids.Len()); rows > 0 {
			for i, f := range c.b.Fields() {
				if sb, ok := f.(*array.StringBuilder); ok {
					dataHint[i].Store(int64(sb.DataLen()) * 16 / rows)
				}
			}
		}
		c.rec = c.b.NewRecordBatch()
	}
	reader, err := array.NewRecordReader(stagingSchema, []arrow.RecordBatch{c.rec})
	if err != nil {
		return "", nil, fmt.Errorf("append: arrow batch: %w", err)
	}
	name := fmt.Sprintf("staging_arrow_%d", viewSeq.Add(1))
	var release func()
	err = conn.Raw(func(dc any) error {
		ar, err := duckdb.NewArrowFromConn(dc.(driver.Conn))
		if err != nil {
			return err
		}
		release, err = ar.RegisterView(reader, name)
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
	c.b.Release()
}

// add appends one event as a row.
func (c *columns) add(e *audit.Event) {
	b := c.b
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	opt := func(sb *array.StringBuilder, v string) {
		if v == "" {
			sb.AppendNull()
		} else {
			sb.Append(v)
		}
	}
	method := e.Method
	if method == "" {
		method = audit.DefaultMethod
	}
	str(0).Append(e.ID)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(e.TS.UnixMicro()))
	str(2).Append(e.Server)
	opt(str(3), e.Tool)
	str(4).Append(method)
	str(5).Append(string(e.Decision))
	opt(str(6), e.Status)
	opt(str(7), e.Gateway)
	opt(str(8), e.Grant)
	opt(str(9), e.Agent)
	opt(str(10), e.Session)
	opt(str(11), e.RequestID)
	opt(str(12), e.Rule)
	opt(str(13), e.Reason)
	code := b.Field(14).(*array.Int64Builder)
	if e.ErrorCode != nil {
		code.Append(*e.ErrorCode)
	} else {
		code.AppendNull()
	}
	lat := b.Field(15).(*array.Float64Builder)
	if e.LatencyMS != nil {
		lat.Append(*e.LatencyMS)
	} else {
		lat.AppendNull()
	}
	opt(str(16), e.ArgsHash)
	keys := b.Field(17).(*array.ListBuilder)
	if len(e.ArgKeys) > 0 {
		keys.Append(true)
		kv := keys.ValueBuilder().(*array.StringBuilder)
		for _, k := range e.ArgKeys {
			kv.Append(k)
		}
	} else {
		keys.AppendNull()
	}
	opt(str(18), string(e.Args))
	opt(str(19), e.PolicyVersion)
	attrs := b.Field(20).(*array.MapBuilder)
	if len(e.Attrs) > 0 {
		attrs.Append(true)
		ks := make([]string, 0, len(e.Attrs))
		for k := range e.Attrs {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		ak, av := attrs.KeyBuilder().(*array.StringBuilder), attrs.ItemBuilder().(*array.StringBuilder)
		for _, k := range ks {
			ak.Append(k)
			av.Append(e.Attrs[k])
		}
	} else {
		attrs.AppendNull()
	}
}
