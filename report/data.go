package report

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// Time arithmetic here goes through epoch_ms, never date_trunc on
// TIMESTAMPTZ: the ICU calendar it runs through per row is an order of
// magnitude slower.

// sessionKey is a call's session for analysis; the gateway instance stands
// in where events carry none (SPEC §5), as in the recommender.
const sessionKey = analytics.SessionKey

// inWindow selects the server's calls in (from, to].
const inWindow = `server = $server AND ts > $from AND ts <= $to`

// rate is a share rounded to 4 decimals, 0 when the denominator is 0.
func rate(num, den string) string {
	return `coalesce(round(` + num + ` / nullif(` + den + `, 0), 4), 0)::DOUBLE`
}

const (
	msPerHour = int64(time.Hour / time.Millisecond)
	msPerDay  = 24 * msPerHour
)

type querier struct {
	db     *sql.DB
	server string
	// grant, when set, keeps the calls of that grant (where q.calls()).
	grant    string
	from, to time.Time
	log      *slog.Logger // debug timings of each query; nil is quiet
}

func (q querier) args(extra ...any) []any {
	args := []any{sql.Named("server", q.server), sql.Named("from", q.from), sql.Named("to", q.to)}
	if q.grant != "" {
		args = append(args, sql.Named("grant", q.grant))
	}
	return append(args, extra...)
}

// historyArgs bind what the queries that read a tool's whole history need:
// the calls from the window's first day ($day0), and tool_days (kept by the
// store as it stores calls) for the days before it ($day0_days).
func (q querier) historyArgs() []any {
	day0, start := analytics.ToolDay(q.from)
	return []any{sql.Named("day0", start), sql.Named("day0_days", day0)}
}

// calls selects the server's calls in the window, of q.grant when set.
func (q querier) calls() string {
	if q.grant != "" {
		return inWindow + ` AND "grant" = $grant`
	}
	return inWindow
}

// timed logs how long a query took, at debug level.
func (q querier) timed(what string) func() {
	if q.log == nil {
		return func() {}
	}
	start := time.Now()
	return func() { q.log.Debug("report query", "query", what, "took", time.Since(start).Round(time.Millisecond)) }
}

func (q querier) query(ctx context.Context, what, text string, extra ...any) (*sql.Rows, error) {
	defer q.timed(what)()
	rows, err := q.db.QueryContext(ctx, text, q.args(extra...)...)
	if err != nil {
		return nil, fmt.Errorf("report: %s: %w", what, err)
	}
	return rows, nil
}

// totals reads the window's size and decisions in one scan.
func (q querier) totals(ctx context.Context) (Window, Totals, error) {
	var w Window
	var t Totals
	defer q.timed("totals")()
	err := q.db.QueryRowContext(ctx, `
SELECT count(*),
       count(DISTINCT `+sessionKey+`) FILTER (`+sessionKey+` <> ''),
       count(DISTINCT agent), count(DISTINCT tool),
       count(*) FILTER (decision = 'allowed'), count(*) FILTER (decision = 'denied'),
       count(*) FILTER (decision = 'hidden'), count(*) FILTER (decision = 'rate_limited'),
       count(*) FILTER (decision = 'approval_required'),
       count(*) FILTER (decision = 'allowed' AND status = 'error'),
       `+rate(`count(*) FILTER (decision = 'allowed' AND status = 'error')`, `count(*) FILTER (decision = 'allowed')`)+`,
       `+rate(`count(*) FILTER (decision <> 'allowed')`, `count(*)`)+`
FROM calls WHERE `+inWindow, q.args()...).Scan(&w.Calls, &w.Sessions, &w.Agents, &w.Tools,
		&t.Allowed, &t.Denied, &t.Hidden, &t.RateLimited, &t.ApprovalRequired, &t.Errors, &t.ErrorRate, &t.DenialRate)
	if err != nil {
		return w, t, fmt.Errorf("report: window totals: %w", err)
	}
	t.Calls = w.Calls
	w.From, w.To = q.from, q.to
	w.Days = float64(q.to.Sub(q.from).Round(time.Hour).Hours()) / 24
	return w, t, nil
}

