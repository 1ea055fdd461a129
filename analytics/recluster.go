package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Calls are stored in batches whose row groups (DuckDB's unit of
// skipping, 122,880 rows) each hold every grant's calls of the batch, so a
// query of one grant reads them all. Once their days are sealed, Recluster
// rewrites them sorted by server, grant and time: a row group then holds
// one grant's calls (or two at a boundary), and DuckDB's statistics let a
// query of one grant skip the others' row groups (the recommender over 5M
// calls of 4 grants: a fifth less time, bench/recommend-pairs.sh).

// ReclusterSpan is the most days of calls one rewrite sorts together: the
// first rewrite of a long history goes a week at a time, each in its own
// transaction.
const ReclusterSpan = 7 * 24 * time.Hour

// ReclusterMinCalls is the fewest calls a span of sealed days less than
// ReclusterSpan long waits for: with fewer, its grants would share row
// groups again (four row groups).
const ReclusterMinCalls = 4 * 122_880

// ReclusterMaxCalls bounds the calls one rewrite sorts, so that it holds
// the store's writer (and ingestion waits) for seconds, not minutes: a
// week with more calls goes in shorter spans, down to an hour.
const ReclusterMaxCalls = 1 << 20

// ReclusterResult says what one Recluster did.
type ReclusterResult struct {
	// Calls were rewritten in Spans transactions; Until is the time
	// before which every call stored so far is clustered (zero when none).
	Calls int64
	Spans int
	Until time.Time
	// Largest is the most calls one span held.
	Largest int64
	// Waiting are the sealed calls after Until left for a later run: fewer
	// than ReclusterMinCalls within the last ReclusterSpan.
	Waiting int64
	// CountedDays are the sealed days counted into session_peaks (their
	// busiest minutes per session, peaks.go) and grant_days (their window
	// figures, grantdays.go).
	CountedDays int
}

// Recluster rewrites the calls of sealed UTC days (before now's day) not
// yet clustered, sorted by server, grant, time and id, a span of at most
// ReclusterSpan at a time (shorter, in whole hours, when it would hold more
// than ReclusterMaxCalls calls), each span in one transaction that holds the
// store's writer: the sorted copy appended, the calls it copies deleted,
// the watermark (calls_clustered) moved past them. A span shorter than
// ReclusterSpan waits until it holds ReclusterMinCalls calls. Calls that
// arrive later with an older time stay where they are stored: the layout
// only speeds queries up, every query reads the same calls either way.
// Then every sealed day not counted yet has its peaks per session and
// minute and its window figures counted (countSealedDays), whether its
// calls were rewritten or not, and the epochs of session_peaks that got
// rows are sorted by server and grant again (clusterPeaks).
func (s *Store) Recluster(ctx context.Context, now time.Time) (ReclusterResult, error) {
	return s.recluster(ctx, now, ReclusterMinCalls, ReclusterMaxCalls)
}

// recluster is Recluster with the calls a short span waits for and the
// most one span may hold.
func (s *Store) recluster(ctx context.Context, now time.Time, minCalls, maxCalls int64) (ReclusterResult, error) {
	var res ReclusterResult
	if s.readOnly {
		return res, errors.New("recluster: database opened read-only")
	}
	sealed := now.UTC().Truncate(24 * time.Hour)
	for {
		sp, err := s.reclusterSpan(ctx, sealed, minCalls, maxCalls)
		if err != nil {
			return res, err
		}
		res.Until, res.Waiting = sp.until, sp.waiting
		if !sp.done {
			if res.CountedDays, err = s.countSealedDays(ctx, sealed); err != nil {
				return res, err
			}
			return res, s.clusterPeaks(ctx)
		}
		res.Calls += sp.calls
		res.Spans++
		res.Largest = max(res.Largest, sp.calls)
	}
}

// span is what reclusterSpan did: done when it moved the watermark (to
// until, over calls calls), else the calls waiting after until.
type span struct {
	done           bool
	until          time.Time
	calls, waiting int64
}

// reclusterSpan rewrites the next span before sealed, if one is due.
func (s *Store) reclusterSpan(ctx context.Context, sealed time.Time, minCalls, maxCalls int64) (span, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return span{}, errors.New("recluster: database is closed")
	}
	conn := s.wconn
	// The first span starts at the day of the first call.
	var from sql.NullTime
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(max(clustered_until), (SELECT date_trunc('day', min(ts) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM calls)) FROM calls_clustered`).Scan(&from); err != nil {
		return span{}, fmt.Errorf("recluster: %w", err)
	}
	if !from.Valid {
		return span{}, nil // no calls
	}
	start := from.Time.UTC()
	sp := span{until: start}
	if !start.Before(sealed) {
		return sp, nil
	}
	end := start.Add(ReclusterSpan)
	if end.After(sealed) {
		end = sealed
	}
	n, err := countCalls(ctx, conn, start, end)
	if err != nil {
		return span{}, err
	}
	shortened := false
	for n > maxCalls && end.Sub(start) > time.Hour {
		end = start.Add(max((end.Sub(start) / 2).Truncate(time.Hour), time.Hour))
		shortened = true
		if n, err = countCalls(ctx, conn, start, end); err != nil {
			return span{}, err
		}
	}
	if !shortened && end.Sub(start) < ReclusterSpan && n < minCalls {
		sp.waiting = n
		return sp, nil
	}
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return span{}, fmt.Errorf("recluster: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	// The sorted copy gets row ids above every stored one.
	var last sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT max(rowid) FROM calls`).Scan(&last); err != nil {
		return span{}, fmt.Errorf("recluster: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO calls
SELECT * FROM calls WHERE ts >= ? AND ts < ? ORDER BY server, "grant", ts, id`, start, end); err != nil {
		return span{}, fmt.Errorf("recluster: copy: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM calls WHERE rowid <= ? AND ts >= ? AND ts < ?`, last.Int64, start, end); err != nil {
		return span{}, fmt.Errorf("recluster: delete: %w", err)
	}
	if err := compactToolDayUse(ctx, conn, start, end); err != nil {
		return span{}, fmt.Errorf("recluster: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM calls_clustered`); err != nil {
		return span{}, fmt.Errorf("recluster: watermark: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO calls_clustered VALUES (?)`, end); err != nil {
		return span{}, fmt.Errorf("recluster: watermark: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return span{}, fmt.Errorf("recluster: commit: %w", err)
	}
	committed = true
	return span{done: true, until: end, calls: n}, nil
}

func countCalls(ctx context.Context, conn *sql.Conn, from, to time.Time) (int64, error) {
	var n int64
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE ts >= ? AND ts < ?`, from, to).Scan(&n); err != nil {
		return 0, fmt.Errorf("recluster: %w", err)
	}
	return n, nil
}
