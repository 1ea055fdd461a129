package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

// call_runs holds the runs (SPEC §5) of every session's calls, kept as the
// calls are stored, so that the recommender reads a window's runs instead
// of sorting every call of the window by session. A run is a maximal
// sequence of consecutive calls of one session (server, grant and session
// key: the calls of a session under one grant, as a per-grant analysis sees
// them) to one tool with the same arguments, each at most RunsMaxGap after
// the previous one. Only runs of two calls or more are kept, with the call
// just before each (its tool's hash and time: the run's start), and the
// figures the detectors read.
//
// run_tails holds, per session, where the next batch's recomputation
// starts: the last cut, a pair of consecutive calls (a, b) that no run
// crosses (b does not continue a) with a earlier than b by at least a
// millisecond, so that every call at or after b's millisecond comes after
// it; and the session's last call. A batch recomputes each session it
// touches from that cut, with a standing in for the calls before it: the
// calls since the cut, usually the session's open run, are read again, and
// not the session's history. A session idle for longer than RunsMaxGap
// starts afresh after its last call (no run continues across the pause).
// A batch holding calls earlier than a session's cut (late or restored
// calls) first finds the session's last cut before them in the stored calls.
// That is this file's SQL, the general way; most sessions of a batch take
// the faster one of runsfast.go, held to it by the tests.
//
// The order of a session's calls is the recommender's: by millisecond,
// then DuckDB's hash of the tool and of args_hash; runs compare the same
// hashes. recommend reads call_runs only where it gives exactly what its
// own scan would (recommend/storedruns.go says when); the tests hold the two to
// the same answer.

// RunsMaxGap is the polling interval the stored runs are cut with:
// recommend.poll_max_interval's default. An analysis with another interval
// scans the calls.
const RunsMaxGap = 60 * time.Second

// SessionKey is the SQL expression of a call's session for analysis: where
// events carry no session (Intercept writes none), the gateway instance
// stands in for it (SPEC §5).
const SessionKey = `coalesce(session, 'gateway:' || gateway, '')`

// CountedSession is the SQL expression of the session a gateway counts a
// per-session limit by (SPEC §4): the event's own protocol session, NULL
// for every other call. A conversation, trace or derived session is
// mcptrail's correlation of calls the gateway saw without a session, and
// the gateway counts those calls under their grant.
const CountedSession = `CASE WHEN ` + HasCountedSession + ` THEN session END`

// HasCountedSession is the SQL condition that a call has a CountedSession.
const HasCountedSession = `session_source = 'event' AND session <> ''`

// execQuerier is a connection or a transaction.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sessionHash is the SQL expression of a session's key in the upkeep: one
// integer for its server, grant and session, which partitions and joins
// faster than the three.
const sessionHash = `hash(server, coalesce("grant", ''), ` + SessionKey + `)`

// runKeysSQL lists the sessions the calls that where selects touch (pk),
// each with the millisecond its recomputation starts from (region_ms) and
// the call standing in for the calls before it (prev_ts, prev_th: none at
// a session's first call). late marks a session with calls before its
// stored cut: resolveLateRuns moves its start back.
func runKeysSQL(where string) string {
	gap := strconv.FormatInt(RunsMaxGap.Milliseconds(), 10)
	idle := `k.lo - epoch_ms(t.last_ts) > ` + gap
	return `CREATE OR REPLACE TEMP TABLE run_keys AS
WITH k AS (
	SELECT ` + sessionHash + ` AS pk, any_value(server) AS server, any_value(coalesce("grant", '')) AS g,
	       any_value(hash(` + SessionKey + `)) AS skh, min(epoch_ms(ts)) AS lo
	FROM calls WHERE tool IS NOT NULL AND (` + where + `)
	GROUP BY pk
)
SELECT k.pk, k.server, k.g, k.skh, k.lo,
       CASE WHEN t.pk IS NULL OR ` + idle + ` THEN k.lo ELSE t.b_ms END AS region_ms,
       CASE WHEN t.pk IS NULL THEN NULL WHEN ` + idle + ` THEN t.last_ts ELSE t.a_ts END AS prev_ts,
       CASE WHEN t.pk IS NULL THEN NULL WHEN ` + idle + ` THEN t.last_th ELSE t.a_th END AS prev_th,
       coalesce(NOT (` + idle + `) AND k.lo <= t.b_ms, false) AS late
FROM k LEFT JOIN run_tails t ON t.pk = k.pk`
}

