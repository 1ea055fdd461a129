package recommend

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
)

// Time arithmetic in these queries goes through epoch_ms: subtracting
// TIMESTAMPTZ values or truncating them runs through ICU's calendar per row,
// which measured an order of magnitude slower.

// sessionKey is the SQL expression of a call's session for analysis: where
// events carry no session (Intercept writes none), the gateway instance
// stands in for it (SPEC §5).
const sessionKey = analytics.SessionKey

// sessionID identifies a session in sets that detectors and the replay share
// (runaway sessions, affected sessions): the hash of the session key, as text.
const sessionID = `hash(` + sessionKey + `)::VARCHAR`

// inScope selects the calls (or aggregate rows) of the analysis scope: its
// server, and its grant unless that is "" (every grant).
const inScope = `server = $server AND ($grant = '' OR "grant" = $grant)`

// inWindow is the WHERE clause shared by every detector.
const inWindow = inScope + ` AND ts > $from AND ts <= $to`

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

// figures are a scope's window figures: its calls, sessions, agents and
// active days, and its allowed calls and the sessions with one (what a
// tool's share of use is measured against).
type figures struct {
	window          Window
	activeDays      int
	allowed         int64
	allowedSessions int64
}

// figuresSQL counts the window's figures of q's scope, by grant ("" for
// the calls without one) and in total (the first column is true for the
// total row, which is there even without calls), in scanFigures' order
// after those two columns: the days grant_days lists (analytics.FigureDays,
// admitted by listedDays) from its rows, the rest of the window
// (parts, predicates on ts: outsideParts) from the calls. Sessions, agents
// and days are counted by their hash (as everywhere here) over the calls
// grouped by session, agent and day first (e): a session nearly always
// keeps one agent and one day, so the grouping holds barely more rows than
// sessions, and a grouping is several times cheaper in DuckDB than distinct
// counts over every call (measured over 5M calls: ~0.4 s against ~0.65 s
// for the sessions). The sessions, from those groups and the listed days'
// hashes, are told apart by a grouping too (s), per grant and then across
// grants for the total: four distinct counts over the ~320,000 session rows
// of 5M calls took 0.29 s, the groupings 0.13 s in all.
func figuresSQL(parts []string, days []int64) string {
	edge := `false`
	if len(parts) > 0 {
		edge = `(` + strings.Join(parts, `) OR (`) + `)`
	}
	listed := listedDays(days)
	return `
WITH e AS MATERIALIZED (
	SELECT coalesce("grant", '') AS g, hash(` + sessionKey + `) AS skh, ` + sessionKey + ` <> '' AS has_s,
	       agent, epoch_ms(ts) // 86400000 AS day, count(*) AS n,
	       count(*) FILTER (session_source = 'event') AS event, count(*) FILTER (session_source = 'conversation') AS conversation,
	       count(*) FILTER (session_source = 'trace') AS trace, count(*) FILTER (session_source = 'derived') AS derived,
	       count(*) FILTER (session_source = 'gateway') AS gateway, count(*) FILTER (decision = 'allowed') AS allowed
	FROM calls WHERE ` + inScope + ` AND (` + edge + `)
	GROUP BY g, skh, has_s, agent, day
), d AS MATERIALIZED (
	SELECT * FROM grant_days WHERE ` + inScope + ` AND ` + listed + `
), c AS (
	SELECT g, agent, day, n, event, conversation, trace, derived, gateway, allowed FROM e
	UNION ALL SELECT "grant", NULL, day, calls, event, conversation, trace, derived, gateway, allowed FROM d
	UNION ALL SELECT "grant", unnest(agents), day, 0, 0, 0, 0, 0, 0, 0 FROM d
), s AS MATERIALIZED (
	SELECT g, skh, bool_or(a) AS a FROM (
		SELECT g, skh, allowed > 0 AS a FROM e WHERE has_s
		UNION ALL SELECT "grant", unnest(sessions), false FROM d
		UNION ALL SELECT "grant", unnest(allowed_sessions), true FROM d)
	GROUP BY g, skh
), counted AS (
	SELECT GROUPING(g) = 1 AS total, coalesce(g, '') AS g, coalesce(sum(n), 0)::BIGINT AS n,
	       count(DISTINCT agent) AS agents, count(DISTINCT day) AS active_days,
	       coalesce(sum(event), 0)::BIGINT AS event, coalesce(sum(conversation), 0)::BIGINT AS conversation,
	       coalesce(sum(trace), 0)::BIGINT AS trace, coalesce(sum(derived), 0)::BIGINT AS derived,
	       coalesce(sum(gateway), 0)::BIGINT AS gateway, coalesce(sum(allowed), 0)::BIGINT AS allowed
	FROM c GROUP BY GROUPING SETS ((g), ())
), sessions AS (
	SELECT false AS total, g, count(*) AS sessions, count(*) FILTER (a) AS allowed_sessions FROM s GROUP BY g
	UNION ALL
	SELECT true, '', count(*), count(*) FILTER (a) FROM (SELECT skh, bool_or(a) AS a FROM s GROUP BY skh)
)
SELECT c.total, c.g, c.n, coalesce(s.sessions, 0), c.agents, c.active_days, c.event, c.conversation,
       c.trace, c.derived, c.gateway, c.allowed, coalesce(s.allowed_sessions, 0)
FROM counted c LEFT JOIN sessions s ON c.total = s.total AND c.g = s.g
ORDER BY c.total, c.g`
}