// volume counts calls per bucket and decision; every bucket of the window
// is present, empty ones with zeros. A call exactly at the window's end on
// a bucket boundary counts in the bucket before, so that a window ending at
// midnight has no one-instant bucket.
func (q querier) volume(ctx context.Context) (Volume, error) {
	bucket, name := msPerDay, "day"
	if q.to.Sub(q.from) <= 48*time.Hour {
		bucket, name = msPerHour, "hour"
	}
	first := (q.from.UnixMilli() + 1) / bucket
	last := (q.to.UnixMilli() - 1) / bucket
	rows, err := q.query(ctx, "volume", `
WITH agg AS (
	SELECT least(epoch_ms(ts) // $bucket, $last) AS b, count(*) AS calls,
	       count(*) FILTER (decision = 'allowed') AS allowed, count(*) FILTER (decision = 'denied') AS denied,
	       count(*) FILTER (decision = 'hidden') AS hidden, count(*) FILTER (decision = 'rate_limited') AS rate_limited,
	       count(*) FILTER (decision = 'approval_required') AS approval,
	       count(*) FILTER (decision = 'allowed' AND status = 'error') AS errors
	FROM calls WHERE `+inWindow+`
	GROUP BY 1
)
SELECT r.range * $bucket, coalesce(calls, 0), coalesce(allowed, 0), coalesce(denied, 0), coalesce(hidden, 0),
       coalesce(rate_limited, 0), coalesce(approval, 0), coalesce(errors, 0)
FROM range($first, $last + 1) r LEFT JOIN agg ON agg.b = r.range
ORDER BY r.range`, sql.Named("bucket", bucket), sql.Named("first", first), sql.Named("last", last))
	if err != nil {
		return Volume{}, err
	}
	defer rows.Close()
	v := Volume{Bucket: name, Rows: []Bucket{}}
	for rows.Next() {
		var b Bucket
		var ms int64
		if err := rows.Scan(&ms, &b.Calls, &b.Allowed, &b.Denied, &b.Hidden, &b.RateLimited, &b.ApprovalRequired, &b.Errors); err != nil {
			return v, fmt.Errorf("report: volume: %w", err)
		}
		b.Start = time.UnixMilli(ms).UTC()
		v.Rows = append(v.Rows, b)
	}
	return v, rows.Err()
}