// seqSQL is the sequence work shared by finding cuts and runs: the calls
// of c (columns pk, th, hh, no_args, err, ms, ts, synth) in each session's
// order, each with the call before it and whether it continues it (cont)
// or is continued by the next (cont_next): the recommender's definitions
// (recommend/data.go runsSQL). The neighbours come as one struct each, so
// that the sorted calls are read twice, not once per column.
func seqSQL(c string) string {
	gap := strconv.FormatInt(RunsMaxGap.Milliseconds(), 10)
	return `SELECT pk, th, hh, err, ms, ts, synth, rn, p.th AS prev_th, p.ts AS prev_ts, epoch_ms(p.ts) AS prev_ms, ms - epoch_ms(p.ts) AS gap,
	       coalesce(th = p.th AND NOT no_args AND hh = p.hh AND ms - epoch_ms(p.ts) <= ` + gap + `, false) AS cont,
	       coalesce(th = n.th AND NOT n.no_args AND hh = n.hh AND n.ms - ms <= ` + gap + `, false) AS cont_next
	FROM (
		SELECT *, lag({'th': th, 'hh': hh, 'ts': ts}) OVER w AS p, lead({'th': th, 'hh': hh, 'no_args': no_args, 'ms': ms}) OVER w AS n,
		       row_number() OVER w AS rn
		FROM (` + c + `) c
		WINDOW w AS (PARTITION BY pk ORDER BY ms, th, hh)
	)`
}

// callsOf selects the calls of the sessions in run_keys that cond (over
// calls and run_keys k) admits, as seqSQL's columns.
func callsOf(cond string) string {
	return `SELECT k.pk, hash(calls.tool) AS th, hash(calls.args_hash) AS hh, calls.args_hash IS NULL AS no_args,
	       calls.status = 'error' AS err, epoch_ms(calls.ts) AS ms, calls.ts, false AS synth
	FROM calls JOIN run_keys k ON hash(calls.server, coalesce(calls."grant", ''), ` + SessionKey + `) = k.pk
	WHERE calls.tool IS NOT NULL AND ` + cond
}

// isCut is true on a call that starts a recomputation: it does not continue
// the call before it, which is at least a millisecond earlier (or none).
const isCut = `NOT synth AND NOT cont AND (prev_ms IS NULL OR prev_ms < ms)`

// resolveLateRunsSQL moves the start of each late session back to its last
// cut before its earliest new call, found in its stored calls before it.
// Stored calls with none before: from the first.
const resolveLateRunsSQL = `UPDATE run_keys SET region_ms = coalesce(c.b_ms, run_keys.lo), prev_ts = c.a_ts, prev_th = c.a_th, late = false
FROM (
	SELECT k.pk, cut.b_ms, cut.a_ts, cut.a_th
	FROM run_keys k LEFT JOIN (
		SELECT pk, arg_max(ms, rn) AS b_ms, arg_max(prev_ts, rn) AS a_ts, arg_max(prev_th, rn) AS a_th
		FROM (%s) s WHERE ` + isCut + `
		GROUP BY pk
	) cut USING (pk)
	WHERE k.late
) c
WHERE run_keys.pk = c.pk`

// recordRuns brings call_runs and run_tails up to date with the calls that
// where (with args) selects, just stored on conn inside the caller's
// transaction; tails, when not nil, learns the sessions given a tail.
func recordRuns(ctx context.Context, conn execQuerier, tails *tailKeys, where string, args ...any) error {
	return recordRunsOf(ctx, conn, tails, where, "true", args...)
}

