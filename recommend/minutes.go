package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

// callMinutes are a scope's calls in its window summed up per tool and
// session scope key (a protocol session, or the grant for calls without
// one: analytics.CountedSession) from
// their minutes: the busiest minute's allowed and rate-limited calls
// (peak), those calls in all (calls) and the busiest minute's calls of any
// decision (peak_all). Two steps of a recommendation read them: the
// rate-limit peaks per session and minute (detectRateLimits) and the
// replay's buckets over a per-session, per-minute limit (overflow), which
// only the keys whose busiest minute is over the limit can have. The days
// Recluster counted come from session_peaks (a row per tool, day and
// session), the rest of the window from grouping its calls by tool,
// session and minute (temporary tables on one connection: session_edge,
// and session_merged where a key has several rows), the costly part
// (millions of groups) session_peaks saves.
type callMinutes struct {
	conn  *sql.Conn
	scope query // the scope and window the tables count
	built bool
	// days are the counted days read from session_peaks (PeakDays).
	days []int64
	// peaks are every tool's peaks, read by the first build: the rate
	// limits and each polled tool ask for theirs, each read cost a pass
	// over the scope's rows of session_peaks.
	peaks map[string]*peakStats
}

// openCallMinutes holds a connection for q's scope's call minutes; close
// releases it.
func openCallMinutes(ctx context.Context, q query) (*callMinutes, error) {
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("call minutes: %w", err)
	}
	return &callMinutes{conn: conn, scope: q}, nil
}

func (m *callMinutes) close() {
	if m.built {
		_, _ = m.conn.ExecContext(context.Background(), `DROP TABLE IF EXISTS session_edge; DROP TABLE IF EXISTS session_merged;
DROP TABLE IF EXISTS minute_hot; DROP TABLE IF EXISTS poll_hot`)
	}
	_ = m.conn.Close()
}

// covers says whether the table counts q's scope and window.
func (m *callMinutes) covers(q query) bool {
	return m != nil && m.built && m.scope.server == q.server && m.scope.grant == q.grant &&
		m.scope.from.Equal(q.from) && m.scope.to.Equal(q.to)
}

// build counts the scope's window and returns the peaks of tools, read
// from the days session_peaks lists (PeakDays) and the calls of the
// window's other parts (session_edge). A row alone in session_peaks is its
// key's only one, unless the calls read hold the key too (unseenKey): the
// rows of those keys and the others not alone are merged by key
// (session_merged); the rest are read as they are, each time for what it
// is needed: the tools' peaks here (every tool's at the first call), as
// counts of keys per peak (an aggregate over a few groups instead of
// quantiles over every key), and the keys over a limit per session and
// minute in the replay (fillOverflowBuckets), which reads these tables
// again rather than have every key with two calls in a minute kept for it.
func (m *callMinutes) build(ctx context.Context, names map[uint64]string, tools []string) (map[string]*peakStats, error) {
	if !m.built {
		if err := m.count(ctx, false); err != nil {
			return nil, err
		}
	}
	if m.peaks == nil {
		stored := storedRows(m.days)
		rows, err := m.conn.QueryContext(ctx, `
SELECT hash(tool), peak, count(*), sum(calls) FROM (
	SELECT tool, peak, calls FROM session_peaks WHERE `+stored+` AND alone AND `+unseenKey+`
	UNION ALL
	SELECT tool, peak, calls FROM session_merged
) WHERE calls > 0
GROUP BY ALL`, m.storedArgs()...)
		if err != nil {
			return nil, fmt.Errorf("peaks: %w", err)
		}
		if m.peaks, err = scanPeakCounts(rows, names); err != nil {
			return nil, err
		}
	}
	out := make(map[string]*peakStats, len(tools))
	for _, t := range tools {
		if st := m.peaks[t]; st != nil {
			out[t] = st
		}
	}
	return out, nil
}

