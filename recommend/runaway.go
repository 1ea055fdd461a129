package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// The run definitions of SPEC §5 as pure functions, shared with the live
// alarm, which extends runs call by call instead of in SQL.

// IsRetryStorm tells a retry storm from polling: a run mostly of errors,
// ending in one.
func IsRetryStorm(polls, errors int64, lastErr bool) bool { return errors*2 >= polls && lastErr }

// StartsLoop tells whether a run may be a polling loop by how it started:
// after a call of another tool, at most maxGap before its first call.
func StartsLoop(startTool, tool string, startGap, maxGap time.Duration) bool {
	return startTool != "" && startTool != tool && startGap <= maxGap
}

// RunawayThreshold is the loop length over which a loop is runaway.
func RunawayThreshold(p95 float64, p Params) float64 { return p.RunawayFactor * p95 }

// LoopLengths measures a server's polling loops in the window (from, to] as
// the polling_loop detector finds them (SPEC §5): how many, and the p95 of
// their lengths in polls (lower nearest rank). The live alarm derives its
// runaway threshold from it: p.RunawayFactor × p95.
func LoopLengths(ctx context.Context, db *sql.DB, server string, from, to time.Time, p Params) (loops int, p95 float64, err error) {
	q := query{db: db, server: server, from: from, to: to}
	rows, err := q.rows(ctx, "loop lengths", `
WITH `+runsSQL(inWindow, p.PollMinCalls, p.PollMaxInterval)+`
SELECT th, prev_th, start_gap, polls, mean_gap, sd_gap, errors, last_err FROM runs`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	s := &state{p: p}
	var polls []float64
	for rows.Next() {
		var r run
		var th, prev uint64
		if err := rows.Scan(&th, &prev, &r.StartGap, &r.Polls, &r.MeanGap, &r.SDGap, &r.Errors, &r.LastErr); err != nil {
			return 0, 0, fmt.Errorf("loop lengths: %w", err)
		}
		// isLoop compares tools only with each other: their hashes do.
		r.Tool = strconv.FormatUint(th, 10)
		if prev != 0 {
			r.StartTool = strconv.FormatUint(prev, 10)
		}
		if s.isLoop(&r) {
			polls = append(polls, float64(r.Polls))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("loop lengths: %w", err)
	}
	return len(polls), quantile(polls, 0.95), nil
}
