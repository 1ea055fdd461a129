package analytics

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/dustin/go-humanize"
)

// ErrNotReadOnly is returned for a statement that could write, attach or
// load, or that calls a function queries may not call (see deniedFunctions).
var ErrNotReadOnly = errors.New("refused: queries are read-only")

// ErrQueryTimeout is returned (wrapped, with the limit) for a query that
// ran longer than QueryLimits.Timeout; DuckDB has stopped it.
var ErrQueryTimeout = errors.New("query timed out")

// Column describes one result column.
type Column struct {
	Name string
	Type string // DuckDB type name, e.g. VARCHAR, BIGINT, TIMESTAMP WITH TIME ZONE
}

// RowFunc receives each row; the slice is reused between calls.
type RowFunc func(row []any) error

// QueryLimits bound one query; a zero field means no limit.
type QueryLimits struct {
	// Timeout stops the query (DuckDB interrupts it) and makes it fail
	// with ErrQueryTimeout.
	Timeout time.Duration
	// MaxRows and MaxBytes cut the result short: rows past either are
	// neither produced nor delivered, and the query returns a Truncated.
	// MaxBytes counts the size of the values as rendered, roughly (see
	// valueSize).
	MaxRows  int
	MaxBytes int64
	// Archive is not a limit but travels with them: calls then also holds
	// the archived calls that the hot store no longer holds (see
	// archiveView).
	Archive bool
}

// DefaultQueryLimits are the defaults of query.timeout, query.max_rows and
// query.max_bytes (SPEC §7).
var DefaultQueryLimits = QueryLimits{Timeout: 30 * time.Second, MaxRows: 100_000, MaxBytes: 64 << 20}

// Truncated says that a result was cut short, and by which limit.
type Truncated struct {
	Rows  int    // rows delivered
	Bytes int64  // their size, as valueSize counts it
	Limit string // the configuration key: query.max_rows or query.max_bytes
	Max   int64  // its value
}

// Note is a line for the user: what was cut and what to do about it.
func (t *Truncated) Note() string {
	if t.Limit == "query.max_bytes" {
		return fmt.Sprintf("result truncated after %d rows: they reached query.max_bytes (%s); select fewer columns or rows, or raise query.max_bytes",
			t.Rows, humanize.IBytes(uint64(t.Max)))
	}
	return fmt.Sprintf("result truncated after %d rows (query.max_rows); add a LIMIT or aggregate, or raise query.max_rows", t.Rows)
}

// Query runs one read-only statement with bound parameters and streams its
// rows, with no limits; see QueryLimited.
func (s *Store) Query(ctx context.Context, query string, args []any, header func([]Column) error, row RowFunc) error {
	_, err := s.QueryLimited(ctx, query, args, QueryLimits{}, header, row)
	return err
}

// errTimedOut is the cause of a context that QueryLimits.Timeout ended.
var errTimedOut = errors.New("query.timeout")

// QueryLimited runs one read-only statement with bound parameters and
// streams its rows: header is called once with the columns, then row once
// per row. It returns a non-nil Truncated when limits cut the result short
// (the rows delivered are complete rows, the first ones of the result).
//
// A statement is accepted only when it is one SELECT (or EXPLAIN of one),
// as DuckDB parses it, calling no function of deniedFunctions; it runs
// inside a READ ONLY transaction, on a connection of its own (queries run
// side by side), in the store's sandbox (see sandbox.go): neither a write,
// nor a multi-statement trick, nor a file or network access gets through.
//
// MaxRows is applied inside DuckDB: the statement runs as
// SELECT * FROM (statement) LIMIT MaxRows+1, so DuckDB stops producing
// rows there. duckdb-go materialises a whole result before the first row
// is read, so without it a 20M-row answer took gigabytes.
func (s *Store) QueryLimited(ctx context.Context, query string, args []any, limits QueryLimits,
	header func([]Column) error, row RowFunc) (*Truncated, error) {
	if limits.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, limits.Timeout, errTimedOut)
		defer cancel()
	}
	t, err := s.query(ctx, query, args, limits, header, row)
	if err != nil && errors.Is(context.Cause(ctx), errTimedOut) {
		return nil, fmt.Errorf("%w after %s (query.timeout): narrow the query, or raise query.timeout", ErrQueryTimeout, limits.Timeout)
	}
	return t, err
}

func (s *Store) query(ctx context.Context, query string, args []any, limits QueryLimits,
	header func([]Column) error, row RowFunc) (*Truncated, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("query: connection: %w", err)
	}
	defer conn.Close()
	if limits.Archive {
		drop, err := s.archiveView(ctx, conn)
		if err != nil {
			return nil, err
		}
		defer drop()
	}
	if !s.readOnly {
		if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION READ ONLY"); err != nil {
			return nil, fmt.Errorf("query: begin: %w", err)
		}
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	}
	// Vet the statement before DuckDB binds it: binding runs the bind
	// functions of table functions, and some act there.
	explain, err := vet(ctx, conn, query)
	if err != nil {
		return nil, err
	}
	run := query
	if limits.MaxRows > 0 && !explain {
		run = "SELECT * FROM (\n" + trimTerminator(query) + "\n) LIMIT " + strconv.Itoa(limits.MaxRows+1)
		if _, err := vet(ctx, conn, run); err != nil {
			return nil, fmt.Errorf("query: could not apply query.max_rows to this statement: remove a trailing ';' or comment (%w)", err)
		}
	}
	var truncated *Truncated
	err = conn.Raw(func(dc any) error {
		dconn, ok := dc.(*duckdb.Conn)
		if !ok {
			return fmt.Errorf("query: unexpected driver connection %T", dc)
		}
		names, err := statementColumns(dconn, query, explain)
		if err != nil {
			return err
		}
		st, err := dconn.Prepare(run)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer st.Close()
		rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, namedValues(args))
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer rows.Close()
		if got := rows.Columns(); len(got) != len(names) {
			names = got
		}
		cols := make([]Column, len(names))
		typed, _ := rows.(driver.RowsColumnTypeDatabaseTypeName)
		for i, n := range names {
			cols[i] = Column{Name: n}
			if typed != nil {
				cols[i].Type = typed.ColumnTypeDatabaseTypeName(i)
			}
		}
		if err := header(cols); err != nil {
			return err
		}
		vals := make([]driver.Value, len(names))
		out := make([]any, len(names))
		var n int
		var size int64
		for {
			if err := rows.Next(vals); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("query: %w", err)
			}
			if limits.MaxRows > 0 && n == limits.MaxRows {
				truncated = &Truncated{Rows: n, Bytes: size, Limit: "query.max_rows", Max: int64(limits.MaxRows)}
				return nil
			}
			var rowSize int64
			for i, v := range vals {
				out[i] = v
				rowSize += valueSize(v)
			}
			if limits.MaxBytes > 0 && size+rowSize > limits.MaxBytes {
				truncated = &Truncated{Rows: n, Bytes: size, Limit: "query.max_bytes", Max: limits.MaxBytes}
				return nil
			}
			if err := row(out); err != nil {
				return err
			}
			n++
			size += rowSize
		}
	})
	return truncated, err
}

