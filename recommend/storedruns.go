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
//   - a run crossing an edge is cut by it, and a run ending within the
//     polling interval of the window's end (which covers every run
//     crossing it) might be continued by a call in the end's millisecond
//     the window still holds (the window ends mid-millisecond); the call
//     before a run can likewise share the millisecond of the window's
//     start with calls inside it, one of which then comes before the run.
// The sessions with such a run near an edge are read from the calls, as
// before; every other session's runs come from call_runs. The tests hold
// both ways to the same answer on random windows.

// storedRunsUsable tells whether call_runs gives this window's runs exactly:
// they were cut with the same polling interval and kept from runs of two
// calls; an analysis of every grant reads them only when the window holds
// no call with a grant (they are kept per grant); and the window must
// hold every call they were kept from (an archived day deleted from the
// store is read only through the archive's view).
func (q query) storedRunsUsable(ctx context.Context, minCalls int, maxInterval time.Duration) (bool, error) {
	if maxInterval != analytics.RunsMaxGap || minCalls < 2 {
		return false, nil
	}
	dayFrom, _ := analytics.ToolDay(q.from)
	dayTo, _ := analytics.ToolDay(q.to)
	var granted, deleted, view int64
	err := q.db.QueryRowContext(ctx, `SELECT
	(SELECT count(*) FROM tool_days WHERE $grant = '' AND server = $server AND "grant" <> '' AND day BETWEEN $day_from AND $day_to),
	(SELECT count(*) FROM archive_days WHERE server = $server AND deleted_at IS NOT NULL
		AND "date" BETWEEN make_date(1970, 1, 1) + $day_from::INTEGER AND make_date(1970, 1, 1) + $day_to::INTEGER),
	(SELECT count(*) FROM duckdb_views() WHERE view_name = 'calls' AND temporary)`,
		q.args(sql.Named("day_from", dayFrom), sql.Named("day_to", dayTo))...).Scan(&granted, &deleted, &view)
	if err != nil {
		return false, fmt.Errorf("stored runs: %w", err)
	}
	return granted == 0 && (deleted == 0 || view > 0), nil
}

// storedRunsSQL reads the window's runs of at least minCalls calls from
// call_runs, and those of the sessions with a run near an edge from the
// calls (runsSQL); the columns and order of runs' query.
func storedRunsSQL(minCalls int) string {
	gap := strconv.FormatInt(analytics.RunsMaxGap.Milliseconds(), 10)
	minN := strconv.Itoa(minCalls)
	return `WITH stored AS (
	SELECT * FROM call_runs
	WHERE server = $server AND "grant" = $grant AND last_ts > $from AND first_ts <= $to
), edge AS (
	SELECT DISTINCT skh FROM stored
	WHERE first_ts <= $from OR t1 >= epoch_ms($to) - ` + gap + `
	   OR (prev_ts <= $from AND epoch_ms(prev_ts) = epoch_ms($from))
), ` + runsSQL(inWindow+` AND hash(`+sessionKey+`) IN (SELECT skh FROM edge)`, minCalls, analytics.RunsMaxGap) + `
SELECT skh, th, CASE WHEN prev_ts > $from THEN prev_th ELSE 0 END,
       CASE WHEN prev_ts > $from THEN (t0 - epoch_ms(prev_ts)) / 1000.0 ELSE 0 END,
       polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1
FROM stored WHERE polls >= ` + minN + ` AND skh NOT IN (SELECT skh FROM edge)
UNION ALL
SELECT skh, th, prev_th, start_gap, polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1 FROM runs
ORDER BY t0, skh`
}
