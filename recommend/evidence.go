package recommend

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/mcptrail/mcptrail/policy"
)

// Every finding carries, as evidence.sql, one SELECT that reproduces its
// numbers from the calls table: a reviewer runs it with `mcptrail query
// --sql` and gets one row whose columns are named like the evidence keys.
// The scope (server, grant, window) is written into it as literals; the
// sequence and peak work reuses the detectors' own SQL text (runsSQL,
// ScopeKeySQL, sessionKey), so that the two cannot drift apart.

// sqlString is s as a SQL string literal. Control and bidirectional
// characters are spliced in with chr(), so that the query stays one
// readable text in any document and still names the value exactly.
func sqlString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\'':
			b.WriteString("''")
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, "' || chr(%d) || '", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sqlTime is t as a TIMESTAMPTZ literal, to the microsecond.
func sqlTime(t time.Time) string {
	return "TIMESTAMPTZ '" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'"
}

// sqlList is a VARCHAR[] literal.
func sqlList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = sqlString(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]::VARCHAR[]"
}

func sqlFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// scopeLit selects the analysis scope's calls: the server and, under a
// grant, the grant.
func (q query) scopeLit() string {
	s := "server = " + sqlString(q.server)
	if q.grant != "" {
		s += ` AND "grant" = ` + sqlString(q.grant)
	}
	return s
}

// windowLit is inWindow with literals.
func (q query) windowLit() string {
	return q.scopeLit() + " AND ts > " + sqlTime(q.from) + " AND ts <= " + sqlTime(q.to)
}

// toolLit adds one tool to a scope.
func toolLit(where, tool string) string { return where + " AND tool = " + sqlString(tool) }

// usageSQL is the one-row answer for a tool's use: the window's counts and
// the last allowed call ever (up to the window's end).
func (s *state) usageSQL(tool string, cols ...string) string {
	from := sqlTime(s.q.from)
	expr := map[string]string{
		"calls":           "count(*) FILTER (ts > " + from + ")",
		"allowed":         "count(*) FILTER (ts > " + from + " AND decision = 'allowed')",
		"allowed_calls":   "count(*) FILTER (ts > " + from + " AND decision = 'allowed')",
		"refused":         "count(*) FILTER (ts > " + from + " AND decision <> 'allowed')",
		"denied_attempts": "count(*) FILTER (ts > " + from + " AND decision <> 'allowed')",
		"sessions":        "count(DISTINCT " + sessionKey + ") FILTER (ts > " + from + " AND " + sessionKey + " <> '')",
		"last_called":     "max(ts) FILTER (decision = 'allowed')",
		"earlier_periods_used": "count(DISTINCT (epoch_ms(" + from + ") - epoch_ms(ts)) // " +
			strconv.FormatInt(s.p.Window.Milliseconds(), 10) + ") FILTER (ts <= " + from + " AND decision = 'allowed')",
		"days_covered": fmt.Sprintf("CASE WHEN min(ts) > %s THEN least(ceil((epoch_ms(%s) - epoch_ms(min(ts))) / 86400000.0), %d) ELSE %d END",
			from, sqlTime(s.q.to), s.window.Days, s.window.Days),
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = expr[c] + " AS " + c
	}
	// days_covered is of the scope's history, the rest of the tool's.
	if len(cols) > 0 && cols[len(cols)-1] == "days_covered" {
		return "WITH h AS (SELECT * FROM calls WHERE " + s.q.scopeLit() + " AND ts <= " + sqlTime(s.q.to) + ")\n" +
			"SELECT " + strings.Join(sel[:len(sel)-1], ",\n       ") + ",\n       (SELECT " + sel[len(sel)-1] + " FROM h) AS days_covered\n" +
			"FROM h WHERE tool = " + sqlString(tool)
	}
	return "SELECT " + strings.Join(sel, ",\n       ") + "\nFROM calls WHERE " + toolLit(s.q.scopeLit(), tool) + " AND ts <= " + sqlTime(s.q.to)
}

// riskySQL reproduces a risky tool's rarity: its allowed calls, days and
// sessions, and its share of the scope's sessions with an allowed call.
func (s *state) riskySQL(tool string) string {
	t, sk := sqlString(tool), sessionKey
	used := "tool = " + t + " AND decision = 'allowed'"
	return `SELECT count(*) FILTER (` + used + `) AS allowed_calls,
       count(DISTINCT epoch_ms(ts) // 86400000) FILTER (` + used + `) AS allowed_days,
       count(DISTINCT ` + sk + `) FILTER (` + used + ` AND ` + sk + ` <> '') AS sessions,
       count(DISTINCT ` + sk + `) FILTER (decision = 'allowed' AND ` + sk + ` <> '') AS scope_sessions,
       count(DISTINCT ` + sk + `) FILTER (` + used + ` AND ` + sk + ` <> '')
         / nullif(count(DISTINCT ` + sk + `) FILTER (decision = 'allowed' AND ` + sk + ` <> ''), 0) AS session_share
FROM calls WHERE ` + s.q.windowLit()
}

