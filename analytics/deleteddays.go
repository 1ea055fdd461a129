package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"
)

// deletedDays are the days (ToolDay numbers) whose calls the retention
// deleted from calls after archiving them, of any server: an event of such
// a day sent again (a file ingested again, a gateway's backfill) is
// stored already, in the archive, and must not be stored twice. Read from
// archive_days at the first batch that needs them; kept by the retention's
// delete and reread after a restore. Guarded by the store's mu.
type deletedDays struct {
	loaded bool
	days   map[int64]bool
}

// archivedFiles are the Parquet files of the days between lo's and hi's
// whose calls the retention deleted, for Append to compare a batch's ids
// with: none (nil) for a batch of days the store still holds, which is
// every batch of live traffic, at the cost of a map lookup or two. A file
// missing from the archive folder, or that DuckDB cannot read, is left
// out: the batch cannot be compared with it, but ingestion does not stall
// on it either. conn is the write connection, s.mu held.
func (s *Store) archivedFiles(ctx context.Context, conn *sql.Conn, lo, hi time.Time) ([]string, error) {
	if s.archiveDir == "" {
		return nil, nil
	}
	if !s.deleted.loaded {
		days, err := readDeletedDays(ctx, conn)
		if err != nil {
			return nil, fmt.Errorf("append: days the retention deleted: %w", err)
		}
		s.deleted = deletedDays{loaded: true, days: days}
	}
	// The batch's days, a day or two of live traffic, looked up: not every
	// day the retention ever deleted.
	from, to := dayNumber(lo), dayNumber(hi)
	touched := false
	for d := from; d <= to && !touched; d++ {
		touched = s.deleted.days[d]
	}
	if !touched {
		return nil, nil
	}
	rows, err := conn.QueryContext(ctx, `SELECT file FROM archive_days WHERE deleted_at IS NOT NULL AND "date" BETWEEN ? AND ? ORDER BY file`,
		DayStart(from).Format(time.DateOnly), DayStart(to).Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("append: archived files: %w", err)
	}
	defer rows.Close()
	var files []string
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			return nil, fmt.Errorf("append: archived files: %w", err)
		}
		files = append(files, filepath.Join(s.archiveDir, f))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("append: archived files: %w", err)
	}
	return s.readable(ctx, files), nil
}

// readable are the files DuckDB can read ids from, tried one by one on the
// pool (a failed statement would end the batch's transaction): a file
// missing, unreadable or damaged cannot be compared with, but must not fail
// the batch, and every batch after it, for ever.
func (s *Store) readable(ctx context.Context, files []string) []string {
	out := files[:0]
	for _, f := range files {
		var n int64
		if err := s.db.QueryRowContext(ctx, `SELECT count(id) FROM `+parquetScan([]string{f})).Scan(&n); err != nil {
			continue
		}
		out = append(out, f)
	}
	return out
}

func readDeletedDays(ctx context.Context, conn *sql.Conn) (map[int64]bool, error) {
	rows, err := conn.QueryContext(ctx, `SELECT DISTINCT datediff('day', DATE '1970-01-01', "date") FROM archive_days WHERE deleted_at IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	days := map[int64]bool{}
	for rows.Next() {
		var d int64
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		days[d] = true
	}
	return days, rows.Err()
}

// deletedDay notes that the retention deleted the calls of day (s.mu held).
func (s *Store) deletedDay(day time.Time) {
	if s.deleted.loaded {
		s.deleted.days[dayNumber(day)] = true
	}
}
