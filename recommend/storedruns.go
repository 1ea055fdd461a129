package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

// The runs of a window are read from call_runs, the runs the store keeps as
// it stores calls (analytics/runs.go), instead of sorting every call of the
// window by session. A stored run is a run of the session's whole history;
// the window's own runs are the same except near its edges:
//   - a run wholly inside the window is the window's run, but for its start
//     when the call before it lies before the window (then it starts the
//     window's sequence: no start tool);
//   - a run crossing the window's start is cut by it: its calls inside the
//     window are the window's run, which starts the session's sequence
//     there (unless the run starts in the start's millisecond, where
//     another call of the session inside the window may come first);
//   - when the scope has calls after the window, a run crossing its end is
//     cut, and a run ending within the polling interval of the end (which
//     covers every run crossing it) might be continued by a call in the
//     end's millisecond the window still holds (the window ends
//     mid-millisecond); the call before a run can likewise share the
//     millisecond of the window's start with calls inside it, one of which
//     then comes before the run.
// The sessions of the last two cases are read from the calls, as before;
// the runs crossing the start from their calls between the start and their
// last call; everything else from call_runs. The tests hold both ways to
// the same answer on random windows.

// storedRunsUsable tells whether call_runs gives this window's runs exactly:
// they were cut with the same polling interval and kept from runs of two
// calls; an analysis of every grant reads them only when the window holds
// no call with a grant (they are kept per grant); and the window must
// hold every call they were kept from (an archived day deleted from the
// store is read only through the archive's view, and not at all once a
// call of it came late). later tells whether the
// scope has calls after the window's end (else its end cuts no run).
func (q query) storedRunsUsable(ctx context.Context, minCalls int, maxInterval time.Duration) (usable, later bool, err error) {
	if maxInterval != analytics.RunsMaxGap || minCalls < 2 {
		return false, false, nil
	}
	dayFrom, _ := analytics.ToolDay(q.from)
	dayTo, _ := analytics.ToolDay(q.to)
	var granted, deleted, view, after int64
	err = q.db.QueryRowContext(ctx, `SELECT
	(SELECT count(*) FROM tool_days WHERE $grant = '' AND server = $server AND "grant" <> '' AND day BETWEEN $day_from AND $day_to),
	(SELECT count(*) FROM archive_days WHERE `+deletedDaysInWindow+`),
	(SELECT count(*) FROM duckdb_views() WHERE view_name = 'calls' AND temporary),
	(SELECT count(*) FROM (SELECT 1 FROM calls WHERE `+inScope+` AND ts > $to LIMIT 1))`,
		q.args(sql.Named("day_from", dayFrom), sql.Named("day_to", dayTo))...).Scan(&granted, &deleted, &view, &after)
	if err != nil {
		return false, false, fmt.Errorf("stored runs: %w", err)
	}
	if granted > 0 || (deleted > 0 && view == 0) {
		return false, after > 0, nil
	}
	if deleted > 0 {
		late, err := q.lateInDeletedDays(ctx, dayFrom, dayTo)
		if err != nil || late {
			return false, after > 0, err
		}
	}
	return true, after > 0, nil
}

// deletedDaysInWindow selects the server's days in archive_days that the
// retention deleted, from $day_from to $day_to (days since the epoch).
const deletedDaysInWindow = `server = $server AND deleted_at IS NOT NULL
		AND "date" BETWEEN make_date(1970, 1, 1) + $day_from::INTEGER AND make_date(1970, 1, 1) + $day_to::INTEGER`

// lateInDeletedDays tells whether a call reached a deleted day of the
// window after its deletion: the store then recomputed its session's runs
// without the archived calls, so they are read from the calls (the
// archive's view) until a restore repairs them. A late call is a hot one,
// so the hot table is read by its catalog's name: the archive's view in
// its place would read the day's files and hold them against every hot
// id, once for each deleted day.
func (q query) lateInDeletedDays(ctx context.Context, dayFrom, dayTo int64) (bool, error) {
	hot, err := analytics.HotCalls(ctx, q.db)
	if err != nil {
		return false, fmt.Errorf("stored runs: %w", err)
	}
	var late int64
	err = q.db.QueryRowContext(ctx, `SELECT count(*) FROM archive_days a WHERE `+deletedDaysInWindow+`
		AND EXISTS (SELECT 1 FROM `+hot+` c WHERE c.server = a.server AND c.ts >= a."date" AND c.ts < a."date" + INTERVAL 1 DAY
			AND c.ingested_at > a.deleted_at)`,
		q.args(sql.Named("day_from", dayFrom), sql.Named("day_to", dayTo))...).Scan(&late)
	if err != nil {
		return false, fmt.Errorf("stored runs: late calls in deleted days: %w", err)
	}
	return late > 0, nil
}

