package recommend

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// Time arithmetic in these queries goes through epoch_ms: subtracting
// TIMESTAMPTZ values or truncating them runs through ICU's calendar per row,
// which measured an order of magnitude slower.

// sessionKey is the SQL expression of a call's session for analysis: where
// events carry no session (Intercept writes none), the gateway instance
// stands in for it (SPEC §5).
const sessionKey = `coalesce(session, 'gateway:' || gateway, '')`

// sessionID identifies a session in sets that detectors and the replay share
// (runaway sessions, affected sessions): the hash of the session key, as text.
const sessionID = `hash(` + sessionKey + `)::VARCHAR`

// inWindow is the WHERE clause shared by every detector.
const inWindow = `server = $server AND ($grant = '' OR "grant" = $grant) AND ts > $from AND ts <= $to`

// query binds the analysis scope and any extra named arguments.
type query struct {
	db       *sql.DB
	server   string
	grant    string
	from, to time.Time
	log      *slog.Logger // debug timings; nil is quiet
}

// timed logs how long a query took, at debug level.
func (q query) timed(what string) func() {
	if q.log == nil {
		return func() {}
	}
	start := time.Now()
	return func() {
		q.log.Debug("recommend query", "query", what, "took", time.Since(start).Round(time.Millisecond))
	}
}

func (q query) args(extra ...any) []any {
	return append([]any{
		sql.Named("server", q.server), sql.Named("grant", q.grant),
		sql.Named("from", q.from), sql.Named("to", q.to),
	}, extra...)
}