// rateLimitSQL reproduces a derived limit: each scope value's peak calls
// per window of the calls that passed the other rules, their percentiles,
// and the limit ceil(p99 × headroom) with the floor.
func (s *state) rateLimitSQL(tool, scope, window string) string {
	where := toolLit(s.q.windowLit(), tool)
	return `WITH per AS (
	SELECT ` + ScopeKeySQL(scope) + ` AS scope_key, epoch_ms(ts) // ` + strconv.FormatInt(policy.WindowLength(window).Milliseconds(), 10) + ` AS w, count(*) AS n
	FROM calls WHERE ` + where + ` AND decision IN ('allowed', 'rate_limited') GROUP BY ALL
), peaks AS (
	SELECT scope_key, max(n) AS peak FROM per GROUP BY scope_key
)
SELECT quantile_disc(peak, 0.5) AS p50, quantile_disc(peak, 0.9) AS p90, quantile_disc(peak, 0.99) AS p99,
       max(peak) AS max, count(*) AS scopes,
       greatest(ceil(quantile_disc(peak, 0.99) * ` + sqlFloat(s.p.Headroom) + ` - 1e-9), ` + strconv.Itoa(s.p.MinLimit) + `) AS recommended,
       (SELECT count(DISTINCT ` + sessionKey + `) FILTER (decision = 'allowed' AND ` + sessionKey + ` <> '') FROM calls WHERE ` + where + `) AS sessions,
       (SELECT count(*) FROM calls WHERE ` + where + ` AND decision = 'rate_limited') AS rate_limited_calls
FROM peaks`
}

// lowerRank is the SQL of quantile (detect.go) over the values of x.
func lowerRank(x string, q float64) string {
	return "list_sort(list(" + x + "))[floor(" + sqlFloat(q) + " * (count(*) - 1) + 1e-9)::BIGINT + 1]"
}

// loopSQL reproduces a polling loop finding: the runs of the polled tool
// right after the start tool that are loops (not retry storms, regular
// enough), their statistics, the runaway ones, and the limit's peaks with
// the runaway loops' calls left out (limit nil: no limit was sized).
func (s *state) loopSQL(k loopPair, limit *policy.Limit) string {
	cv := "CASE WHEN mean_gap <= 0 THEN 0 ELSE sd_gap / mean_gap END"
	b := &strings.Builder{}
	fmt.Fprintf(b, `WITH %s, loops AS (
	SELECT *, %s AS cv FROM runs
	WHERE th = hash(%s) AND prev_th = hash(%s) AND NOT (errors * 2 >= polls AND last_err)
	  AND start_gap <= %s AND %s <= %s
), st AS (
	SELECT count(*) AS loops, count(DISTINCT skh) AS sessions,
	       %s AS median_polls, %s AS p95_polls,
	       round(%s, 2) AS median_interval_s, round(%s, 3) AS interval_cv,
	       sum(greatest(polls - (ceil(log2(span_s / greatest(median_gap, 1) + 1)) + 1), 0)) AS wasted_calls
	FROM loops
), runaway AS (
	SELECT loops.* FROM loops, st WHERE loops.polls > %s * st.p95_polls
)`, runsSQL(s.q.windowLit(), s.p.PollMinCalls, s.p.PollMaxInterval), cv, sqlString(k.tool), sqlString(k.start),
		sqlFloat(s.p.PollMaxInterval.Seconds()), cv, sqlFloat(s.p.PollMaxCV),
		lowerRank("polls", 0.5), lowerRank("polls", 0.95), lowerRank("median_gap", 0.5), lowerRank("cv", 0.5),
		sqlFloat(s.p.RunawayFactor))
	runaway := `(SELECT count(*) FROM runaway) AS runaway_loops, (SELECT count(DISTINCT skh) FROM runaway) AS runaway_sessions,
       round(` + sqlFloat(s.p.RunawayFactor) + ` * p95_polls, 1) AS runaway_threshold_polls,
       (SELECT max(polls) FROM runaway) AS longest_loop_polls, (SELECT sum(polls) FROM runaway) AS runaway_polls`
	if limit == nil {
		fmt.Fprintf(b, "\nSELECT st.*, %s\nFROM st", runaway)
		return b.String()
	}
	fmt.Fprintf(b, `, m AS (
	SELECT %s AS scope_key, epoch_ms(ts) // 60000 AS minute,
	       EXISTS (SELECT 1 FROM runaway x WHERE x.skh = hash(%s) AND epoch_ms(calls.ts) BETWEEN x.t0 AND x.t1) AS in_loop
	FROM calls WHERE %s AND decision IN ('allowed', 'rate_limited')
), per AS (
	SELECT scope_key, minute // %d AS w, count(*) FILTER (NOT in_loop) AS n, count(*) FILTER (in_loop) AS n_loop
	FROM m GROUP BY ALL
), peaks AS (
	SELECT scope_key, max(n) AS peak FROM per WHERE n > 0 GROUP BY scope_key
)
SELECT st.*, %s,
       (SELECT quantile_disc(peak, 0.5) FROM peaks) AS p50, (SELECT quantile_disc(peak, 0.9) FROM peaks) AS p90,
       (SELECT quantile_disc(peak, 0.99) FROM peaks) AS p99, (SELECT max(peak) FROM peaks) AS max,
       (SELECT max(n_loop) FROM per WHERE n_loop > 0) AS runaway_peak,
       (SELECT sum(greatest(n_loop - %d, 0)) FROM per WHERE n_loop > 0) AS runaway_polls_refused,
       (SELECT sum(greatest(n - %d, 0)) FROM per WHERE n > 0) AS normal_polls_refused
FROM st`, ScopeKeySQL(limit.EffectiveScope()), sessionKey, toolLit(s.q.windowLit(), k.tool),
		int64(policy.WindowLength(limit.Window)/time.Minute), runaway, limit.Max, limit.Max)
	return b.String()
}

