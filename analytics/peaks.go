package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// session_peaks holds, per server, grant (empty for calls without one),
// tool, UTC day and session the gateway counts (CountedSession: NULL for
// calls without a protocol session, counted under their grant), the
// busiest minute of the day's calls: peak counts the allowed and
// rate-limited calls of its busiest minute (what a per-session limit is
// sized from),
// calls those calls over the day, peak_all every call of its busiest
// minute (what a limit counts, and so which sessions a limit would have
// refused calls of). The recommender's peaks per session and minute then
// read a row per tool, day and session instead of grouping every call of
// the window by tool, session and minute (~1M groups over 5M calls).
//
// A minute's calls may arrive in several batches, so its count is known
// only once its day is complete: Recluster counts a sealed day from its
// calls in one transaction and lists it in counted_days. A batch with
// calls of a listed day (a late event), an archived day deleted, or one
// restored take the day off the list until Recluster counts it again;
// readers take a listed day from the rows and every other day of their
// window from the calls.
//
// Most sessions use a tool on one day only: alone marks a row whose
// server, tool and session no other row has (on any day, in any grant), so
// that a reader merges only the other rows by session (grouping ~650,000
// sessions of one grant over 30 days cost ~0.2 s). It errs one way only: a
// row stays not alone when the rows it shared its key with are gone.
const sessionPeaksSchema = `
CREATE TABLE session_peaks (
	server   VARCHAR NOT NULL,
	"grant"  VARCHAR NOT NULL,
	tool     VARCHAR NOT NULL,
	day      BIGINT NOT NULL,
	session  VARCHAR,
	peak     BIGINT NOT NULL,
	calls    BIGINT NOT NULL,
	peak_all BIGINT NOT NULL,
	alone    BOOLEAN NOT NULL
);
CREATE TABLE session_peaks_days (day BIGINT PRIMARY KEY);`

// countedDaysSchema is migration 13's: the list of counted days, which
// migration 11 named for session_peaks alone, under a name for both the
// tables it serves (session_peaks and grant_days), its days kept.
const countedDaysSchema = countedDaysTable + `
INSERT INTO counted_days SELECT day FROM session_peaks_days;
DROP TABLE session_peaks_days;`

// countedDaysTable creates the list of counted days (also the stand-in of
// the tests that fake a version before migration 13).
const countedDaysTable = `
CREATE TABLE counted_days (day BIGINT PRIMARY KEY);`

// SessionMinutesSQL groups the calls that where selects per server,
// grant, tool, counted session and minute: the columns server, g, tool, s
// (CountedSession: NULL for a call the gateway counts under its grant), w
// (minutes since the epoch), n (allowed and rate-limited calls) and n_all
// (every call). Both session_peaks and the recommender's days without rows
// count minutes this way.
func SessionMinutesSQL(where string) string {
	return `
SELECT server, coalesce("grant", '') AS g, tool, ` + CountedSession + ` AS s, epoch_ms(ts) // 60000 AS w,
       count(*) FILTER (decision IN ('allowed', 'rate_limited')) AS n, count(*) AS n_all
FROM calls WHERE tool IS NOT NULL AND (` + where + `)
GROUP BY ALL`
}

// recountDay replaces table's rows of day (its day column) with those
// rows(where) selects from the day's calls, where admitting them by two
// parameters (the day's start and the next day's), on conn inside the
// caller's transaction.
func recountDay(ctx context.Context, conn *sql.Conn, table string, rows func(where string) string, day int64) error {
	start := DayStart(day)
	if _, err := conn.ExecContext(ctx, `DELETE FROM `+table+` WHERE day = ?`, day); err != nil {
		return err
	}
	_, err := conn.ExecContext(ctx, `INSERT INTO `+table+` `+rows(`ts >= ? AND ts < ?`), start, start.Add(24*time.Hour))
	return err
}

// sessionPeaksSQL counts the calls that where selects into session_peaks'
// rows, each alone until countSessionPeaks finds its key shared.
func sessionPeaksSQL(where string) string {
	return `
SELECT server, g, tool, w // 1440, s, max(n), sum(n), max(n_all), s IS NOT NULL
FROM (` + SessionMinutesSQL(where) + `)
GROUP BY ALL`
}

// countSessionPeaks counts day's calls into session_peaks, on conn inside
// the caller's transaction.
func countSessionPeaks(ctx context.Context, conn *sql.Conn, day int64) error {
	if err := recountDay(ctx, conn, "session_peaks", sessionPeaksSQL, day); err != nil {
		return fmt.Errorf("session peaks: %w", err)
	}
	if err := unclusterPeaksDay(ctx, conn, day); err != nil {
		return err
	}
	// The day's sessions that other rows (of other days or grants) share:
	// none of those rows is alone.
	if _, err := conn.ExecContext(ctx, `
UPDATE session_peaks SET alone = false
FROM (
	SELECT server AS k_server, tool AS k_tool, session AS k_session FROM session_peaks
	WHERE session IS NOT NULL AND (server, tool, session) IN (
		SELECT (server, tool, session) FROM session_peaks WHERE day = $day AND session IS NOT NULL)
	GROUP BY ALL HAVING count(*) > 1
) shared
WHERE alone AND server = k_server AND tool = k_tool AND session = k_session`, sql.Named("day", day)); err != nil {
		return fmt.Errorf("session peaks: %w", err)
	}
	return nil
}