// scanFigures reads figuresSQL's columns, after those given first.
func scanFigures(row interface{ Scan(...any) error }, f *figures, first ...any) error {
	w := &f.window
	return row.Scan(append(first, &w.Calls, &w.Sessions, &w.Agents, &f.activeDays,
		&w.SessionSources.Event, &w.SessionSources.Conversation, &w.SessionSources.Trace, &w.SessionSources.Derived,
		&w.SessionSources.Gateway, &f.allowed, &f.allowedSessions)...)
}

// scopeFigures are the scope's window figures: the counts given (every
// grant's, counted in one pass by grantFigures), else counted now in one
// pass over the scope's calls; with the window's dates.
func (q query) scopeFigures(ctx context.Context, given *figures) (figures, error) {
	f := given
	if f == nil {
		_, all, _, _, err := grantFigures(ctx, q)
		if err != nil {
			return figures{}, err
		}
		f = all
	}
	out := *f
	return out, q.dates(ctx, &out.window)
}

// dates sets w's window, its days and the days its history covers. The
// first call only tells whether history starts inside the window: any
// call before the window's first day says it does not, and the first one
// found ends that scan, so that its cost does not grow with the history.
func (q query) dates(ctx context.Context, w *Window) error {
	var first sql.NullTime
	_, day0 := analytics.ToolDay(q.from)
	// The scope's first call is nearly always on the window's first day:
	// looked for there (its row groups alone) before the rest of the
	// window, whose earliest call took a scan of the scope's every call
	// (~10 ms warm for a grant of 5M calls, and once more for the server).
	day1 := day0.Add(24 * time.Hour)
	err := q.db.QueryRowContext(ctx, `
SELECT coalesce((SELECT ts FROM calls WHERE `+inScope+` AND ts < $day0 LIMIT 1),
                (SELECT min(ts) FROM calls WHERE `+inScope+` AND ts >= $day0 AND ts < $day1 AND ts <= $to))`,
		q.args(sql.Named("day0", day0), sql.Named("day1", day1))...).Scan(&first)
	if err == nil && !first.Valid && q.to.Compare(day1) >= 0 {
		err = q.db.QueryRowContext(ctx, `SELECT min(ts) FROM calls WHERE `+inScope+` AND ts >= $day1 AND ts <= $to`,
			q.args(sql.Named("day1", day1))...).Scan(&first)
	}
	if err != nil {
		return fmt.Errorf("window statistics: %w", err)
	}
	w.From, w.To = q.from, q.to
	w.Days = int(q.to.Sub(q.from).Round(time.Hour).Hours() / 24)
	w.HistoryDays = w.Days
	if first.Valid && first.Time.After(q.from) {
		// History starts inside the window: "not used in the last 30 days"
		// would claim days nobody watched.
		w.HistoryDays = min(int(math.Ceil(q.to.Sub(first.Time).Hours()/24)), w.Days)
	}
	return nil
}