// crossingEnd is the last call of the runs that cross the window's start,
// the window's start without one: the calls the read takes of them lie
// between the two, which lets DuckDB skip the rest by their times.
func (q query) crossingEnd(ctx context.Context) (time.Time, error) {
	var end sql.NullTime
	err := q.db.QueryRowContext(ctx, `SELECT max(last_ts) FROM call_runs
	WHERE server = $server AND "grant" = $grant AND first_ts <= $from AND last_ts > $from`, q.args()...).Scan(&end)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored runs: %w", err)
	}
	if !end.Valid {
		return q.from, nil
	}
	return end.Time, nil
}

// storedRunsSQL reads the window's runs of at least minCalls calls, in no
// order (readRuns' columns, in its column order and types: a HUGEINT the
// driver hands over as a big integer, which database/sql then scans
// through its text); from call_runs; a run crossing the
// window's start as its calls inside the window, read between the start
// and $cut_to (crossingEnd); and every run of a session read from the
// calls (runsSQL) when a tie at the start's millisecond, or later calls
// (later) near the end, could change it.
func storedRunsSQL(minCalls int, later bool) string {
	gap := strconv.FormatInt(analytics.RunsMaxGap.Milliseconds(), 10)
	minN := strconv.Itoa(minCalls)
	end := ""
	if later {
		end = `
	   OR t1 >= epoch_ms($to) - ` + gap
	}
	return `WITH stored AS (
	SELECT * FROM call_runs
	WHERE server = $server AND "grant" = $grant AND last_ts > $from AND first_ts <= $to
), edge AS (
	SELECT DISTINCT skh FROM stored
	WHERE (first_ts <= $from AND t0 = epoch_ms($from))
	   OR (prev_ts <= $from AND epoch_ms(prev_ts) = epoch_ms($from))` + end + `
), crossing AS (
	SELECT * FROM stored WHERE first_ts <= $from AND skh NOT IN (SELECT skh FROM edge)
), cut AS (
	SELECT r.skh, r.th, epoch_ms(calls.ts) AS ms, calls.status = 'error' AS err
	FROM calls JOIN crossing r ON hash(` + sessionKey + `) = r.skh AND hash(calls.tool) = r.th AND hash(calls.args_hash) = r.hh
	WHERE calls.server = $server AND ($grant = '' OR calls."grant" = $grant) AND calls.ts > $from AND calls.ts <= $cut_to
	  AND epoch_ms(calls.ts) <= r.t1
), cut_gaps AS (
	SELECT *, ms - lag(ms) OVER (PARTITION BY skh ORDER BY ms) AS gap FROM cut
), cut_runs AS (
	SELECT skh, any_value(th) AS th, count(*) AS polls, (max(ms) - min(ms)) / 1000.0 AS span_s,
	       coalesce(avg(gap), 0) / 1000.0 AS mean_gap, coalesce(stddev_pop(gap), 0) / 1000.0 AS sd_gap,
	       coalesce(median(gap), 0) / 1000.0 AS median_gap, count(*) FILTER (err) AS errors,
	       coalesce(arg_max(err, ms), false) AS last_err, min(ms) AS t0, max(ms) AS t1
	FROM cut_gaps GROUP BY skh HAVING count(*) >= ` + minN + `
), ` + runsSQL(inWindow+` AND hash(`+sessionKey+`) IN (SELECT skh FROM edge)`, minCalls, analytics.RunsMaxGap) + `
SELECT skh, th, CASE WHEN prev_ts > $from THEN prev_th ELSE 0::UBIGINT END,
       CASE WHEN prev_ts > $from THEN (t0 - epoch_ms(prev_ts)) / 1000.0 ELSE 0 END,
       polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1
FROM stored WHERE polls >= ` + minN + ` AND first_ts > $from AND skh NOT IN (SELECT skh FROM edge)
UNION ALL
SELECT skh, th, 0::UBIGINT, 0::DOUBLE, polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1 FROM cut_runs
UNION ALL
SELECT skh, th, prev_th, start_gap, polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1 FROM runs`
}