// statementColumns prepares the statement as given, to check its kind
// against what vet found and to take its column names: wrapped in a
// subquery, DuckDB would rename repeated ones (a, a becomes a, a_1). A
// statement with parameters has no columns until they are bound, and
// keeps the names its rows bring (nil here).
func statementColumns(dconn *duckdb.Conn, query string, explain bool) ([]string, error) {
	// Prepare without a context accepts exactly one statement.
	st, err := dconn.Prepare(query)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer st.Close()
	stmt := st.(*duckdb.Stmt)
	kind, err := stmt.StatementType()
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	want := duckdb.STATEMENT_TYPE_SELECT
	if explain {
		want = duckdb.STATEMENT_TYPE_EXPLAIN
	}
	if kind != want {
		return nil, fmt.Errorf("%w: a %s statement could change the database; only SELECT is allowed", ErrNotReadOnly, statementName(kind))
	}
	if stmt.NumInput() > 0 {
		return nil, nil
	}
	n, err := stmt.ColumnCount()
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	names := make([]string, n)
	for i := range names {
		if names[i], err = stmt.ColumnName(i); err != nil {
			return nil, fmt.Errorf("query: %w", err)
		}
	}
	return names, nil
}

// trimTerminator drops the statement's trailing semicolons, which may not
// stand inside a subquery.
func trimTerminator(q string) string {
	for {
		t := strings.TrimRight(q, " \t\r\n")
		if !strings.HasSuffix(t, ";") {
			return t
		}
		q = strings.TrimSuffix(t, ";")
	}
}

// valueSize is, roughly, the bytes a value takes once rendered as text:
// strings and blobs their length, numbers 8, times 32, NULL 4, plus one
// for a separator; lists, maps and structs the sum of their parts.
func valueSize(v any) int64 {
	switch x := v.(type) {
	case nil:
		return 5
	case string:
		return int64(len(x)) + 1
	case []byte:
		return int64(len(x)) + 1
	case bool:
		return 6
	case time.Time:
		return 33
	case []any:
		n := int64(1)
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	case map[string]any:
		n := int64(1)
		for k, e := range x {
			n += int64(len(k)) + valueSize(e)
		}
		return n
	case duckdb.Map:
		n := int64(1)
		for k, e := range x {
			n += valueSize(k) + valueSize(e)
		}
		return n
	default:
		return 9
	}
}

func statementName(t duckdb.StmtType) string {
	names := map[duckdb.StmtType]string{
		duckdb.STATEMENT_TYPE_INSERT: "INSERT", duckdb.STATEMENT_TYPE_UPDATE: "UPDATE",
		duckdb.STATEMENT_TYPE_DELETE: "DELETE", duckdb.STATEMENT_TYPE_CREATE: "CREATE",
		duckdb.STATEMENT_TYPE_ALTER: "ALTER", duckdb.STATEMENT_TYPE_DROP: "DROP",
		duckdb.STATEMENT_TYPE_COPY: "COPY", duckdb.STATEMENT_TYPE_ATTACH: "ATTACH",
		duckdb.STATEMENT_TYPE_DETACH: "DETACH", duckdb.STATEMENT_TYPE_LOAD: "LOAD",
		duckdb.STATEMENT_TYPE_EXPORT: "EXPORT", duckdb.STATEMENT_TYPE_SET: "SET",
		duckdb.STATEMENT_TYPE_VARIABLE_SET: "SET VARIABLE", duckdb.STATEMENT_TYPE_PRAGMA: "PRAGMA",
		duckdb.STATEMENT_TYPE_TRANSACTION: "transaction", duckdb.STATEMENT_TYPE_VACUUM: "VACUUM",
		duckdb.STATEMENT_TYPE_CALL: "CALL", duckdb.STATEMENT_TYPE_EXTENSION: "extension",
		duckdb.STATEMENT_TYPE_CREATE_FUNC: "CREATE FUNCTION", duckdb.STATEMENT_TYPE_ANALYZE: "ANALYZE",
		duckdb.STATEMENT_TYPE_PREPARE: "PREPARE", duckdb.STATEMENT_TYPE_EXECUTE: "EXECUTE",
		duckdb.STATEMENT_TYPE_SELECT: "SELECT", duckdb.STATEMENT_TYPE_EXPLAIN: "EXPLAIN",
	}
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("type-%d", t)
}