// toolNames maps DuckDB's hash of each tool name to the name. The ordered
// and grouped work carries tools as these hashes: integers sort and group
// several times faster than the strings they stand for.
func (q query) toolNames(ctx context.Context, tools []string) (map[uint64]string, error) {
	rows, err := q.db.QueryContext(ctx, `SELECT t, hash(t) FROM unnest($tools::VARCHAR[]) u(t)`, sql.Named("tools", stringList(tools)))
	if err != nil {
		return nil, fmt.Errorf("tool names: %w", err)
	}
	defer rows.Close()
	names := map[uint64]string{}
	for rows.Next() {
		var name string
		var h uint64
		if err := rows.Scan(&name, &h); err != nil {
			return nil, fmt.Errorf("tool names: %w", err)
		}
		names[h] = name
	}
	return names, rows.Err()
}

// run is a maximal sequence, within one session, of consecutive calls of one
// tool with the same arguments, each within the polling interval of the
// previous one. Polling loops and retry storms are runs.
//
// A large window holds hundreds of thousands of runs per grant, so a run
// keeps no string of its own and its times as integers: 128 bytes, where a
// session string and two time.Time made it 192 (and one allocation each).
type run struct {
	SessionHash     uint64 // DuckDB's hash of the session key; session() is the sessionID
	Tool            string
	StartTool       string  // the call just before the run ("" at a session's start)
	StartGap        float64 // seconds from that call to the run's first call
	Polls           int64
	SpanS           float64 // seconds from the first to the last call of the run
	MeanGap         float64
	SDGap           float64
	MedianGap       float64
	Errors          int64
	FirstMS, LastMS int64 // epoch milliseconds of the run's first and last call
	LastErr         bool  // the run's last call failed upstream
}

// session is the run's sessionID: its session hash in decimal.
func (r *run) session() string { return strconv.FormatUint(r.SessionHash, 10) }

func (r *run) first() time.Time { return time.UnixMilli(r.FirstMS).UTC() }
func (r *run) last() time.Time  { return time.UnixMilli(r.LastMS).UTC() }

// runs finds every run of at least minCalls calls: from the runs the store
// keeps (storedruns.go) where they give this window's, else by the
// sequence work (LAG over each session's calls in time order) in DuckDB;
// only the runs, far fewer than the calls, come back. names maps tool
// hashes back to the tools (toolNames).
func (q query) runs(ctx context.Context, names map[uint64]string, minCalls int, maxInterval time.Duration) (runList, error) {
	stored, later, err := q.storedRunsUsable(ctx, minCalls, maxInterval)
	if err != nil {
		return nil, err
	}
	if stored {
		cutTo, err := q.crossingEnd(ctx)
		if err != nil {
			return nil, err
		}
		return q.readRuns(ctx, names, storedRunsSQL(minCalls, later), sql.Named("cut_to", cutTo))
	}
	return q.readRuns(ctx, names, scanRunsSQL(minCalls, maxInterval))
}

// scanRunsSQL finds the window's runs in its calls, for readRuns, in no
// order (as storedRunsSQL).
func scanRunsSQL(minCalls int, maxInterval time.Duration) string {
	return `
WITH ` + runsSQL(inWindow, minCalls, maxInterval) + `
SELECT skh, th, prev_th, start_gap, polls, span_s, mean_gap, sd_gap, median_gap, errors, last_err, t0, t1
FROM runs`
}