// stormSQL reproduces a retry storm: the tool's runs that are mostly
// errors and end in one.
func (s *state) stormSQL(tool string) string {
	return "WITH " + runsSQL(s.q.windowLit(), s.p.PollMinCalls, s.p.PollMaxInterval) + `
SELECT count(*) AS storms, sum(polls) AS calls, count(DISTINCT skh) AS sessions, max(polls) AS max_repeats,
       epoch_ms(min(t0)) AS first, epoch_ms(max(t1)) AS last
FROM runs WHERE th = hash(` + sqlString(tool) + `) AND errors * 2 >= polls AND last_err`
}

// probeSQL reproduces a denied probe: the 5-minute buckets in which one
// session hit at least minTools refused or unknown tools, for one agent
// (or, for calls without one, one session).
func (s *state) probeSQL(who string, minTools int, unknown []string) string {
	return `WITH c AS (
	SELECT ` + sessionKey + ` AS sk, agent, tool, ts
	FROM calls WHERE ` + s.q.windowLit() + ` AND tool IS NOT NULL
	  AND (decision IN ('denied', 'hidden') OR list_contains(` + sqlList(unknown) + `, tool))
), b AS (
	SELECT sk, epoch_ms(ts) // 300000 AS w, any_value(agent) AS agent,
	       count(DISTINCT tool) AS tools, count(*) AS calls, min(ts) AS t0, max(ts) AS t1,
	       list(DISTINCT tool ORDER BY tool) AS names
	FROM c GROUP BY sk, w HAVING count(DISTINCT tool) >= ` + strconv.Itoa(minTools) + `
)
SELECT count(DISTINCT sk) AS sessions, count(*) AS bursts, sum(calls) AS calls,
       list_sort(list_distinct(flatten(list(names)))) AS tools, min(t0) AS first, max(t1) AS last
FROM b WHERE CASE WHEN coalesce(agent, '') <> '' THEN agent ELSE sk END = ` + sqlString(who)
}

// allowCandidateSQL reproduces an allow candidate: the tool's refused
// calls outside the sessions of denied probes.
func (s *state) allowCandidateSQL(tool string, probeSessions []string) string {
	return `SELECT count(*) AS refused, count(DISTINCT ` + sessionKey + `) FILTER (` + sessionKey + ` <> '') AS sessions,
       count(DISTINCT agent) AS agents, min(ts) AS first, max(ts) AS last
FROM calls WHERE ` + toolLit(s.q.windowLit(), tool) + ` AND decision <> 'allowed'
  AND NOT list_contains(` + sqlList(probeSessions) + `, ` + sessionKey + `)`
}

// looseningSQL shows what the gateway decided on the tool in the window:
// a loosening's newly_allowed are at most refused_then (all of them when
// the proposal allows the tool with no limit or condition).
func (s *state) looseningSQL(tool string) string {
	return `SELECT count(*) FILTER (decision = 'allowed') AS allowed_then, count(*) FILTER (decision <> 'allowed') AS refused_then,
       count(*) FILTER (decision = 'denied') AS denied, count(*) FILTER (decision = 'hidden') AS hidden,
       count(*) FILTER (decision = 'approval_required') AS approval_required,
       count(*) FILTER (decision = 'rate_limited') AS rate_limited
FROM calls WHERE ` + toolLit(s.q.windowLit(), tool)
}
