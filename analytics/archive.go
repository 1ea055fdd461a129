package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The store's side of the Parquet archive (package archive decides what to
// write, verify and delete). Paths and values are written into the SQL as
// literals: COPY and read_parquet take no bound parameters.

// DayRows is one server's UTC day of calls: how many, and their id checksum.
type DayRows struct {
	Server   string
	Day      time.Time // midnight UTC
	Rows     int64
	Checksum string
}

// idChecksum sums the low 64 bits of each id's MD5 (as a HUGEINT, no
// overflow): independent of row order and file boundaries, so a day split
// over several files sums to the day's, and stable across DuckDB versions
// (hash() is not).
const idChecksum = `coalesce(sum(md5_number_lower(id)::HUGEINT), 0)::VARCHAR`

// ErrNoArchive is returned by the archive methods of a store opened
// without Options.ArchiveDir.
var ErrNoArchive = errors.New("no archive folder: set storage.archive")

// SealedDays lists each server's UTC days before `before` that have calls
// in the hot store.
func (s *Store) SealedDays(ctx context.Context, before time.Time) ([]DayRows, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT server, CAST(ts AS DATE) AS day, count(*), `+idChecksum+`
		FROM calls WHERE ts < ? GROUP BY ALL ORDER BY day, server`, before.UTC())
	if err != nil {
		return nil, fmt.Errorf("archive: list days: %w", err)
	}
	defer rows.Close()
	var out []DayRows
	for rows.Next() {
		var d DayRows
		if err := rows.Scan(&d.Server, &d.Day, &d.Rows, &d.Checksum); err != nil {
			return nil, fmt.Errorf("archive: list days: %w", err)
		}
		d.Day = d.Day.UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}

// ParquetRows reads the rows and id checksum of Parquet files back, with
// the number of distinct ids (less than rows when an id is repeated).
func (s *Store) ParquetRows(ctx context.Context, files []string) (rows, distinct int64, checksum string, err error) {
	if len(files) == 0 {
		return 0, 0, "0", nil
	}
	if err := s.inArchive(files); err != nil {
		return 0, 0, "", err
	}
	err = s.db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT id), `+idChecksum+` FROM `+parquetScan(files)).
		Scan(&rows, &distinct, &checksum)
	if err != nil {
		return 0, 0, "", fmt.Errorf("archive: read back %s: %w", strings.Join(files, ", "), err)
	}
	return rows, distinct, checksum, nil
}

// Unarchived counts the calls of server's day whose id is in none of files.
func (s *Store) Unarchived(ctx context.Context, server string, day time.Time, files []string) (int64, error) {
	if err := s.inArchive(files); err != nil {
		return 0, err
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM (`+daySelect(server, day, files)+`)`).Scan(&n); err != nil {
		return 0, fmt.Errorf("archive: count unarchived calls of %s on %s: %w", server, day.Format(time.DateOnly), err)
	}
	return n, nil
}

// WriteDay writes the calls of server's day whose id is in none of the
// archived files to file as zstd Parquet, and returns their count and
// checksum as DuckDB computed them from the same snapshot (one
// transaction), for the caller to compare with the file read back. It
// writes nothing and returns 0 rows when there is nothing new.
func (s *Store) WriteDay(ctx context.Context, server string, day time.Time, archived []string, file string) (DayRows, error) {
	d := DayRows{Server: server, Day: day}
	if err := s.inArchive(append([]string{file}, archived...)); err != nil {
		return d, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return d, fmt.Errorf("archive: connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION READ ONLY"); err != nil {
		return d, fmt.Errorf("archive: begin: %w", err)
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	sel := daySelect(server, day, archived)
	var ids int64
	if err := conn.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT id), `+idChecksum+` FROM (`+sel+`)`).Scan(&d.Rows, &ids, &d.Checksum); err != nil {
		return d, fmt.Errorf("archive: count calls of %s on %s: %w", server, day.Format(time.DateOnly), err)
	}
	if d.Rows == 0 {
		return d, nil
	}
	if ids != d.Rows {
		// One call per id, its first: an event sent again with another ts
		// is stored twice (the de-duplication compares ids within a
		// batch's time range), yet it is one event, archived once; the
		// retention then deletes both copies (by id).
		sel += ` QUALIFY row_number() OVER (PARTITION BY id ORDER BY ts, ingested_at) = 1`
		if err := conn.QueryRowContext(ctx, `SELECT count(*), `+idChecksum+` FROM (`+sel+`)`).Scan(&d.Rows, &d.Checksum); err != nil {
			return d, fmt.Errorf("archive: count calls of %s on %s: %w", server, day.Format(time.DateOnly), err)
		}
	}
	// Sorted by time, so that readers skip row groups by their ts range.
	q := `COPY (` + sel + ` ORDER BY ts, id) TO '` + sqlQuote(file) + `' (FORMAT parquet, COMPRESSION zstd)`
	if _, err := conn.ExecContext(ctx, q); err != nil {
		return d, fmt.Errorf("archive: write %s: %w", file, err)
	}
	return d, nil
}