// tools reads every tool's use in the window with its latency percentiles
// and its first call ever: in the window, else between the window's first
// day and its start, else from tool_days before that day (so the window is
// read once). The percentiles come from one quantile_cont over a list of
// fractions: one sort of a tool's latencies instead of three (5M calls,
// through `mcptrail query`: 0.8 s instead of 1.05 s). Each tool's distinct
// sessions come from the sets tool_day_use keeps per tool and day
// (analytics.WindowUse, as the recommender counts them), not from a
// count(DISTINCT …) over the calls, which took ~0.3 s of the query's ~0.7 s
// over 5M calls.
func (q querier) tools(ctx context.Context) ([]ToolStats, error) {
	rows, err := q.query(ctx, "tools", `
WITH w AS (
	SELECT tool, count(*) AS calls, count(*) FILTER (decision = 'allowed') AS allowed,
	       count(*) FILTER (decision <> 'allowed') AS refused,
	       count(*) FILTER (decision = 'allowed' AND status = 'error') AS errors,
	       count(DISTINCT agent) AS agents,
	       quantile_cont(latency_ms, [0.50, 0.95, 0.99]) FILTER (decision = 'allowed') AS q,
	       round(max(latency_ms) FILTER (decision = 'allowed'), 1) AS mx, min(epoch_ms(ts)) AS first_ms
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
	GROUP BY tool
), f AS (
	SELECT tool, min(first_ms) AS first_ms FROM (
		SELECT tool, first_ms FROM w
		UNION ALL
		SELECT tool, min(epoch_ms(ts)) AS first_ms
		FROM calls WHERE server = $server AND ts >= $day0 AND ts <= $from AND tool IN (SELECT tool FROM w)
		GROUP BY tool
		UNION ALL
		SELECT tool, min(epoch_ms(first_call))
		FROM tool_days WHERE server = $server AND day < $day0_days AND tool IN (SELECT tool FROM w)
		GROUP BY tool)
	GROUP BY tool
)
SELECT w.tool, calls, allowed, refused, errors, `+rate("errors", "allowed")+`, `+rate("refused", "calls")+`,
       agents, round(q[1], 1), round(q[2], 1), round(q[3], 1), mx, f.first_ms
FROM w JOIN f USING (tool)
ORDER BY calls DESC, w.tool`, q.historyArgs()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []ToolStats{}
	for rows.Next() {
		var t ToolStats
		var p50, p95, p99, mx sql.NullFloat64
		var first int64
		if err := rows.Scan(&t.Tool, &t.Calls, &t.Allowed, &t.Refused, &t.Errors, &t.ErrorRate, &t.DenialRate,
			&t.Agents, &p50, &p95, &p99, &mx, &first); err != nil {
			return nil, fmt.Errorf("report: tools: %w", err)
		}
		t.P50, t.P95, t.P99, t.Max = nullFloat(p50), nullFloat(p95), nullFloat(p99), nullFloat(mx)
		t.FirstSeen = time.UnixMilli(first).UTC()
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("report: tools: %w", err)
	}
	lap := q.timed("tools' sessions")
	use, err := analytics.WindowUse(ctx, q.db, q.server, "", q.from, q.to, false)
	lap()
	if err != nil {
		return nil, fmt.Errorf("report: tools' sessions: %w", err)
	}
	for i := range out {
		if u := use[""][out[i].Tool]; u != nil {
			out[i].Sessions = u.SessionCount
		}
	}
	return out, nil
}

func nullFloat(f sql.NullFloat64) *float64 {
	if !f.Valid {
		return nil
	}
	v := f.Float64
	return &v
}

// agents reads the busiest agents.
func (q querier) agents(ctx context.Context, limit int) ([]AgentStats, error) {
	rows, err := q.query(ctx, "agents", `
SELECT coalesce(agent, '(none)') AS a, count(*) AS calls,
       count(DISTINCT `+sessionKey+`) FILTER (`+sessionKey+` <> ''), count(DISTINCT tool),
       count(*) FILTER (decision <> 'allowed'), count(*) FILTER (decision = 'allowed' AND status = 'error')
FROM calls WHERE `+inWindow+`
GROUP BY a ORDER BY calls DESC, a LIMIT $limit`, sql.Named("limit", limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []AgentStats{}
	for rows.Next() {
		var a AgentStats
		if err := rows.Scan(&a.Agent, &a.Calls, &a.Sessions, &a.Tools, &a.Refused, &a.Errors); err != nil {
			return nil, fmt.Errorf("report: agents: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// hourByTool counts the busiest tools' calls per UTC hour of the day.
func (q querier) hourByTool(ctx context.Context, limit int) (HourMatrix, error) {
	rows, err := q.query(ctx, "hour of day by tool", `
WITH top AS (
	SELECT tool, count(*) AS n FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
	GROUP BY tool ORDER BY n DESC, tool LIMIT $limit
)
SELECT c.tool, (epoch_ms(c.ts) // $hour) % 24 AS h, count(*), any_value(top.n) AS total
FROM calls c JOIN top USING (tool)
WHERE c.server = $server AND c.ts > $from AND c.ts <= $to
GROUP BY c.tool, h
ORDER BY total DESC, c.tool, h`, sql.Named("limit", limit), sql.Named("hour", msPerHour))
	if err != nil {
		return HourMatrix{}, err
	}
	defer rows.Close()
	m := HourMatrix{Tools: []string{}, Counts: [][24]int64{}}
	index := map[string]int{}
	for rows.Next() {
		var tool string
		var h, n, total int64
		if err := rows.Scan(&tool, &h, &n, &total); err != nil {
			return m, fmt.Errorf("report: hour of day by tool: %w", err)
		}
		i, ok := index[tool]
		if !ok {
			i = len(m.Tools)
			index[tool] = i
			m.Tools = append(m.Tools, tool)
			m.Counts = append(m.Counts, [24]int64{})
		}
		m.Counts[i][h] = n
	}
	return m, rows.Err()
}

// Servers lists the servers with calls in (from, to], by name, from the
// pool the calls are read from (the store's, or one that reads the
// archived days too).
func Servers(ctx context.Context, db *sql.DB, from, to time.Time) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT server FROM calls WHERE ts > $from AND ts <= $to ORDER BY server`,
		sql.Named("from", from), sql.Named("to", to))
	if err != nil {
		return nil, fmt.Errorf("report: servers: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("report: servers: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// lastAccess reads, for every tool and grant, the last allowed call up to
// the window's end (the whole history, as IAM's last-accessed data reads
// it: from tool_days before the window's first day) and the window's
// allowed and refused calls. Catalog tools that no
// grant ever called come with an empty grant and no last access.
func (q querier) lastAccess(ctx context.Context) ([]LastAccess, error) {
	rows, err := q.query(ctx, "last access", `
WITH u AS (
	SELECT tool, g, max(last_ms) AS last_ms, max(last_refused_ms) AS last_refused_ms,
	       sum(allowed)::BIGINT AS allowed, sum(refused)::BIGINT AS refused
	FROM (
		SELECT tool, coalesce("grant", '(none)') AS g,
		       max(epoch_ms(ts)) FILTER (decision = 'allowed') AS last_ms,
		       max(epoch_ms(ts)) FILTER (decision <> 'allowed') AS last_refused_ms,
		       count(*) FILTER (decision = 'allowed' AND ts > $from) AS allowed,
		       count(*) FILTER (decision <> 'allowed' AND ts > $from) AS refused
		FROM calls WHERE server = $server AND ts >= $day0 AND ts <= $to AND tool IS NOT NULL
		GROUP BY ALL
		UNION ALL
		SELECT tool, CASE WHEN "grant" = '' THEN '(none)' ELSE "grant" END,
		       max(epoch_ms(last_allowed)), max(epoch_ms(last_refused)), 0, 0
		FROM tool_days WHERE server = $server AND day < $day0_days
		GROUP BY ALL)
	GROUP BY tool, g
)
SELECT tool, g, last_ms, last_refused_ms, allowed, refused FROM u
UNION ALL
SELECT DISTINCT tool, '', NULL::BIGINT, NULL::BIGINT, 0, 0 FROM tools
WHERE server = $server AND tool NOT IN (SELECT tool FROM u)
ORDER BY tool, g`, q.historyArgs()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []LastAccess{}
	for rows.Next() {
		var la LastAccess
		var last, refused sql.NullInt64
		if err := rows.Scan(&la.Tool, &la.Grant, &last, &refused, &la.Allowed, &la.Refused); err != nil {
			return nil, fmt.Errorf("report: last access: %w", err)
		}
		la.LastAllowed, la.LastRefused = nullTime(last), nullTime(refused)
		out = append(out, la)
	}
	return out, rows.Err()
}

func nullTime(ms sql.NullInt64) *time.Time {
	if !ms.Valid {
		return nil
	}
	t := time.UnixMilli(ms.Int64).UTC()
	return &t
}

// agentTools counts the busiest agents' calls of the busiest tools, and how
// many of them were refused: the window's calls counted once per agent and
// tool, the busiest of each taken from those counts (the calls read once
// instead of three times: 5M calls, 0.47 s against 0.10 s).
func (q querier) agentTools(ctx context.Context, agents, tools int) (AgentToolMatrix, error) {
	m := AgentToolMatrix{Agents: []string{}, Tools: []string{}, Calls: [][]int64{}, Refused: [][]int64{}}
	rows, err := q.query(ctx, "agents by tool", `
WITH c AS (
	SELECT coalesce(agent, '(none)') AS a, tool, count(*) AS n, count(*) FILTER (decision <> 'allowed') AS refused
	FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
	GROUP BY ALL
), ta AS (
	SELECT a, sum(n)::BIGINT AS n FROM c GROUP BY a ORDER BY n DESC, a LIMIT $agents
), tt AS (
	SELECT tool, sum(n)::BIGINT AS n FROM c GROUP BY tool ORDER BY n DESC, tool LIMIT $tools
)
SELECT c.a, c.tool, c.n, c.refused, ta.n AS an, tt.n AS tn
FROM c JOIN ta USING (a) JOIN tt USING (tool)
ORDER BY an DESC, c.a, tn DESC, c.tool`, sql.Named("agents", agents), sql.Named("tools", tools))
	if err != nil {
		return m, err
	}
	defer rows.Close()
	type cellv struct {
		agent, tool    string
		calls, refused int64
	}
	var cells []cellv
	toolTotal := map[string]int64{}
	agentIndex := map[string]int{}
	for rows.Next() {
		var c cellv
		var an, tn int64
		if err := rows.Scan(&c.agent, &c.tool, &c.calls, &c.refused, &an, &tn); err != nil {
			return m, fmt.Errorf("report: agents by tool: %w", err)
		}
		if _, ok := agentIndex[c.agent]; !ok {
			agentIndex[c.agent] = len(m.Agents)
			m.Agents = append(m.Agents, c.agent)
		}
		toolTotal[c.tool] = tn
		cells = append(cells, c)
	}
	if err := rows.Err(); err != nil {
		return m, err
	}
	m.Tools = byCount(toolTotal)
	toolIndex := map[string]int{}
	for i, t := range m.Tools {
		toolIndex[t] = i
	}
	for range m.Agents {
		m.Calls = append(m.Calls, make([]int64, len(m.Tools)))
		m.Refused = append(m.Refused, make([]int64, len(m.Tools)))
	}
	for _, c := range cells {
		i, j := agentIndex[c.agent], toolIndex[c.tool]
		m.Calls[i][j], m.Refused[i][j] = c.calls, c.refused
	}
	return m, nil
}

// limitPeaks measures each proposed limit in its own unit: the calls of
// its tool per window per scope value that the policy's other rules let
// through (allowed or rate-limited, as the recommender counts them), each
// scope value's peak, and how many windows and calls go over the limit.
// The limits are grouped by scope and window, one query each.
func (q querier) limitPeaks(ctx context.Context, limits []LimitPeak) error {
	type unit struct{ scope, window string }
	groups := map[unit][]int{}
	var units []unit
	for i, l := range limits {
		u := unit{l.Limit.Scope, l.Limit.Window}
		if _, ok := groups[u]; !ok {
			units = append(units, u)
		}
		groups[u] = append(groups[u], i)
	}
	for _, u := range units {
		var tools []string
		var maxes []int64
		byTool := map[string]*LimitPeak{}
		for _, i := range groups[u] {
			tools = append(tools, limits[i].Tool)
			maxes = append(maxes, int64(limits[i].Limit.Max))
			byTool[limits[i].Tool] = &limits[i]
		}
		if err := q.limitPeaksOf(ctx, u.scope, u.window, tools, maxes, byTool); err != nil {
			return err
		}
	}
	return nil
}

// limitPeaksOf measures the limits of one scope and window: the tools'
// calls grouped per scope key and window (on the tool's hash: grouping on
// integers alone is a third cheaper than with the name), then per key (its
// peak and its windows over the limit) in the same pass, then per tool and
// peak; the percentiles are read off those few rows (the peak at rank
// ⌈n·q⌉ of a tool's n keys, as quantile_disc gives it) instead of sorting
// every key's peak, and no step reads the windows twice.
func (q querier) limitPeaksOf(ctx context.Context, scope, window string, tools []string, maxes []int64, byTool map[string]*LimitPeak) error {
	rows, err := q.query(ctx, "limits against peaks", `
WITH given AS (
	SELECT unnest($tools::VARCHAR[]) AS tool, unnest($maxes::BIGINT[]) AS mx
), lim AS (
	SELECT tool, hash(tool) AS th, mx FROM given
), per AS (
	SELECT hash(tool) AS th, `+recommend.ScopeKeySQL(scope)+` AS k, epoch_ms(ts) // $bucket AS w, count(*) AS n
	FROM calls WHERE `+q.calls()+` AND tool IN (SELECT tool FROM lim) AND decision IN ('allowed', 'rate_limited')
	GROUP BY ALL
), pk AS (
	SELECT th, k, max(n) AS peak, count(*) AS windows, count(*) FILTER (n > mx) AS over,
	       coalesce(sum(n - mx) FILTER (n > mx), 0) AS excess
	FROM per JOIN lim USING (th) GROUP BY th, k
), h AS MATERIALIZED (
	SELECT tool, mx, peak, count(*) AS n, sum(windows) AS windows, sum(over) AS over, sum(excess) AS excess
	FROM pk JOIN lim USING (th) GROUP BY ALL
), c AS (
	SELECT *, sum(n) OVER (PARTITION BY tool ORDER BY peak) AS upto, sum(n) OVER (PARTITION BY tool) AS scopes
	FROM h
), ps AS (
	SELECT tool, any_value(scopes) AS scopes, coalesce(sum(n) FILTER (peak > mx), 0) AS scopes_over,
	       min(peak) FILTER (upto >= greatest(ceil(scopes * 0.5), 1)) AS p50,
	       min(peak) FILTER (upto >= greatest(ceil(scopes * 0.99), 1)) AS p99,
	       max(peak) AS mxp, sum(windows) AS windows, sum(over) AS over, sum(excess) AS excess
	FROM c GROUP BY tool
)
SELECT h.tool, h.peak, h.n, ps.scopes, ps.scopes_over, round(ps.p50, 1), round(ps.p99, 1), ps.mxp, ps.windows, ps.over, ps.excess
FROM h JOIN ps USING (tool)
ORDER BY h.tool, h.peak`, sql.Named("tools", tools), sql.Named("maxes", maxes), sql.Named("bucket", policy.WindowLength(window).Milliseconds()))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var tool string
		var pc PeakCount
		var s LimitPeak
		if err := rows.Scan(&tool, &pc.Peak, &pc.Scopes, &s.Scopes, &s.ScopesOver, &s.PeakP50, &s.PeakP99, &s.PeakMax,
			&s.Windows, &s.WindowsOver, &s.CallsOver); err != nil {
			return fmt.Errorf("report: limits against peaks: %w", err)
		}
		l := byTool[tool]
		if l == nil {
			continue
		}
		l.Scopes, l.ScopesOver, l.PeakP50, l.PeakP99, l.PeakMax = s.Scopes, s.ScopesOver, s.PeakP50, s.PeakP99, s.PeakMax
		l.Windows, l.WindowsOver, l.CallsOver = s.Windows, s.WindowsOver, s.CallsOver
		l.Histogram = append(l.Histogram, pc)
	}
	return rows.Err()
}