// count builds the tables of the scope's window (session_edge and
// session_merged, see build) and keeps the days session_peaks counts; with
// onlyCounted, only when it counts some (else m stays unbuilt): without
// them the tables are the whole window's calls grouped by session and
// minute, what the replay's plain path groups anyway.
func (m *callMinutes) count(ctx context.Context, onlyCounted bool) error {
	q := m.scope
	days, err := analytics.PeakDays(ctx, m.conn, q.server, q.grant, q.from, q.to)
	if err != nil {
		return err
	}
	if onlyCounted && len(days) == 0 {
		return nil
	}
	// session_merged takes the rows alone whose key the calls read hold
	// too by a join on session_edge: as a predicate beside NOT alone, the
	// key's NOT IN was a mark join over every row of the scope (~2× the
	// time over ops-bot's 640,000 rows of 5M calls).
	// Both keep each key's first and last day with calls (d0, d1), which
	// bound the calls of the keys over a limit the replay reads.
	edge := []string{`SELECT NULL::VARCHAR AS tool, NULL::VARCHAR AS s, NULL::VARCHAR AS g, 0::BIGINT AS peak, 0::BIGINT AS calls, 0::BIGINT AS peak_all,
	0::BIGINT AS d0, 0::BIGINT AS d1 WHERE false`}
	parts, partArgs := outsideParts(q.from, q.to, days)
	args := append(q.args(), partArgs...)
	for _, part := range parts {
		edge = append(edge, `SELECT tool, s, g, max(n), sum(n), max(n_all), min(w) // 1440, max(w) // 1440 FROM (`+
			analytics.SessionMinutesSQL(inScope+` AND `+part)+
			`) GROUP BY tool, s, g`)
	}
	stored := storedRows(days)
	steps := []struct{ what, sql string }{
		{"session_edge", `CREATE OR REPLACE TEMP TABLE session_edge AS ` + strings.Join(edge, "\nUNION ALL\n")},
		{"session_merged", `CREATE OR REPLACE TEMP TABLE session_merged AS
WITH d AS (
	SELECT tool, s, g, peak, calls, peak_all, d0, d1 FROM session_edge
	UNION ALL
	SELECT tool, session, "grant", peak, calls, peak_all, day, day FROM session_peaks
	WHERE ` + stored + ` AND NOT alone
	UNION ALL
	SELECT tool, session, "grant", peak, calls, peak_all, day, day
	FROM session_peaks SEMI JOIN session_edge e ON e.tool = session_peaks.tool AND e.s = session_peaks.session
	WHERE ` + stored + ` AND alone
)
SELECT tool, coalesce(s, '') AS s, g,
       max(peak) AS peak, sum(calls) AS calls, max(peak_all) AS peak_all, min(d0) AS d0, max(d1) AS d1
FROM d GROUP BY ALL`},
	}
	for _, st := range steps {
		if _, err := m.conn.ExecContext(ctx, st.sql, withDays(args, days)...); err != nil {
			return fmt.Errorf("session peaks: %s: %w", st.what, err)
		}
	}
	m.built, m.days = true, days
	return nil
}

// storedRows admits the rows of session_peaks of the scope's counted days
// (none without days; with them, their bounds are arguments: withDays).
func storedRows(days []int64) string {
	if len(days) == 0 {
		return `false`
	}
	return inScope + ` AND ` + listedDays(days)
}

// unseenKey admits the rows of session_peaks whose tool and session the
// calls outside its days (session_edge) do not hold.
const unseenKey = `(tool, session) NOT IN (SELECT (tool, s) FROM session_edge WHERE s IS NOT NULL)`

// listedDays admits the rows of an aggregate (its day column) of the days
// given, as ranges of consecutive days, the i-th bounded by the parameters
// $dlo<i> and $dhi<i> (withDays): the counted days of a window are nearly
// always one range, and a range reads session_peaks' rows of one grant
// over 5M calls in 11–18 ms, against 23–31 ms for the days as a list
// joined to the rows (day IN (SELECT unnest(...))).
func listedDays(days []int64) string {
	ranges := dayRanges(days)
	if len(ranges) == 0 {
		return `false`
	}
	terms := make([]string, len(ranges))
	for i := range ranges {
		terms[i] = fmt.Sprintf(`day BETWEEN $dlo%d AND $dhi%d`, i, i)
	}
	return `(` + strings.Join(terms, ` OR `) + `)`
}

// dayRanges are the days given as ranges of consecutive days, [first,
// last] each, in order.
func dayRanges(days []int64) [][2]int64 {
	sorted := slices.Sorted(slices.Values(days))
	var out [][2]int64
	for _, d := range sorted {
		if n := len(out); n > 0 && d <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], d)
			continue
		}
		out = append(out, [2]int64{d, d})
	}
	return out
}

// outsideParts are the window's parts outside the days given (outsideDays)
// as predicates on the calls' ts, the i-th bounded by the parameters
// $lo<i> and $hi<i>, with the named arguments of those bounds.
func outsideParts(from, to time.Time, days []int64) (parts []string, args []any) {
	for i, r := range outsideDays(from, to, days) {
		lo, hi := fmt.Sprintf("lo%d", i), fmt.Sprintf("hi%d", i)
		parts = append(parts, `ts > $`+lo+` AND ts <= $`+hi)
		args = append(args, sql.Named(lo, r[0]), sql.Named(hi, r[1]))
	}
	return parts, args
}