// countSealedDay counts day's calls into session_peaks and grant_days and
// lists the day, on conn inside the caller's transaction.
func countSealedDay(ctx context.Context, conn *sql.Conn, day int64) error {
	if err := countSessionPeaks(ctx, conn, day); err != nil {
		return err
	}
	if err := countGrantDays(ctx, conn, day); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `INSERT OR IGNORE INTO counted_days VALUES (?)`, day); err != nil {
		return fmt.Errorf("counted days: %w", err)
	}
	return nil
}

// unlistSealedDays takes the days from d0 to d1 (UTC days since the
// epoch) off counted_days, for session_peaks and grant_days alike:
// calls of them were stored, deleted or restored since they were counted.
// Their rows stay until they are counted again; readers ignore them.
func unlistSealedDays(ctx context.Context, conn *sql.Conn, d0, d1 int64) error {
	if _, err := conn.ExecContext(ctx, `DELETE FROM counted_days WHERE day BETWEEN ? AND ?`, d0, d1); err != nil {
		return fmt.Errorf("counted days: %w", err)
	}
	return nil
}

// dayNumber is ToolDay's day alone.
func dayNumber(t time.Time) int64 {
	d, _ := ToolDay(t)
	return d
}

// countSealedDays counts into session_peaks and grant_days every day
// before until (a midnight) with calls and not listed yet, a day per
// transaction that holds the store's writer, and returns how many it
// counted.
func (s *Store) countSealedDays(ctx context.Context, until time.Time) (int, error) {
	last := dayNumber(until.Add(-time.Microsecond))
	n := 0
	for {
		counted, err := s.countNextDay(ctx, last)
		if err != nil || !counted {
			return n, err
		}
		n++
	}
}

// countNextDay counts the first day up to last with calls of tools (by
// tool_days, which every stored call of a tool is in; a day of calls of no
// tool only is left to its calls), none of them deleted by the archive (a
// window over such a day reads the archived calls), and not listed,
// holding the writer; false when no day is left.
func (s *Store) countNextDay(ctx context.Context, last int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errors.New("sealed days: database is closed")
	}
	var day sql.NullInt64
	if err := s.wconn.QueryRowContext(ctx, `SELECT min(day) FROM tool_days
WHERE day <= ? AND day NOT IN (SELECT day FROM counted_days)
  AND day NOT IN (SELECT "date" - DATE '1970-01-01' FROM archive_days WHERE deleted_at IS NOT NULL)`, last).Scan(&day); err != nil {
		return false, fmt.Errorf("sealed days: %w", err)
	}
	if !day.Valid {
		return false, nil
	}
	if err := inTransaction(ctx, s.wconn, func() error { return countSealedDay(ctx, s.wconn, day.Int64) }); err != nil {
		return false, fmt.Errorf("sealed day %d: %w", day.Int64, err)
	}
	return true, nil
}

// querier is a connection or a database.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// QueryColumn runs a query of one column and returns its values, in the
// query's order.
func QueryColumn[T any](ctx context.Context, q querier, query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// callAt says whether server (and grant, unless "") has a call that which
// admits (a predicate on calls) at that very instant: the only one of a
// day starting a window at its midnight that the window leaves out.
func callAt(ctx context.Context, q querier, server, grant, which string, at time.Time) (bool, error) {
	var n int64
	err := q.QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE server = ? AND (? = '' OR "grant" = ?) AND `+which+` AND ts = ?`,
		server, grant, grant, at).Scan(&n)
	return n > 0, err
}

// PeakDays are the days wholly inside the window (from, to] whose
// session_peaks rows count all their calls, in order; the window's first
// day is wholly inside when from is its midnight and no call of a tool of
// server (and grant, unless "") is at that very instant.
func PeakDays(ctx context.Context, q querier, server, grant string, from, to time.Time) ([]int64, error) {
	return sealedDays(ctx, q, server, grant, from, to, `tool IS NOT NULL`)
}

// sealedDays are the days counted_days lists wholly inside the
// window (from, to], in order: its first day only when from is its
// midnight and no call that which admits is at that instant.
func sealedDays(ctx context.Context, q querier, server, grant string, from, to time.Time, which string) ([]int64, error) {
	firstDay, firstStart := ToolDay(from)
	lastDay := dayNumber(to)
	if !from.Equal(firstStart) {
		firstDay++
	} else if firstDay < lastDay {
		at, err := callAt(ctx, q, server, grant, which, from)
		if err != nil {
			return nil, fmt.Errorf("counted days: %w", err)
		}
		if at {
			firstDay++
		}
	}
	days, err := QueryColumn[int64](ctx, q, `SELECT day FROM counted_days WHERE day >= ? AND day < ? ORDER BY day`, firstDay, lastDay)
	if err != nil {
		return nil, fmt.Errorf("counted days: %w", err)
	}
	return days, nil
}