// DeleteArchived deletes the calls of server's day whose id is in files
// (verified by the caller), on the write connection, marks the day's files
// deleted at deletedAt in the same transaction, and returns how many.
func (s *Store) DeleteArchived(ctx context.Context, server string, day time.Time, files []string, deletedAt time.Time) (int64, error) {
	if len(files) == 0 {
		return 0, nil
	}
	if err := s.inArchive(files); err != nil {
		return 0, err
	}
	return s.onWriter(ctx, "delete archived calls", func(conn *sql.Conn) (int64, error) {
		r, err := conn.ExecContext(ctx, `DELETE FROM calls WHERE `+dayWhere(server, day)+
			` AND id IN (SELECT id FROM `+parquetScan(files)+`)`)
		if err != nil {
			return 0, err
		}
		if err := unlistSealedDays(ctx, conn, dayNumber(day), dayNumber(day)); err != nil {
			return 0, err
		}
		// In the delete's transaction: a day whose calls are gone but is
		// not marked deleted would be counted as a day without calls.
		if _, err := conn.ExecContext(ctx, `UPDATE archive_days SET deleted_at = ? WHERE server = ? AND "date" = ?`,
			deletedAt.UTC(), server, day.UTC().Format(time.DateOnly)); err != nil {
			return 0, err
		}
		s.deletedDay(day)
		return r.RowsAffected()
	})
}

// RestoreDay inserts the calls of files that are not stored yet (by id,
// within the day) in one transaction, and returns how many.
func (s *Store) RestoreDay(ctx context.Context, server string, day time.Time, files []string) (int64, error) {
	if len(files) == 0 {
		return 0, nil
	}
	if err := s.inArchive(files); err != nil {
		return 0, err
	}
	return s.onWriter(ctx, "restore calls", func(conn *sql.Conn) (int64, error) {
		// A day this database archived and deleted itself still has its
		// runs in call_runs: its calls come back unchanged, and its runs
		// are kept (recomputed from the calls the store holds, they would
		// lose the parts of their sessions in days still deleted) unless
		// a late call of the day came while it was deleted, which rebuilt
		// its session's runs without the archived calls.
		var own, lateWhileDeleted int64
		if err := conn.QueryRowContext(ctx, `SELECT count(*), coalesce(sum((SELECT count(*) FROM calls
			WHERE `+dayWhere(server, day)+` AND ingested_at > a.deleted_at)), 0)
			FROM archive_days a WHERE server = ? AND "date" = ? AND deleted_at IS NOT NULL`,
			server, day.UTC().Format(time.DateOnly)).Scan(&own, &lateWhileDeleted); err != nil {
			return 0, err
		}
		columns := `*`
		if !s.storeArgs {
			columns = `* REPLACE (NULL::JSON AS args)`
		}
		r, err := conn.ExecContext(ctx, `INSERT INTO calls BY NAME SELECT DISTINCT ON (id) `+columns+` FROM `+parquetScan(files)+
			` WHERE `+dayWhere(server, day)+` AND id NOT IN (SELECT id FROM calls WHERE `+dayWhere(server, day)+`)`)
		if err != nil {
			return 0, err
		}
		inserted, err := r.RowsAffected()
		if err != nil {
			return 0, err
		}
		// The day's tool days and use are counted again from its calls,
		// not merged: while the day was deleted they kept calls the
		// archive does not hold (an id stored twice keeps one copy there).
		if _, err := conn.ExecContext(ctx, `DELETE FROM tool_days_before WHERE server = ? AND day = ?`, server, dayNumber(day)); err != nil {
			return 0, err
		}
		if err := recountToolDayUse(ctx, conn, server, day); err != nil {
			return 0, err
		}
		if inserted > 0 {
			if err := unlistSealedDays(ctx, conn, dayNumber(day), dayNumber(day)); err != nil {
				return 0, err
			}
		}
		if own == 0 || lateWhileDeleted > 0 {
			if err := recordRuns(ctx, conn, &s.tails, dayWhere(server, day)); err != nil {
				return 0, err
			}
		}
		// The day's calls are back: no longer the archive's alone.
		if _, err := conn.ExecContext(ctx, `UPDATE archive_days SET deleted_at = NULL WHERE server = ? AND "date" = ?`,
			server, day.UTC().Format(time.DateOnly)); err != nil {
			return 0, err
		}
		s.deleted.loaded = false // other servers' files of the day may still be deleted: read again
		return inserted, nil
	})
}