// withDays adds the bounds of the days' ranges (listedDays) when there
// are days: a statement without them refuses them.
func withDays(args []any, days []int64) []any {
	out := args[:len(args):len(args)]
	for i, r := range dayRanges(days) {
		out = append(out, sql.Named(fmt.Sprintf("dlo%d", i), r[0]), sql.Named(fmt.Sprintf("dhi%d", i), r[1]))
	}
	return out
}

// outsideDays are the parts of the window (from, to] outside the days
// given (sorted, each wholly inside it), as (lo, hi] pairs.
func outsideDays(from, to time.Time, days []int64) [][2]time.Time {
	var out [][2]time.Time
	at := from
	for _, d := range days {
		start := analytics.DayStart(d)
		if before := start.Add(-time.Microsecond); before.After(at) {
			out = append(out, [2]time.Time{at, before})
		}
		at = start.Add(24*time.Hour - time.Microsecond)
	}
	if to.After(at) {
		out = append(out, [2]time.Time{at, to})
	}
	return out
}

// sessionPeaks is query.peaks for the session scope and the minute window:
// per tool, the percentiles of its session keys' busiest minutes, over the
// keys with an allowed or rate-limited call; it leaves its tables for the
// replay.
func (m *callMinutes) sessionPeaks(ctx context.Context, names map[uint64]string, tools []string) (map[string]*peakStats, error) {
	defer m.scope.timed("peaks session minute")()
	out, err := m.build(ctx, names, tools)
	if err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	return out, nil
}