// runColumns are the kinds of a query of runs' columns (scanRunsSQL's,
// storedRunsSQL's): skh, th, prev_th, start_gap, polls, span_s, mean_gap,
// sd_gap, median_gap, errors, last_err, t0, t1.
var runColumns = []analytics.ColumnKind{analytics.Uint64Column, analytics.Uint64Column, analytics.Uint64Column,
	analytics.Float64Column, analytics.Int64Column, analytics.Float64Column, analytics.Float64Column, analytics.Float64Column,
	analytics.Float64Column, analytics.Int64Column, analytics.BoolColumn, analytics.Int64Column, analytics.Int64Column}

// runList is a window's runs as read, a slice per result chunk: copied
// into one slice, ops-bot's ~80,000 runs of 5M calls (10 MB) cost 33–70
// ms in page faults and collection, as much as reading them.
type runList [][]run

// all yields every run.
func (l runList) all() iter.Seq[*run] {
	return func(yield func(*run) bool) {
		for _, c := range l {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}

// readRuns runs a query of runs (scanRunsSQL, storedRunsSQL), which come
// in no order: the detectors need none (ordering the ~80,000 runs of each
// of the two busiest grants of 5M calls cost ~30 ms of a ~60 ms read). A
// window can hold hundreds of thousands of runs a grant: they are read a
// result chunk at a time, each column as one slice (analytics.ScanChunks;
// row by row through database/sql, reading them took longer than the
// query, ~160 ms for each of the two busiest grants of 5M calls).
func (q query) readRuns(ctx context.Context, names map[uint64]string, text string, extra ...any) (runList, error) {
	defer q.timed("call sequences")()
	var runs runList
	err := analytics.ScanChunks(ctx, q.db, text, q.args(extra...), runColumns, func(c *analytics.Chunk) error {
		skh, th, prev := c.Uint64(0), c.Uint64(1), c.Uint64(2)
		startGap, polls, span, mean, sd, median := c.Float64(3), c.Int64(4), c.Float64(5), c.Float64(6), c.Float64(7), c.Float64(8)
		errs, lastErr, t0, t1 := c.Int64(9), c.Bool(10), c.Int64(11), c.Int64(12)
		rs := make([]run, c.Len())
		for i := range rs {
			rs[i] = run{SessionHash: skh[i], Tool: names[th[i]], StartTool: names[prev[i]], StartGap: startGap[i], Polls: polls[i],
				SpanS: span[i], MeanGap: mean[i], SDGap: sd[i], MedianGap: median[i], Errors: errs[i], LastErr: lastErr[i],
				FirstMS: t0[i], LastMS: t1[i]}
		}
		runs = append(runs, rs)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("call sequences: %w", err)
	}
	return runs, nil
}

// runsSQL is the common table expressions that end in runs: every run of at
// least minCalls calls among the calls that where selects, one row per run
// (session hash skh, tool hash th, the hash of the tool called just before
// prev_th and the gap to it, polls, span, gaps, errors, first and last
// epoch milliseconds t0, t1). The detectors and the evidence SQL that
// reproduces their numbers share this text.
func runsSQL(where string, minCalls int, maxInterval time.Duration) string {
	maxGap, minN := strconv.FormatInt(maxInterval.Milliseconds(), 10), strconv.Itoa(minCalls)
	// One sort of the window's calls (LAG and LEAD share it) marks each call
	// that continues the previous one (cont) or is continued by the next
	// (cont_next). A call with neither is a run of one: most calls are, so
	// only the rest goes through the second pass that numbers the runs
	// (a running count of run starts) and the aggregates.
	return `c AS (
	SELECT hash(` + sessionKey + `) AS skh, hash(tool) AS th, hash(args_hash) AS hh, args_hash IS NULL AS no_args,
	       status = 'error' AS err, epoch_ms(ts) AS ms
	FROM calls WHERE ` + where + ` AND tool IS NOT NULL
), s AS (
	SELECT skh, th, hh, err, ms, lag(th) OVER w AS prev_th, ms - lag(ms) OVER w AS gap,
	       coalesce(th = lag(th) OVER w AND NOT no_args AND hh = lag(hh) OVER w
	                AND ms - lag(ms) OVER w <= ` + maxGap + `, false) AS cont,
	       coalesce(th = lead(th) OVER w AND NOT lead(no_args) OVER w AND hh = lead(hh) OVER w
	                AND lead(ms) OVER w - ms <= ` + maxGap + `, false) AS cont_next
	FROM c WINDOW w AS (PARTITION BY skh ORDER BY ms, th, hh)
), r AS (
	SELECT *, sum((NOT cont)::INTEGER) OVER (PARTITION BY skh ORDER BY ms, th, hh ROWS UNBOUNDED PRECEDING) AS run_no
	FROM s WHERE ` + minN + ` <= 1 OR cont OR cont_next
), runs AS (
	SELECT skh, any_value(th) AS th, coalesce(any_value(prev_th) FILTER (NOT cont), 0) AS prev_th,
	       coalesce(any_value(gap) FILTER (NOT cont), 0) / 1000.0 AS start_gap,
	       count(*) AS polls, (max(ms) - min(ms)) / 1000.0 AS span_s,
	       coalesce(avg(gap) FILTER (cont), 0) / 1000.0 AS mean_gap, coalesce(stddev_pop(gap) FILTER (cont), 0) / 1000.0 AS sd_gap,
	       coalesce(median(gap) FILTER (cont), 0) / 1000.0 AS median_gap,
	       count(*) FILTER (err) AS errors, coalesce(arg_max(err, ms), false) AS last_err, min(ms) AS t0, max(ms) AS t1
	FROM r
	GROUP BY skh, run_no HAVING count(*) >= ` + minN + `
)`
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

// ScopeKeySQL is the SQL counter key of a limit's scope over the calls,
// mirroring the policy evaluator (SPEC §4): a call without the scope's key
// counts under its grant, and under the empty grant when that is missing
// too; a session is the event's own (analytics.CountedSession), since a
// gateway knows no conversation, trace or derived session, and a session or
// agent is counted within its grant, to which a policy is attached. Keys
// are hashed (with the scope's letter, so that a session named like a
// grant stays apart): they are only grouped on, and grouping on integers
// is much cheaper than on strings (the report's limits against
// their peaks, ops-bot's limits over 5M calls: 255–264 ms against 367–397
// ms with a string built per call). The report measures its limits by it.
func ScopeKeySQL(scope string) string {
	switch scope {
	case policy.ScopeSession:
		return sessionScopeKey
	case policy.ScopeAgent:
		return agentScopeKey
	case policy.ScopeInstance: // a gateway's state store (intercept.go)
		return `CASE WHEN coalesce(gateway, '') <> '' THEN hash('i', gateway) ELSE ` + grantScopeKey + ` END`
	}
	return grantScopeKey
}

// The counter keys of ScopeKeySQL's scopes.
const (
	grantScopeKey   = `hash('g', coalesce("grant", ''))`
	sessionScopeKey = `CASE WHEN ` + analytics.HasCountedSession + ` THEN hash('s', coalesce("grant", ''), session) ELSE ` + grantScopeKey + ` END`
	agentScopeKey   = `CASE WHEN coalesce(agent, '') <> '' THEN hash('a', coalesce("grant", ''), agent) ELSE ` + grantScopeKey + ` END`
)

// peaks computes per-tool percentiles of per-scope peak counts per window
// over the calls that pass the policy's other rules (allowed or rate-limited),
// of those that consume the scope's quota (consumesQuota).
// tools are the tools to measure; names maps tool hashes back to the tools
// (toolNames).
func (q query) peaks(ctx context.Context, names map[uint64]string, tools []string, scope, window string) (map[string]*peakStats, error) {
	// A key whose calls took no quota (each answered with an error
	// Intercept gives back) is left out, as the polled tools' peaks leave
	// it, unless no key of the tool took any. Only a scope whose counter
	// gives quota back has such keys: the others skip the filter.
	keys := ``
	if givesQuotaBack(scope) {
		keys = `WHERE peak > 0 OR th NOT IN (SELECT th FROM pk WHERE peak > 0)`
	}
	rows, err := q.rows(ctx, "peaks "+scope+" "+window, `
WITH c AS (
	SELECT hash(tool) AS th, epoch_ms(ts) // $bucket_ms AS w, `+ScopeKeySQL(scope)+` AS k, `+consumesQuota(scope)+` AS consumes
	FROM calls WHERE `+inWindow+` AND tool IN (SELECT unnest($tools::VARCHAR[])) AND decision IN ('allowed', 'rate_limited')
), per AS (
	SELECT th, k, w, count(*) FILTER (consumes) AS n, count(*) AS all_n FROM c GROUP BY ALL
), pk AS (
	SELECT th, k, max(n) AS peak, sum(all_n) AS calls FROM per GROUP BY ALL
)
SELECT th, peak, count(*), sum(calls) FROM pk `+keys+` GROUP BY ALL`, sql.Named("bucket_ms", policy.WindowLength(window).Milliseconds()), sql.Named("tools", stringList(tools)))
	if err != nil {
		return nil, err
	}
	return scanPeakCounts(rows, names)
}

// peakCount is how many scope keys of a tool (keys) peak at peak calls per
// window, and the calls those keys made (calls).
type peakCount struct{ peak, keys, calls int64 }

// scanPeakCounts reads rows of (tool hash, peak, keys, calls), every
// peak's keys of a tool, into the tool's peakStats (and closes them).
func scanPeakCounts(rows *sql.Rows, names map[uint64]string) (map[string]*peakStats, error) {
	defer rows.Close()
	counts := map[string][]peakCount{}
	for rows.Next() {
		var th uint64
		var c peakCount
		if err := rows.Scan(&th, &c.peak, &c.keys, &c.calls); err != nil {
			return nil, fmt.Errorf("peaks: %w", err)
		}
		tool, ok := names[th]
		if !ok {
			return nil, fmt.Errorf("peaks: a tool of the window is missing from its usage")
		}
		counts[tool] = append(counts[tool], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	out := map[string]*peakStats{}
	for tool, cs := range counts {
		out[tool] = peakStatsOf(tool, cs)
	}
	return out, nil
}

// peakStatsOf is a tool's peakStats from the counts of its keys per peak
// (at least one): the percentiles as DuckDB's quantile_disc gives them over
// the keys' peaks.
func peakStatsOf(tool string, cs []peakCount) *peakStats {
	p := &peakStats{Tool: tool}
	for _, c := range cs {
		p.Scopes += c.keys
		p.Calls += c.calls
	}
	slices.SortFunc(cs, func(a, b peakCount) int { return cmp.Compare(a.peak, b.peak) })
	p.Max = float64(cs[len(cs)-1].peak)
	for _, pq := range []struct {
		v *float64
		q float64
	}{{&p.P50, 0.5}, {&p.P90, 0.9}, {&p.P99, 0.99}} {
		rank := max(int64(math.Ceil(float64(p.Scopes)*pq.q)), 1)
		for _, c := range cs {
			if rank <= c.keys {
				*pq.v = float64(c.peak)
				break
			}
			rank -= c.keys
		}
	}
	return p
}

// pollPeaks is peaks for one polled tool and several windows, leaving out
// the calls inside its runaway loops; for each window it also returns those
// loops' calls per window and scope key (runawayBuckets), to size the cut.
//
// The tool's calls are counted once per minute and scope key, inside and
// outside runaway loops, in one pass: a call is inside a loop when it falls
// in the span of one of its session's loops, and the spans (excluded_runs)
// are disjoint, so a LEFT JOIN on them keeps each call once (a second pass
// over the calls for those inside, as a SEMI JOIN, cost ~35 ms more of
// ops-bot's 650,000 polls over 5M calls). The scope keys go by their hash,
// as sessions do everywhere here: grouping ops-bot's 650,000 polls by a
// 64-bit key took 38–43 ms warm against 50–54 ms by the key's string.
// Every window rolls up from those minutes (hours and days are whole
// minutes since the epoch) in Go (pollWindow): ops-bot's ~70,000 minutes
// rolled up by three queries over a temporary table of them took 27–74 ms.
func (q query) pollPeaks(ctx context.Context, tool, scope string, windows []string, runaway []run) (map[string]*peakStats, map[string]windowBuckets, error) {
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("peaks: %w", err)
	}
	defer conn.Close()
	if err := loadExcluded(ctx, conn, runaway); err != nil {
		return nil, nil, err
	}
	defer q.timed("peaks " + tool)()
	var minutes []pollMinute
	err = analytics.ScanConnChunks(ctx, conn, `
WITH c AS (
	SELECT hash(`+ScopeKeySQL(scope)+`) AS k, hash(`+sessionKey+`) AS skh, epoch_ms(ts) AS ms, `+consumesQuota(scope)+` AS consumes
	FROM calls WHERE `+inWindow+` AND tool = $tool AND decision IN ('allowed', 'rate_limited')
)
SELECT k, ms // 60000 AS m, count(*) FILTER (x.skh IS NULL AND consumes) AS n, count(*) FILTER (x.skh IS NOT NULL AND consumes) AS n_loop
FROM c LEFT JOIN (SELECT * FROM excluded_runs WHERE tool = $tool) x ON x.skh = c.skh AND c.ms BETWEEN x.t0 AND x.t1
GROUP BY ALL`, q.args(sql.Named("tool", tool)), pollMinuteColumns, func(c *analytics.Chunk) error {
		k, m, n, nLoop := c.Uint64(0), c.Int64(1), c.Int64(2), c.Int64(3)
		for i := range c.Len() {
			minutes = append(minutes, pollMinute{k: k[i], m: m[i], n: n[i], nLoop: nLoop[i]})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("peaks: %w", err)
	}
	slices.SortFunc(minutes, func(a, b pollMinute) int { return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.m, b.m)) })
	stats := map[string]*peakStats{}
	cuts := map[string]windowBuckets{}
	for _, window := range windows {
		st, b := pollWindow(tool, minutes, int64(policy.WindowLength(window)/time.Minute))
		if st == nil {
			continue
		}
		stats[window], cuts[window] = st, b
	}
	return stats, cuts, nil
}

// pollMinute is a polled tool's calls under one scope key (its hash k) in
// one minute since the epoch (m): outside its runaway loops (n) and inside
// them (nLoop).
type pollMinute struct {
	k        uint64
	m        int64
	n, nLoop int64
}

var pollMinuteColumns = []analytics.ColumnKind{analytics.Uint64Column, analytics.Int64Column, analytics.Int64Column, analytics.Int64Column}

// pollWindow rolls a polled tool's minutes (sorted by key, then minute) up
// into windows of length minutes: the peaks of the calls outside runaway
// loops (nil without any), and the windows per scope key by how many calls
// they hold, outside loops and inside. A window with no call left outside
// loops is no peak. A window is the minutes whose number divided by length
// (truncated, as DuckDB's // divides) is the same: consecutive minutes of
// a key.
func pollWindow(tool string, minutes []pollMinute, length int64) (*peakStats, windowBuckets) {
	b := windowBuckets{Runaway: bucketCounts{}, Normal: bucketCounts{}}
	byPeak := map[int64]*peakCount{}
	for i := 0; i < len(minutes); {
		k := minutes[i].k
		var peak, calls int64
		for i < len(minutes) && minutes[i].k == k {
			w := minutes[i].m / length
			var n, nLoop int64
			for ; i < len(minutes) && minutes[i].k == k && minutes[i].m/length == w; i++ {
				n += minutes[i].n
				nLoop += minutes[i].nLoop
			}
			if n > 0 {
				b.Normal[n]++
				peak = max(peak, n)
				calls += n
			}
			if nLoop > 0 {
				b.Runaway[nLoop]++
			}
		}
		if calls > 0 {
			c := byPeak[peak]
			if c == nil {
				c = &peakCount{peak: peak}
				byPeak[peak] = c
			}
			c.keys++
			c.calls += calls
		}
	}
	if len(byPeak) == 0 {
		return nil, b
	}
	peaks := make([]peakCount, 0, len(byPeak))
	for _, c := range byPeak {
		peaks = append(peaks, *c)
	}
	return peakStatsOf(tool, peaks), b
}

// bucketCounts counts the windows (per scope key) of some calls by how many
// calls they hold.
type bucketCounts map[int64]int64

// windowBuckets are a polled tool's windows per scope key, of its runaway
// loops' calls and of its other calls, to size a limit's cut.
type windowBuckets struct{ Runaway, Normal bucketCounts }

// cut tells how a limit of max calls per window and scope key would treat
// these calls: their highest per-window count, and how many of them it
// would refuse (every call past max in a window).
func (b bucketCounts) cut(max int) (peak float64, refused int64) {
	for n, count := range b {
		peak = math.Max(peak, float64(n))
		if n > int64(max) {
			refused += (n - int64(max)) * count
		}
	}
	return peak, refused
}

// loadExcluded fills the connection's temporary table of excluded runs, with
// the Appender: there can be thousands of runaway loops in a large window.
// Its rows are the spans the runs cover, merged per session and tool where
// they overlap (two runs of one session can share the millisecond where one
// ends and the next begins), so that a call falls in at most one row: a
// LEFT JOIN on them keeps each call once (pollPeaks, refusedIn), as the
// SEMI JOINs do.
func loadExcluded(ctx context.Context, conn *sql.Conn, excluded []run) error {
	if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE excluded_runs (skh UBIGINT, tool VARCHAR, t0 BIGINT, t1 BIGINT)`); err != nil {
		return fmt.Errorf("excluded runs: %w", err)
	}
	spans := excludedSpans(excluded)
	if len(spans) == 0 {
		return nil
	}
	err := analytics.AppendRows(conn, "temp", "excluded_runs", spans, func(r *run) []driver.Value {
		return []driver.Value{r.SessionHash, r.Tool, r.FirstMS, r.LastMS}
	}, func(r *run) string { return "run of " + r.Tool })
	if err != nil {
		return fmt.Errorf("excluded runs: %w", err)
	}
	return nil
}

// excludedSpans are the spans (session hash, tool, first and last
// millisecond, both inclusive) that runs cover, sorted, those of one
// session and tool that overlap merged into one.
func excludedSpans(runs []run) []run {
	spans := make([]run, len(runs))
	for i, r := range runs {
		spans[i] = run{SessionHash: r.SessionHash, Tool: r.Tool, FirstMS: r.FirstMS, LastMS: r.LastMS}
	}
	slices.SortFunc(spans, func(a, b run) int {
		return cmp.Or(cmp.Compare(a.SessionHash, b.SessionHash), cmp.Compare(a.Tool, b.Tool), cmp.Compare(a.FirstMS, b.FirstMS))
	})
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && out[n-1].SessionHash == s.SessionHash && out[n-1].Tool == s.Tool && s.FirstMS <= out[n-1].LastMS {
			out[n-1].LastMS = max(out[n-1].LastMS, s.LastMS)
			continue
		}
		out = append(out, s)
	}
	return out
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
// behind them, for allow candidates.
type refusedStats struct {
	Tool                             string
	Calls, Refused, Sessions, Agents int64
	First, Last                      time.Time
}

// refusedByTool counts the refused calls of tools outside the sessions
// given (exclude: probing sessions), by tool.
func (q query) refusedByTool(ctx context.Context, tools, exclude []string) (map[string]*refusedStats, error) {
	rows, err := q.rows(ctx, "refused calls", `
WITH refused AS (
	SELECT tool, ts, agent, `+sessionKey+` AS sk
	FROM calls WHERE `+inWindow+` AND list_contains($tools, tool) AND decision <> 'allowed'
)
SELECT tool, count(*), count(*), count(DISTINCT sk) FILTER (sk <> ''), count(DISTINCT agent), min(ts), max(ts)
FROM refused WHERE NOT list_contains($exclude, sk)
GROUP BY tool`, sql.Named("tools", stringList(tools)), sql.Named("exclude", stringList(exclude)))
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