// recordRunsOf is recordRuns for the sessions whose calls sessions (a
// condition on calls' columns, qualified) admits: a cheap filter on the
// stored columns, applied before the sessions' keys are hashed.
func recordRunsOf(ctx context.Context, conn execQuerier, tails *tailKeys, where, sessions string, args ...any) error {
	if _, err := conn.ExecContext(ctx, runKeysSQL(`(`+sessions+`) AND (`+where+`)`), args...); err != nil {
		return fmt.Errorf("record runs: sessions: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS run_keys; DROP TABLE IF EXISTS run_seq`)
	}()
	var late int64
	var floor sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FILTER (late), min(region_ms) FROM run_keys`).Scan(&late, &floor); err != nil {
		return fmt.Errorf("record runs: sessions: %w", err)
	}
	if !floor.Valid {
		return nil // no call of a tool
	}
	if late > 0 {
		before := fmt.Sprintf(resolveLateRunsSQL, seqSQL(callsOf(`(`+sessions+`) AND k.late AND epoch_ms(calls.ts) < k.lo`)))
		if _, err := conn.ExecContext(ctx, before); err != nil {
			return fmt.Errorf("record runs: late calls: %w", err)
		}
		if err := conn.QueryRowContext(ctx, `SELECT min(region_ms) FROM run_keys`).Scan(&floor); err != nil {
			return fmt.Errorf("record runs: sessions: %w", err)
		}
	}
	// The floor as a constant lets DuckDB skip the row groups of earlier
	// calls by their min/max ts.
	from := time.UnixMilli(floor.Int64).UTC()
	seq := `CREATE OR REPLACE TEMP TABLE run_seq AS ` + seqSQL(callsOf(`(`+sessions+`) AND calls.ts >= $1 AND epoch_ms(calls.ts) >= k.region_ms`)+`
	UNION ALL
	SELECT pk, prev_th, NULL, true, false, epoch_ms(prev_ts), prev_ts, true FROM run_keys WHERE prev_ts IS NOT NULL`)
	for _, step := range []struct {
		what, sql string
		args      []any
	}{
		{"sequences", seq, []any{from}},
		// The floor again lets DuckDB skip the older runs' row groups.
		{"drop replaced runs", `DELETE FROM call_runs USING run_keys k
			WHERE call_runs.t0 >= $1 AND call_runs.server = k.server AND call_runs."grant" = k.g AND call_runs.skh = k.skh
			  AND call_runs.t0 >= k.region_ms`, []any{floor.Int64}},
		{"runs", insertRunsSQL, nil},
		{"tails", `DELETE FROM run_tails WHERE pk IN (SELECT pk FROM run_keys)`, nil},
		{"tails", insertTailsSQL, nil},
	} {
		if _, err := conn.ExecContext(ctx, step.sql, step.args...); err != nil {
			return fmt.Errorf("record runs: %s: %w", step.what, err)
		}
	}
	return tails.addStored(ctx, conn)
}

// insertRunsSQL stores the runs of run_seq: its calls that continue or are
// continued, numbered into runs by a running count of run starts, as the
// recommender's runsSQL does.
const insertRunsSQL = `INSERT INTO call_runs
WITH r AS (
	SELECT *, sum((NOT cont)::INTEGER) OVER (PARTITION BY pk ORDER BY rn ROWS UNBOUNDED PRECEDING) AS run_no
	FROM run_seq WHERE cont OR cont_next
), runs AS (
	SELECT pk, any_value(th) AS th, any_value(hh) AS hh, any_value(prev_th) FILTER (NOT cont) AS prev_th, any_value(prev_ts) FILTER (NOT cont) AS prev_ts,
	       count(*) AS polls, (max(ms) - min(ms)) / 1000.0 AS span_s,
	       coalesce(avg(gap) FILTER (cont), 0) / 1000.0 AS mean_gap, coalesce(stddev_pop(gap) FILTER (cont), 0) / 1000.0 AS sd_gap,
	       coalesce(median(gap) FILTER (cont), 0) / 1000.0 AS median_gap,
	       count(*) FILTER (err) AS errors, coalesce(arg_max(err, ms), false) AS last_err, min(ms) AS t0, max(ms) AS t1,
	       min(ts) AS first_ts, max(ts) AS last_ts
	FROM r
	GROUP BY pk, run_no
)
SELECT k.server, k.g, k.skh, runs.* EXCLUDE (pk) FROM runs JOIN run_keys k USING (pk)`

// insertTailsSQL records each recomputed session's last cut and last call.
const insertTailsSQL = `INSERT INTO run_tails
SELECT pk,
       arg_max(ms, rn) FILTER (` + isCut + `), arg_max(prev_ts, rn) FILTER (` + isCut + `), arg_max(prev_th, rn) FILTER (` + isCut + `),
       arg_max(ts, rn) FILTER (NOT synth), arg_max(th, rn) FILTER (NOT synth), arg_max(hh, rn) FILTER (NOT synth)
FROM run_seq
GROUP BY pk`

// runsSchema creates call_runs and run_tails.
const runsSchema = `
CREATE TABLE call_runs (
	server     VARCHAR NOT NULL,
	"grant"    VARCHAR NOT NULL,
	skh        UBIGINT NOT NULL,
	th         UBIGINT NOT NULL,
	hh         UBIGINT NOT NULL,
	prev_th    UBIGINT,
	prev_ts    TIMESTAMPTZ,
	polls      BIGINT NOT NULL,
	span_s     DOUBLE NOT NULL,
	mean_gap   DOUBLE NOT NULL,
	sd_gap     DOUBLE NOT NULL,
	median_gap DOUBLE NOT NULL,
	errors     BIGINT NOT NULL,
	last_err   BOOLEAN NOT NULL,
	t0         BIGINT NOT NULL,
	t1         BIGINT NOT NULL,
	first_ts   TIMESTAMPTZ NOT NULL,
	last_ts    TIMESTAMPTZ NOT NULL
);
CREATE TABLE run_tails (
	pk      UBIGINT NOT NULL,
	b_ms    BIGINT NOT NULL,
	a_ts    TIMESTAMPTZ,
	a_th    UBIGINT,
	last_ts TIMESTAMPTZ NOT NULL,
	last_th UBIGINT NOT NULL,
	last_hh UBIGINT NOT NULL
);`
