package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// ErrNotReadOnly is returned for a statement that could write, attach or load.
var ErrNotReadOnly = errors.New("refused: queries are read-only")

// Column describes one result column.
type Column struct {
	Name string
	Type string // DuckDB type name, e.g. VARCHAR, BIGINT, TIMESTAMP WITH TIME ZONE
}

// RowFunc receives each row; the slice is reused between calls.
type RowFunc func(row []any) error

// Query runs one read-only statement with bound parameters and streams its
// rows: header is called once with the columns, then row once per row.
//
// A statement is accepted only when DuckDB classifies it as SELECT or EXPLAIN,
// and it runs inside a READ ONLY transaction, so neither a write nor a
// multi-statement trick can change the database.
func (s *Store) Query(ctx context.Context, query string, args []any, header func([]Column) error, row RowFunc) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("query: connection: %w", err)
	}
	defer conn.Close()
	if !s.readOnly {
		if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION READ ONLY"); err != nil {
			return fmt.Errorf("query: begin: %w", err)
		}
		defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	}
	return conn.Raw(func(dc any) error {
		dconn, ok := dc.(*duckdb.Conn)
		if !ok {
			return fmt.Errorf("query: unexpected driver connection %T", dc)
		}
		// Prepare without a context accepts exactly one statement.
		st, err := dconn.Prepare(query)
		if err != nil {
			if strings.Contains(err.Error(), "context") && strings.Contains(strings.ToLower(err.Error()), "prepare") {
				return fmt.Errorf("%w: send exactly one SELECT statement", ErrNotReadOnly)
			}
			return fmt.Errorf("query: %w", err)
		}
		defer st.Close()
		stmt := st.(*duckdb.Stmt)
		kind, err := stmt.StatementType()
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		if kind != duckdb.STATEMENT_TYPE_SELECT && kind != duckdb.STATEMENT_TYPE_EXPLAIN {
			return fmt.Errorf("%w: a %s statement could change the database; only SELECT is allowed", ErrNotReadOnly, statementName(kind))
		}
		named := make([]driver.NamedValue, len(args))
		for i, a := range args {
			if n, ok := a.(sql.NamedArg); ok {
				named[i] = driver.NamedValue{Name: n.Name, Ordinal: i + 1, Value: n.Value}
			} else {
				named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
			}
		}
		rows, err := stmt.QueryContext(ctx, named)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer rows.Close()
		names := rows.Columns()
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
		for {
			if err := rows.Next(vals); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return fmt.Errorf("query: %w", err)
			}
			for i, v := range vals {
				out[i] = v
			}
			if err := row(out); err != nil {
				return err
			}
		}
	})
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
	}
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("type-%d", t)
}