func (q query) rows(ctx context.Context, what, text string, extra ...any) (*sql.Rows, error) {
	defer q.timed(what)()
	rows, err := q.db.QueryContext(ctx, text, q.args(extra...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return rows, nil
}

// windowStats counts the window's calls, sessions, agents and active days.
func (q query) windowStats(ctx context.Context) (w Window, activeDays int, err error) {
	err = q.db.QueryRowContext(ctx, `
SELECT count(*), count(DISTINCT `+sessionKey+`) FILTER (`+sessionKey+` <> ''), count(DISTINCT agent),
       count(DISTINCT epoch_ms(ts) // 86400000)
FROM calls WHERE `+inWindow, q.args()...).Scan(&w.Calls, &w.Sessions, &w.Agents, &activeDays)
	if err != nil {
		return w, 0, fmt.Errorf("window statistics: %w", err)
	}
	w.From, w.To = q.from, q.to
	w.Days = int(q.to.Sub(q.from).Round(time.Hour).Hours() / 24)
	return w, activeDays, nil
}

// usage is one tool's use: in the window, and over the whole history.
type usage struct {
	Tool           string
	Calls          int64 // any decision, in the window
	Allowed        int64 // allowed calls in the window
	AllowedDays    int64 // distinct days with an allowed call in the window
	Refused        int64 // calls not allowed in the window
	Sessions       int64
	WithSession    int64      // calls in the window that carry a session
	LastAllowed    *time.Time // last allowed call ever (up to now)
	EarlierPeriods int64      // window-length periods before the window with an allowed call
}

// toolUsage reads every tool's use in one scan of the server's history.
func (q query) toolUsage(ctx context.Context, window time.Duration) (map[string]*usage, error) {
	rows, err := q.rows(ctx, "tool usage", `
SELECT tool,
       count(*) FILTER (ts > $from),
       count(*) FILTER (ts > $from AND decision = 'allowed'),
       count(DISTINCT epoch_ms(ts) // 86400000) FILTER (ts > $from AND decision = 'allowed'),
       count(*) FILTER (ts > $from AND decision <> 'allowed'),
       count(DISTINCT `+sessionKey+`) FILTER (ts > $from),
       count(*) FILTER (ts > $from AND coalesce(session, '') <> ''),
       max(ts) FILTER (decision = 'allowed'),
       count(DISTINCT (epoch_ms($from) - epoch_ms(ts)) // $period_ms) FILTER (ts <= $from AND decision = 'allowed')
FROM calls
WHERE server = $server AND ($grant = '' OR "grant" = $grant) AND ts <= $to AND tool IS NOT NULL
GROUP BY tool`, sql.Named("period_ms", window.Milliseconds()))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*usage{}
	for rows.Next() {
		u := &usage{}
		var last sql.NullTime
		if err := rows.Scan(&u.Tool, &u.Calls, &u.Allowed, &u.AllowedDays, &u.Refused, &u.Sessions, &u.WithSession, &last, &u.EarlierPeriods); err != nil {
			return nil, fmt.Errorf("tool usage: %w", err)
		}
		if last.Valid {
			t := last.Time.UTC()
			u.LastAllowed = &t
		}
		out[u.Tool] = u
	}
	return out, rows.Err()
}

// run is a maximal sequence, within one session, of consecutive calls of one
// tool with the same arguments, each within the polling interval of the
// previous one. Polling loops and retry storms are runs.
type run struct {
	Session     string // the session's sessionID
	SessionHash uint64
	Tool        string
	StartTool   string  // the call just before the run ("" at a session's start)
	StartGap    float64 // seconds from that call to the run's first call
	Polls       int64
	SpanS       float64 // seconds from the first to the last call of the run
	MeanGap     float64
	SDGap       float64
	MedianGap   float64
	Errors      int64
	LastStatus  string // "error" when the run's last call failed upstream
	First, Last time.Time
}

// runs finds every run of at least minCalls calls. The sequence work (LAG
// over each session's calls in time order) runs in DuckDB; only the runs,
// far fewer than the calls, come back.
func (q query) runs(ctx context.Context, minCalls int, maxInterval time.Duration) ([]run, error) {
	// Tool names of the window, by hash: the ordered work below carries only
	// integers (hashes and epoch milliseconds), which sort several times
	// faster than the strings they stand for.
	names := map[uint64]string{}
	nrows, err := q.rows(ctx, "tool names", `SELECT DISTINCT tool, hash(tool) FROM calls WHERE `+inWindow+` AND tool IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	for nrows.Next() {
		var name string
		var h uint64
		if err := nrows.Scan(&name, &h); err != nil {
			nrows.Close()
			return nil, fmt.Errorf("tool names: %w", err)
		}
		names[h] = name
	}
	nrows.Close()

	// One sort of the window's calls (LAG and LEAD share it) marks each call
	// that continues the previous one (cont) or is continued by the next
	// (cont_next). A call with neither is a run of one: most calls are, so
	// only the rest goes through the second pass that numbers the runs
	// (a running count of run starts) and the aggregates.
	rows, err := q.rows(ctx, "call sequences", `
WITH c AS (
	SELECT hash(`+sessionKey+`) AS skh, hash(tool) AS th, hash(args_hash) AS hh, args_hash IS NULL AS no_args,
	       status = 'error' AS err, epoch_ms(ts) AS ms
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
), s AS (
	SELECT skh, th, hh, err, ms, lag(th) OVER w AS prev_th, ms - lag(ms) OVER w AS gap,
	       coalesce(th = lag(th) OVER w AND NOT no_args AND hh = lag(hh) OVER w
	                AND ms - lag(ms) OVER w <= $max_gap_ms, false) AS cont,
	       coalesce(th = lead(th) OVER w AND NOT lead(no_args) OVER w AND hh = lead(hh) OVER w
	                AND lead(ms) OVER w - ms <= $max_gap_ms, false) AS cont_next
	FROM c WINDOW w AS (PARTITION BY skh ORDER BY ms, th, hh)
), r AS (
	SELECT *, sum((NOT cont)::INTEGER) OVER (PARTITION BY skh ORDER BY ms, th, hh ROWS UNBOUNDED PRECEDING) AS run_no
	FROM s WHERE $min_calls <= 1 OR cont OR cont_next
)
SELECT skh, any_value(th), coalesce(any_value(prev_th) FILTER (NOT cont), 0), coalesce(any_value(gap) FILTER (NOT cont), 0) / 1000.0,
       count(*), (max(ms) - min(ms)) / 1000.0,
       coalesce(avg(gap) FILTER (cont), 0) / 1000.0, coalesce(stddev_pop(gap) FILTER (cont), 0) / 1000.0,
       coalesce(median(gap) FILTER (cont), 0) / 1000.0,
       count(*) FILTER (err), coalesce(arg_max(err, ms), false), min(ms), max(ms)
FROM r
GROUP BY skh, run_no HAVING count(*) >= $min_calls
ORDER BY min(ms), skh`, sql.Named("max_gap_ms", maxInterval.Milliseconds()), sql.Named("min_calls", minCalls))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []run
	for rows.Next() {
		var r run
		var th, prev uint64
		var lastErr bool
		var first, last int64
		if err := rows.Scan(&r.SessionHash, &th, &prev, &r.StartGap, &r.Polls, &r.SpanS, &r.MeanGap,
			&r.SDGap, &r.MedianGap, &r.Errors, &lastErr, &first, &last); err != nil {
			return nil, fmt.Errorf("call sequences: %w", err)
		}
		r.Session = strconv.FormatUint(r.SessionHash, 10)
		r.Tool, r.StartTool = names[th], names[prev]
		if lastErr {
			r.LastStatus = "error"
		}
		r.First, r.Last = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// peakStats summarises, for one tool, each scope value's peak calls per window.
type peakStats struct {
	Tool               string
	P50, P90, P99, Max float64
	Scopes             int64 // scope values (sessions, grants or agents) seen
	Sessions           int64
	WithSession        int64 // calls that carry a session
	Calls              int64
	RunawayPeak        float64 // highest peak among excluded runaway loops' sessions (polled tools)
}

// bucketMillis is the length of a fixed policy window. Buckets are computed
// as epoch_ms(ts) // length: calendar-aligned in UTC like the evaluator's
// windows, and plain integer arithmetic instead of a time-zone-aware
// date_trunc over every row.
func bucketMillis(window string) int64 {
	switch window {
	case "hour":
		return 3_600_000
	case "day":
		return 86_400_000
	}
	return 60_000
}

// scopeExpr is the SQL counter key of a scope, mirroring the policy
// evaluator: a call without the scope's key counts under its grant. Keys are
// hashed (with the scope's letter, so that a session named like a grant
// stays apart): grouping on integers is much cheaper than on strings.
func scopeExpr(scope string) string {
	g := `hash('g', coalesce("grant", ''))`
	switch scope {
	case "session":
		return `CASE WHEN coalesce(session, '') <> '' THEN hash('s', session) ELSE ` + g + ` END`
	case "agent":
		return `CASE WHEN coalesce(agent, '') <> '' THEN hash('a', agent) ELSE ` + g + ` END`
	}
	return g
}

// peaks computes per-tool percentiles of per-scope peak counts per window
// over the calls that pass the policy's other rules (allowed or rate-limited).
// Calls inside excluded runs (runaway loops) are left out.
//
// tool, when not empty, restricts the work to that tool's calls.
func (q query) peaks(ctx context.Context, tool, scope, window string, excluded []run) (map[string]*peakStats, error) {
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	defer conn.Close()
	if err := loadExcluded(ctx, conn, excluded); err != nil {
		return nil, err
	}
	defer q.timed("peaks " + tool + " " + window)()
	// Calls inside excluded runs are subtracted per bucket rather than
	// filtered row by row: the runs are few, and a per-row anti-join over
	// the whole window measured five times slower than the aggregate itself.
	rows, err := conn.QueryContext(ctx, `
WITH c AS (
	SELECT tool, epoch_ms(ts) // $bucket_ms AS w, `+scopeExpr(scope)+` AS k
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL AND decision IN ('allowed', 'rate_limited')
	  AND ($tool = '' OR tool = $tool)
), per_all AS (
	SELECT tool, k, w, count(*) AS n FROM c GROUP BY ALL
), excluded AS (
	SELECT calls.tool, `+scopeExpr(scope)+` AS k, epoch_ms(calls.ts) // $bucket_ms AS w, count(*) AS n
	FROM calls SEMI JOIN excluded_runs x
	     ON x.skh = hash(`+sessionKey+`) AND x.tool = calls.tool AND calls.ts BETWEEN x.t0 AND x.t1
	WHERE `+inWindow+` AND decision IN ('allowed', 'rate_limited') AND ($tool = '' OR calls.tool = $tool)
	GROUP BY ALL
), per AS (
	SELECT p.tool, p.k, p.n - coalesce(e.n, 0) AS n
	FROM per_all p LEFT JOIN excluded e ON p.tool = e.tool AND p.k = e.k AND p.w = e.w
	WHERE p.n - coalesce(e.n, 0) > 0
), pk AS (
	SELECT tool, k, max(n) AS peak, sum(n) AS calls FROM per GROUP BY ALL
)
SELECT tool, quantile_cont(peak, 0.5), quantile_cont(peak, 0.9), quantile_cont(peak, 0.99), max(peak), count(*), sum(calls)
FROM pk GROUP BY tool`, q.args(sql.Named("bucket_ms", bucketMillis(window)), sql.Named("tool", tool))...)
	if err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	defer rows.Close()
	out := map[string]*peakStats{}
	for rows.Next() {
		p := &peakStats{}
		if err := rows.Scan(&p.Tool, &p.P50, &p.P90, &p.P99, &p.Max, &p.Scopes, &p.Calls); err != nil {
			return nil, fmt.Errorf("peaks: %w", err)
		}
		out[p.Tool] = p
	}
	return out, rows.Err()
}

// loadExcluded fills the connection's temporary table of excluded runs, with
// the Appender: there can be thousands of runaway loops in a large window.
func loadExcluded(ctx context.Context, conn *sql.Conn, excluded []run) error {
	if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE excluded_runs (skh UBIGINT, tool VARCHAR, t0 TIMESTAMPTZ, t1 TIMESTAMPTZ)`); err != nil {
		return fmt.Errorf("excluded runs: %w", err)
	}
	if len(excluded) == 0 {
		return nil
	}
	err := conn.Raw(func(dc any) error {
		a, err := duckdb.NewAppender(dc.(driver.Conn), "temp", "main", "excluded_runs")
		if err != nil {
			return err
		}
		for _, r := range excluded {
			if err := a.AppendRow(r.SessionHash, r.Tool, r.First, r.Last); err != nil {
				_ = a.Close()
				return err
			}
		}
		return a.Close()
	})
	if err != nil {
		return fmt.Errorf("excluded runs: %w", err)
	}
	return nil
}

// runawayCut tells how a limit of max calls per window and scope key would
// treat the given runs: their highest per-window count, and how many of
// their calls it would refuse (every call past max in a window).
func (q query) runawayCut(ctx context.Context, scope, window string, max int, runs []run) (peak float64, refused int64, err error) {
	if len(runs) == 0 {
		return 0, 0, nil
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("runaway loops: %w", err)
	}
	defer conn.Close()
	if err := loadExcluded(ctx, conn, runs); err != nil {
		return 0, 0, err
	}
	var p sql.NullFloat64
	var r sql.NullInt64
	defer q.timed("runaway cut " + window)()
	err = conn.QueryRowContext(ctx, `
WITH c AS (
	SELECT c.tool, c.ts, `+scopeExpr(scope)+` AS k
	FROM calls c SEMI JOIN excluded_runs x ON hash(`+sessionKey+`) = x.skh AND c.tool = x.tool AND c.ts BETWEEN x.t0 AND x.t1
	WHERE `+inWindow+` AND decision IN ('allowed', 'rate_limited')
), per AS (SELECT k, epoch_ms(ts) // $bucket_ms AS w, count(*) AS n FROM c GROUP BY ALL)
SELECT max(n), sum(greatest(n - $max, 0)) FROM per`,
		q.args(sql.Named("bucket_ms", bucketMillis(window)), sql.Named("max", max))...).Scan(&p, &r)
	if err != nil {
		return 0, 0, fmt.Errorf("runaway loops: %w", err)
	}
	return p.Float64, r.Int64, nil
}

// probe is a burst of refused calls to several tools in one session.
type probe struct {
	Session, Agent string
	Tools          int64
	Calls          int64
	First, Last    time.Time
	ToolNames      []string
}

// probes finds sessions that hit at least minTools distinct refused (or
// unknown) tools within one 5-minute bucket.
func (q query) probes(ctx context.Context, minTools int, unknown []string) ([]probe, error) {
	rows, err := q.rows(ctx, "denied probes", `
WITH c AS (
	SELECT `+sessionKey+` AS sk, agent, tool, ts
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
	  AND (decision IN ('denied', 'hidden') OR list_contains($unknown, tool))
), b AS (
	SELECT sk, epoch_ms(ts) // 300000 AS w, any_value(agent) AS agent,
	       count(DISTINCT tool) AS tools, count(*) AS calls, min(ts) AS t0, max(ts) AS t1,
	       list(DISTINCT tool ORDER BY tool) AS names
	FROM c GROUP BY sk, w HAVING count(DISTINCT tool) >= $min_tools
)
SELECT sk, coalesce(agent, ''), tools, calls, t0, t1, names FROM b ORDER BY t0, sk`,
		sql.Named("min_tools", minTools), sql.Named("unknown", stringList(unknown)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []probe
	for rows.Next() {
		var p probe
		var names []any
		if err := rows.Scan(&p.Session, &p.Agent, &p.Tools, &p.Calls, &p.First, &p.Last, &names); err != nil {
			return nil, fmt.Errorf("denied probes: %w", err)
		}
		for _, n := range names {
			p.ToolNames = append(p.ToolNames, fmt.Sprint(n))
		}
		p.First, p.Last = p.First.UTC(), p.Last.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// stringList makes a value DuckDB binds as a VARCHAR[] (never empty, so the
// list has a type).
func stringList(s []string) []string {
	if len(s) == 0 {
		return []string{"\x00"}
	}
	return s
}

// refusedStats counts, per tool, refused calls and the sessions and agents
// behind them, for allow candidates and unknown tools.
type refusedStats struct {
	Tool                             string
	Calls, Refused, Sessions, Agents int64
	First, Last                      time.Time
}

func (q query) refusedByTool(ctx context.Context, exclude []string) (map[string]*refusedStats, error) {
	rows, err := q.rows(ctx, "refused calls", `
WITH refused AS (
	SELECT tool, ts, agent, `+sessionKey+` AS sk
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL AND decision <> 'allowed'
)
SELECT tool, count(*), count(*), count(DISTINCT sk), count(DISTINCT agent), min(ts), max(ts)
FROM refused WHERE NOT list_contains($exclude, sk)
GROUP BY tool`, sql.Named("exclude", stringList(exclude)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*refusedStats{}
	for rows.Next() {
		r := &refusedStats{}
		if err := rows.Scan(&r.Tool, &r.Calls, &r.Refused, &r.Sessions, &r.Agents, &r.First, &r.Last); err != nil {
			return nil, fmt.Errorf("refused calls: %w", err)
		}
		r.First, r.Last = r.First.UTC(), r.Last.UTC()
		out[r.Tool] = r
	}
	return out, rows.Err()
}