// ArchiveFile is one row of archive_days: a Parquet file of a server's day.
type ArchiveFile struct {
	Server     string
	Day        time.Time
	File       string // relative to the archive folder
	Rows       int64
	Checksum   string
	ArchivedAt time.Time
	VerifiedAt time.Time // zero: not verified
}

// RecordArchiveFile records (or updates) a file in archive_days; deleted_at
// is kept.
func (s *Store) RecordArchiveFile(ctx context.Context, f ArchiveFile) error {
	var verified any
	if !f.VerifiedAt.IsZero() {
		verified = f.VerifiedAt.UTC()
	}
	_, err := s.onWriter(ctx, "record archive file", func(conn *sql.Conn) (int64, error) {
		_, err := conn.ExecContext(ctx, `INSERT INTO archive_days VALUES (?, ?, ?, ?, ?, ?, ?, NULL)
			ON CONFLICT DO UPDATE SET "rows" = excluded."rows", checksum = excluded.checksum,
				archived_at = excluded.archived_at, verified_at = excluded.verified_at`,
			f.Server, f.Day.UTC().Format(time.DateOnly), f.File, f.Rows, f.Checksum, f.ArchivedAt.UTC(), verified)
		return 0, err
	})
	return err
}

// DeletedDays reports whether the retention deleted the calls of a day
// from's to to's (UTC), which only the archive then holds.
func (s *Store) DeletedDays(ctx context.Context, from, to time.Time) (bool, error) {
	var any bool
	err := s.db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM archive_days WHERE deleted_at IS NOT NULL AND "date" BETWEEN ? AND ?`,
		from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)).Scan(&any)
	if err != nil {
		return false, fmt.Errorf("archive: days deleted: %w", err)
	}
	return any, nil
}

// onWriter runs f in a transaction on the write connection, serialised
// with the appends.
func (s *Store) onWriter(ctx context.Context, what string, f func(*sql.Conn) (int64, error)) (int64, error) {
	if s.readOnly {
		return 0, fmt.Errorf("archive: %s: database opened read-only", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("archive: %s: database is closed", what)
	}
	var n int64
	err := inTransaction(ctx, s.wconn, func() (err error) {
		n, err = f(s.wconn)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("archive: %s: %w", what, err)
	}
	return n, nil
}

// inArchive refuses a path outside the archive folder before DuckDB does,
// with a clearer message.
func (s *Store) inArchive(files []string) error {
	if s.archiveDir == "" {
		return ErrNoArchive
	}
	for _, f := range files {
		if !strings.HasPrefix(f, s.archiveDir+"/") {
			return fmt.Errorf("archive: %s is outside the archive folder %s", f, s.archiveDir)
		}
	}
	return nil
}

// dayWhere selects server's UTC day of calls; the ts range lets DuckDB
// skip row groups.
func dayWhere(server string, day time.Time) string {
	from := day.UTC().Truncate(24 * time.Hour)
	return fmt.Sprintf(`server = '%s' AND ts >= '%s'::TIMESTAMPTZ AND ts < '%s'::TIMESTAMPTZ`,
		sqlQuote(server), from.Format(time.RFC3339), from.Add(24*time.Hour).Format(time.RFC3339))
}

// daySelect is the calls of server's day whose id is in none of files.
func daySelect(server string, day time.Time, files []string) string {
	q := `SELECT * FROM calls WHERE ` + dayWhere(server, day)
	if len(files) > 0 {
		q += ` AND id NOT IN (SELECT id FROM ` + parquetScan(files) + `)`
	}
	return q
}

// parquetScan reads exactly these files, their own columns only (the
// server and date folders are not read as columns).
func parquetScan(files []string) string {
	quoted := make([]string, len(files))
	for i, f := range files {
		quoted[i] = "'" + sqlQuote(f) + "'"
	}
	return `read_parquet([` + strings.Join(quoted, ", ") + `], hive_partitioning = false)`
}

// archiveGlob matches every archived Parquet file, and nothing being written
// (temporary names start with a dot and end in .tmp).
const archiveGlob = "server=*/date=*/calls-*.parquet"

// archiveView makes calls, on this connection only, the hot calls plus the
// archived calls whose id the hot store does not hold (days deleted by the
// retention, or not restored): each call once. It is a temporary view,
// which DuckDB resolves before the table; drop removes it, and discards the
// connection if it cannot, so that no other query sees it.
func (s *Store) archiveView(ctx context.Context, conn *sql.Conn) (drop func(), err error) {
	if s.archiveDir == "" {
		return nil, ErrNoArchive
	}
	catalog, err := currentCatalog(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("query --archive: %w", err)
	}
	q, ok := s.archiveViewSQL(catalog)
	if !ok {
		return func() {}, nil
	}
	if _, err := conn.ExecContext(ctx, q); err != nil {
		return nil, fmt.Errorf("query --archive: read the archive %s: %w", s.archiveDir, err)
	}
	return func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), `DROP VIEW temp.calls`); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}, nil
}

// archiveViewSQL creates the temporary view calls over the hot table of
// catalog and the archive; ok is false when the archive holds no file
// (read_parquet fails on a glob that matches nothing).
func (s *Store) archiveViewSQL(catalog string) (q string, ok bool) {
	glob := filepath.Join(s.archiveDir, archiveGlob)
	if m, _ := filepath.Glob(glob); len(m) == 0 {
		return "", false
	}
	hot := hotCallsTable(catalog)
	return `CREATE OR REPLACE TEMP VIEW calls AS
		SELECT * FROM ` + hot + `
		UNION ALL BY NAME
		SELECT * FROM read_parquet('` + sqlQuote(glob) + `', hive_partitioning = false)
		WHERE id NOT IN (SELECT id FROM ` + hot + `)`, true
}

// hotCallsTable names the hot calls table of catalog. main.calls would
// name the temporary catalog's own schema main, where the archive's view
// lives: the hot table is named with its database.
func hotCallsTable(catalog string) string {
	return `"` + strings.ReplaceAll(catalog, `"`, `""`) + `".main.calls`
}