// pollWindows are a polled tool's minutes without runaway loops, as
// query.pollPeaks counts them, from the call minutes instead of every call
// of the tool: its peaks per session key and minute (the tables count the
// same calls, allowed and rate-limited, under the same keys), and, for a
// limit of lim calls, its minutes over it by how many calls they hold
// (windowBuckets.Normal, which holds no other minute: a limit's cut counts
// those alone), read from the calls of the keys whose busiest minute is
// over lim (poll_hot) on their days (hotCalls). Nil stats: the tool has no
// such call in the window.
func (m *callMinutes) pollWindows(ctx context.Context, names map[uint64]string, tool string, limit func(*peakStats) int) (*peakStats, windowBuckets, error) {
	b := windowBuckets{Runaway: bucketCounts{}, Normal: bucketCounts{}}
	stats, err := m.build(ctx, names, []string{tool})
	if err != nil || stats[tool] == nil {
		return nil, b, err
	}
	defer m.scope.timed("peaks " + tool + " from minutes")()
	lim := limit(stats[tool])
	if _, err := m.conn.ExecContext(ctx, `
CREATE OR REPLACE TEMP TABLE poll_hot AS
SELECT session AS h_s, "grant" AS h_g, day AS d0, day AS d1 FROM session_peaks
WHERE `+storedRows(m.days)+` AND tool = $tool AND alone AND peak > $lim AND `+unseenKey+`
UNION ALL
SELECT s, g, d0, d1 FROM session_merged WHERE tool = $tool AND peak > $lim`,
		append(m.storedArgs(), sql.Named("tool", tool), sql.Named("lim", lim))...); err != nil {
		return nil, b, fmt.Errorf("peaks: %w", err)
	}
	calls, args, err := m.hotCalls(ctx, "poll_hot")
	if err != nil || calls == "" {
		return stats[tool], b, err
	}
	rows, err := m.conn.QueryContext(ctx, `
WITH per AS (
	SELECT `+sessionScopeKey+` AS k, epoch_ms(ts) // 60000 AS w, count(*) AS n
	FROM `+calls+` SEMI JOIN poll_hot ON `+hotKey+`
	WHERE `+inWindow+` AND tool = $tool AND decision IN ('allowed', 'rate_limited')
	GROUP BY ALL
)
SELECT n, count(*) FROM per WHERE n > $lim GROUP BY n`,
		append(args, sql.Named("tool", tool), sql.Named("lim", lim))...)
	if err != nil {
		return nil, b, fmt.Errorf("peaks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, count int64
		if err := rows.Scan(&n, &count); err != nil {
			return nil, b, fmt.Errorf("peaks: %w", err)
		}
		b.Normal[n] = count
	}
	if err := rows.Err(); err != nil {
		return nil, b, fmt.Errorf("peaks: %w", err)
	}
	return stats[tool], b, nil
}

// hotKey matches a call to a session key of the call minutes (h_s, h_g:
// session_merged's s and g, or an alone row's session and grant): its
// counted session (analytics.CountedSession; empty for none) under its
// grant.
const hotKey = `coalesce(` + analytics.CountedSession + `, '') = h_s AND coalesce(calls."grant", '') = h_g`

// hotCalls are the calls on the days of the session keys in table (a
// temporary table of keys over a limit with their first and last days, d0
// and d1), as a FROM item named calls, with its arguments and the scope's:
// each run of consecutive days is one scan of the calls between two
// constant instants, which skips the rest of the window by the calls'
// times (a predicate of several ranges joined by OR skips nothing). Over
// 5M calls, ops-bot's one key over its limits was otherwise looked for
// among the ~1M calls of its 24 tools limited per minute, 55–80 ms a run.
// Empty without a key.
func (m *callMinutes) hotCalls(ctx context.Context, table string) (string, []any, error) {
	days, err := analytics.QueryColumn[int64](ctx, m.conn, `SELECT DISTINCT unnest(range(d0, d1 + 1)) AS d FROM `+table+` ORDER BY d`)
	if err != nil {
		return "", nil, fmt.Errorf("days of the keys over a limit: %w", err)
	}
	args := m.scope.args()
	var scans []string
	for i, r := range dayRanges(days) {
		lo, hi := fmt.Sprintf("hlo%d", i), fmt.Sprintf("hhi%d", i)
		scans = append(scans, `SELECT * FROM calls WHERE ts >= $`+lo+` AND ts < $`+hi)
		args = append(args, sql.Named(lo, analytics.DayStart(r[0])), sql.Named(hi, analytics.DayStart(r[1]+1)))
	}
	if len(scans) == 0 {
		return "", args, nil
	}
	return `(` + strings.Join(scans, "\nUNION ALL\n") + `) calls`, args, nil
}

// fillOverflowBuckets fills overflow_buckets (see query.overflow) on m's
// connection, which holds replay_limits: the buckets of every limit per
// session and minute of at least one call from the calls of the tools and
// session keys whose busiest minute (of any decision) is over it
// (minute_hot: the alone rows of session_peaks' counted days and
// session_merged, as build read them) on those keys' days (hotCalls), the
// others' from all the calls.
func (m *callMinutes) fillOverflowBuckets(ctx context.Context) error {
	if _, err := m.conn.ExecContext(ctx, `
CREATE OR REPLACE TEMP TABLE minute_hot AS
WITH per_minute AS (
	SELECT * FROM replay_limits WHERE `+fromMinutes+`
)
SELECT tool AS h_tool, session AS h_s, "grant" AS h_g, day AS d0, day AS d1 FROM session_peaks JOIN per_minute ON tool = limit_tool
WHERE `+storedRows(m.days)+` AND alone AND peak_all > lim AND `+unseenKey+`
UNION ALL
SELECT tool, s, g, d0, d1 FROM session_merged JOIN per_minute ON tool = limit_tool WHERE peak_all > lim`,
		m.storedArgs()...); err != nil {
		return fmt.Errorf("keys over a limit: %w", err)
	}
	calls, args, err := m.hotCalls(ctx, "minute_hot")
	if err != nil {
		return err
	}
	text := `
CREATE OR REPLACE TEMP TABLE overflow_buckets AS
SELECT lid AS b_lid, ` + limitKeyExpr + ` AS b_k, epoch_ms(ts) // bucket_ms AS b_w, any_value(lim) AS b_lim, ` + bucketFigures + `
FROM calls JOIN replay_limits ON tool = limit_tool
WHERE ` + inWindow + ` AND NOT (` + fromMinutes + `)
GROUP BY ALL HAVING count(*) > any_value(lim)`
	if calls != "" {
		text += `
UNION ALL
SELECT lid, ` + limitKeyExpr + `, epoch_ms(ts) // bucket_ms, any_value(lim), ` + bucketFigures + `
FROM ` + calls + ` JOIN replay_limits ON calls.tool = limit_tool
SEMI JOIN minute_hot ON calls.tool = h_tool AND ` + hotKey + `
WHERE ` + inWindow + ` AND ` + fromMinutes + `
GROUP BY ALL HAVING count(*) > any_value(lim)`
	}
	if _, err := m.conn.ExecContext(ctx, text, args...); err != nil {
		return fmt.Errorf("buckets over a limit: %w", err)
	}
	return nil
}

// storedArgs are the arguments of a statement over the built tables and
// the counted days' rows (storedRows): the scope's and the days.
func (m *callMinutes) storedArgs() []any { return withDays(m.scope.args(), m.days) }

// fromMinutes are the limits per session and minute: their buckets are
// looked for among the session keys over them (fillOverflowBuckets).
const fromMinutes = `limit_scope = 'session' AND bucket_ms = 60000 AND lim >= 1`
