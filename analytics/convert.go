package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"

	"github.com/duckdb/duckdb-go/v2"
)

// Converted says what ConvertStorage copied.
type Converted struct {
	From, To string // the storage formats of the source and the copy, as DuckDB tags them
	Tables   int    // tables copied (schema_migrations aside: the copy has its own)
	Rows     int64  // rows copied, in all tables
	Calls    int64  // of them, calls
}

// ConvertStorage copies the database at src into a new file dst created in
// StorageVersion, for a file created in an older format, which keeps it
// (SPEC §3). The source's contents stay as they are: it is opened for
// writing only to migrate an older schema and to fold a write-ahead log
// into the file (a log left beside the source would otherwise be replayed
// into the copy once the copy takes its name). dst must not exist, and is
// removed if the copy fails. Every table is copied in one transaction,
// calls in their stored order (clustered stays clustered), and each
// table's row count is checked against the source's.
func ConvertStorage(ctx context.Context, src, dst string) (Converted, error) {
	var res Converted
	if _, err := os.Lstat(dst); err == nil {
		return res, fmt.Errorf("convert: %s exists: name a new file", dst)
	} else if !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("convert: %w", err)
	}
	from, err := sourceFormat(ctx, src)
	if err != nil {
		return res, err
	}
	res.From = from
	// The copy's schema is this build's, made by its migrations.
	s, err := Open(ctx, dst, Options{})
	if err != nil {
		return res, fmt.Errorf("convert: create %s: %w", dst, err)
	}
	if err := s.Close(); err != nil {
		removeDatabase(dst)
		return res, fmt.Errorf("convert: create %s: %w", dst, err)
	}
	res, err = copyTables(ctx, src, dst, res)
	if err != nil {
		removeDatabase(dst)
		return res, err
	}
	return res, nil
}

// sourceFormat opens src (migrating an older schema), folds its
// write-ahead log into it, and returns its storage format.
func sourceFormat(ctx context.Context, src string) (string, error) {
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("convert: %w", err)
	}
	s, err := Open(ctx, src, Options{})
	if err != nil {
		return "", fmt.Errorf("convert: %w", err)
	}
	defer s.Close()
	if _, err := s.db.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return "", fmt.Errorf("convert: checkpoint %s: %w", src, err)
	}
	v, err := fileStorageVersion(ctx, s.db)
	if err != nil {
		return "", fmt.Errorf("convert: %s: %w", src, err)
	}
	return storageTag(v), nil
}

// copyTables attaches src to dst, outside the store's sandbox (the one
// place a second file is opened), and copies every table of dst's schema
// from it.
func copyTables(ctx context.Context, src, dst string, res Converted) (Converted, error) {
	// The copy's write-ahead log and spill files are as private as a
	// store's.
	defer privateFiles()()
	// The sandbox's settings but external access, which ATTACH needs.
	params := maps.Clone(sandboxDSN)
	params.Del("enable_external_access")
	connector, err := duckdb.NewConnector(dst+"?"+params.Encode(), nil)
	if err != nil {
		return res, fmt.Errorf("convert: open %s: %w", dst, err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("convert: open %s: %w", dst, err)
	}
	defer conn.Close()
	// DuckDB would otherwise take up to 80% of the machine's memory.
	if _, err := conn.ExecContext(ctx, memoryLimitSQL(DefaultMemoryLimit)); err != nil {
		return res, fmt.Errorf("convert: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `ATTACH '`+sqlQuote(src)+`' AS source (READ_ONLY)`); err != nil {
		return res, fmt.Errorf("convert: attach %s: %w", src, err)
	}
	tables, err := tablesOf(ctx, conn, "source")
	if err != nil {
		return res, err
	}
	own, err := tablesOf(ctx, conn, "")
	if err != nil {
		return res, err
	}
	if missing := difference(tables, own); len(missing) > 0 {
		return res, fmt.Errorf("convert: %s has tables this build does not know (%s): convert it with the mcptrail that wrote it", src, strings.Join(missing, ", "))
	}
	if err := inTransaction(ctx, conn, func() error {
		for _, t := range tables {
			if t == "schema_migrations" {
				continue
			}
			// What the copy's migrations seeded (tool_day_use_from's day)
			// gives way to the source's rows.
			if _, err := conn.ExecContext(ctx, `DELETE FROM main."`+t+`"`); err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
			r, err := conn.ExecContext(ctx, `INSERT INTO main."`+t+`" BY NAME SELECT * FROM source.main."`+t+`"`)
			if err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
			n, _ := r.RowsAffected()
			var want int64
			if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM source.main."`+t+`"`).Scan(&want); err != nil {
				return fmt.Errorf("count %s: %w", t, err)
			}
			if n != want {
				return fmt.Errorf("copy %s: %d rows copied of %d", t, n, want)
			}
			res.Tables++
			res.Rows += n
			if t == "calls" {
				res.Calls = n
			}
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("convert: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `DETACH source`); err != nil {
		return res, fmt.Errorf("convert: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `CHECKPOINT`); err != nil {
		return res, fmt.Errorf("convert: checkpoint %s: %w", dst, err)
	}
	v, err := fileStorageVersion(ctx, conn)
	if err != nil {
		return res, fmt.Errorf("convert: %w", err)
	}
	res.To = storageTag(v)
	return res, nil
}

// tablesOf lists the tables of the main schema of the database attached as
// name ("" for the connection's own), sorted.
func tablesOf(ctx context.Context, conn *sql.Conn, name string) ([]string, error) {
	db := "current_database()"
	if name != "" {
		db = "'" + sqlQuote(name) + "'"
	}
	out, err := QueryColumn[string](ctx, conn, `SELECT table_name FROM duckdb_tables() WHERE database_name = `+db+` AND schema_name = 'main' AND NOT temporary ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("convert: list tables: %w", err)
	}
	return out, nil
}

// difference is the names of a that are not in b.
func difference(a, b []string) []string {
	in := map[string]bool{}
	for _, t := range b {
		in[t] = true
	}
	var out []string
	for _, t := range a {
		if !in[t] {
			out = append(out, t)
		}
	}
	return out
}

// removeDatabase removes a database file and its write-ahead log.
func removeDatabase(path string) {
	_ = os.Remove(path)
	_ = os.Remove(path + ".wal")
}