// HotCalls names, for queries on db, the table of the calls the store
// holds, whether or not the archive's view stands in for calls there.
func HotCalls(ctx context.Context, db *sql.DB) (string, error) {
	catalog, err := currentCatalog(ctx, db)
	if err != nil {
		return "", fmt.Errorf("name the hot calls table: %w", err)
	}
	return hotCallsTable(catalog), nil
}

// currentCatalog is the name DuckDB gives the database q is on.
func currentCatalog(ctx context.Context, q querier) (string, error) {
	var catalog string
	err := q.QueryRowContext(ctx, `SELECT current_database()`).Scan(&catalog)
	return catalog, err
}

// ArchiveDB is a pool of connections to the store's database on each of
// which calls holds the archived calls too, as query --archive sees it: for
// analyses whose window reaches past storage.retention. The caller closes
// it; that closes its connections, not the database.
func (s *Store) ArchiveDB(ctx context.Context) (*sql.DB, error) {
	if s.archiveDir == "" {
		return nil, ErrNoArchive
	}
	catalog, err := currentCatalog(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return sql.OpenDB(archiveConnector{base: s.connector, store: s, catalog: catalog}), nil
}

// archiveConnector makes the view on every connection it opens. It is no
// io.Closer, so closing its pool leaves the database open.
type archiveConnector struct {
	base    driver.Connector
	store   *Store
	catalog string
}

func (c archiveConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if q, ok := c.store.archiveViewSQL(c.catalog); ok {
		if _, err := conn.(driver.ExecerContext).ExecContext(ctx, q, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("archive: read the archive %s: %w", c.store.archiveDir, err)
		}
	}
	return conn, nil
}

func (c archiveConnector) Driver() driver.Driver { return c.base.Driver() }
