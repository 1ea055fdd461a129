package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

// usage is one tool's use: in the window, and over the whole history.
type usage struct {
	Tool            string
	Calls           int64      // any decision, in the window
	Allowed         int64      // allowed calls in the window
	AllowedDays     int64      // distinct days with an allowed call in the window
	Refused         int64      // calls not allowed in the window
	Sessions        int64      // sessions with a call of the tool in the window, any decision
	AllowedSessions int64      // sessions with an allowed call of the tool in the window
	WithSession     int64      // calls in the window whose session the gateway can count (session_source event)
	WithAgent       int64      // calls in the window that carry an agent
	Denied          int64      // calls denied in the window
	Hidden          int64      // calls refused as hidden in the window
	RateLimited     int64      // calls refused by a rate limit in the window
	Approval        int64      // calls held for approval in the window
	LastAllowed     *time.Time // last allowed call ever (up to now)
	EarlierPeriods  int64      // window-length periods before the window with an allowed call
}

// usageScope is the analysis scope's calls of tools up to the window's end;
// each query bounds their start (the window, its first day from $day0, or
// none to scan the whole history).
const usageScope = `server = $server AND ($grant = '' OR "grant" = $grant) AND ts <= $to AND tool IS NOT NULL`

// usageSQL reads every tool's use (in readUsage's columns): the window's
// figures and, for the history, the calls of the window's first day up to
// its start, with the days before them from tool_days (the analytics store
// keeps it as it stores the calls). A tool's calls of one day lie in at
// most two window-length periods when a period is a day or longer, and the
// day's first and last allowed calls fall in each of those that holds one:
// so the periods counted from tool_days are exactly those the calls would
// give.
//
// The days with an allowed call in the window come from tool_days too: a
// day in it counts when its last allowed call is after the window's start
// and its first allowed call not after its end (which only the window's
// first and last days can fail, the window being a day or longer), as a
// distinct count over the window's calls would give, without that second
// pass (~0.2 s over 5M calls).
//
// The window's figures are counted per tool and session first, then per
// tool: the sessions become a count of rows instead of two distinct counts
// of hashes, which DuckDB computes several times more slowly than a
// grouping (measured: the usage of the largest grant of bench/recommend.sh
// ~0.45 s against ~0.3 s). byGrant groups every grant of the server at
// once (grantUsage); otherwise the rows are the scope's, under grant "".
func usageSQL(byGrant bool) string {
	g, dayG := `''`, `''`
	if byGrant {
		g, dayG = `coalesce("grant", '')`, `"grant"`
	}
	return `
WITH p AS (
	SELECT ` + g + ` AS g, tool, hash(` + sessionKey + `) AS skh, ` + sessionKey + ` <> '' AS has_s,
	       count(*) AS calls, count(*) FILTER (decision = 'allowed') AS allowed,
	       count(*) FILTER (decision <> 'allowed') AS refused,
	       count(*) FILTER (session_source = 'event') AS with_session, count(*) FILTER (agent IS NOT NULL) AS with_agent,
	       count(*) FILTER (decision = 'denied') AS denied, count(*) FILTER (decision = 'hidden') AS hidden,
	       count(*) FILTER (decision = 'rate_limited') AS rate_limited,
	       count(*) FILTER (decision = 'approval_required') AS approval,
	       max(ts) FILTER (decision = 'allowed') AS last_allowed
	FROM calls WHERE ` + usageScope + ` AND ts > $from
	GROUP BY ALL
), w AS (
	SELECT g, tool, sum(calls)::BIGINT AS calls, sum(allowed)::BIGINT AS allowed, sum(refused)::BIGINT AS refused,
	       count(*) FILTER (has_s) AS sessions, count(*) FILTER (has_s AND allowed > 0) AS allowed_sessions,
	       sum(with_session)::BIGINT AS with_session, sum(with_agent)::BIGINT AS with_agent,
	       sum(denied)::BIGINT AS denied, sum(hidden)::BIGINT AS hidden, sum(rate_limited)::BIGINT AS rate_limited,
	       sum(approval)::BIGINT AS approval, max(last_allowed) AS last_allowed
	FROM p GROUP BY g, tool
), d AS (
	SELECT ` + dayG + ` AS g, tool, count(DISTINCT day) AS allowed_days
	FROM tool_days
	WHERE server = $server AND ($grant = '' OR "grant" = $grant) AND day BETWEEN $day0_days AND $to_days
	  AND last_allowed > $from AND first_allowed <= $to
	GROUP BY ALL
), f AS (
	SELECT ` + g + ` AS g, tool, max(ts) FILTER (decision = 'allowed') AS last_allowed,
	       list(DISTINCT (epoch_ms($from) - epoch_ms(ts)) // $period_ms) FILTER (decision = 'allowed') AS periods
	FROM calls WHERE ` + usageScope + ` AND ts >= $day0 AND ts <= $from
	GROUP BY ALL
), hd AS (
	SELECT ` + dayG + ` AS g, tool, last_allowed,
	       unnest([(epoch_ms($from) - epoch_ms(first_allowed)) // $period_ms, (epoch_ms($from) - epoch_ms(last_allowed)) // $period_ms]) AS p
	FROM tool_days
	WHERE server = $server AND ($grant = '' OR "grant" = $grant) AND day < $day0_days
), h AS (
	SELECT g, tool, max(last_allowed) AS last_allowed, list(DISTINCT p) FILTER (p IS NOT NULL) AS periods
	FROM hd GROUP BY g, tool
), k AS (
	SELECT g, tool FROM w UNION SELECT g, tool FROM f UNION SELECT g, tool FROM h
)
SELECT k.g, k.tool,
       coalesce(w.calls, 0), coalesce(w.allowed, 0), coalesce(d.allowed_days, 0), coalesce(w.refused, 0),
       coalesce(w.sessions, 0), coalesce(w.allowed_sessions, 0), coalesce(w.with_session, 0), coalesce(w.with_agent, 0),
       coalesce(w.denied, 0), coalesce(w.hidden, 0), coalesce(w.rate_limited, 0), coalesce(w.approval, 0),
       greatest(w.last_allowed, f.last_allowed, h.last_allowed),
       len(list_distinct(list_concat(coalesce(f.periods, []), coalesce(h.periods, []))))
FROM k LEFT JOIN w USING (g, tool) LEFT JOIN d USING (g, tool) LEFT JOIN f USING (g, tool) LEFT JOIN h USING (g, tool)`
}

// usageScanSQL reads the same from the calls alone, the whole history
// scanned: for periods shorter than a day, which tool_days cannot tell
// apart.
const usageScanSQL = `
SELECT '', tool,
       count(*) FILTER (ts > $from) AS calls,
       count(*) FILTER (ts > $from AND decision = 'allowed') AS allowed,
       count(DISTINCT epoch_ms(ts) // 86400000) FILTER (ts > $from AND decision = 'allowed') AS allowed_days,
       count(*) FILTER (ts > $from AND decision <> 'allowed') AS refused,
       count(DISTINCT hash(` + sessionKey + `)) FILTER (ts > $from AND ` + sessionKey + ` <> '') AS sessions,
       count(DISTINCT hash(` + sessionKey + `)) FILTER (ts > $from AND ` + sessionKey + ` <> '' AND decision = 'allowed') AS allowed_sessions,
       count(*) FILTER (ts > $from AND session_source = 'event') AS with_session, count(*) FILTER (ts > $from AND agent IS NOT NULL) AS with_agent,
       count(*) FILTER (ts > $from AND decision = 'denied') AS denied, count(*) FILTER (ts > $from AND decision = 'hidden') AS hidden,
       count(*) FILTER (ts > $from AND decision = 'rate_limited') AS rate_limited,
       count(*) FILTER (ts > $from AND decision = 'approval_required') AS approval,
       max(ts) FILTER (decision = 'allowed'),
       count(DISTINCT (epoch_ms($from) - epoch_ms(ts)) // $period_ms) FILTER (ts <= $from AND decision = 'allowed')
FROM calls
WHERE ` + usageScope + `
GROUP BY tool`

// toolUsage reads every tool's use in the window and over its history.
func (q query) toolUsage(ctx context.Context, window time.Duration) (map[string]*usage, error) {
	text, extra := usageSQL(false), q.usageArgs(window)
	if window < 24*time.Hour {
		text, extra = usageScanSQL, []any{sql.Named("period_ms", window.Milliseconds())}
	}
	byGrant, err := q.readUsage(ctx, "tool usage", text, extra...)
	if err != nil {
		return nil, err
	}
	if byGrant[""] == nil {
		return map[string]*usage{}, nil
	}
	return byGrant[""], nil
}

// grantUsage reads the use of every tool by every grant of q's server (q's
// grant is ignored) in one pass over the window, by grant ("" for the
// calls without one): what toolUsage gives for each grant. Nil for
// windows shorter than a day, which scan the whole history scope by scope.
func grantUsage(ctx context.Context, q query, window time.Duration) (map[string]map[string]*usage, error) {
	if window < 24*time.Hour {
		return nil, nil
	}
	q.grant = ""
	return q.readUsage(ctx, "grant usage", usageSQL(true), q.usageArgs(window)...)
}

// usageArgs are usageSQL's arguments besides the scope's.
func (q query) usageArgs(window time.Duration) []any {
	day0, start := analytics.ToolDay(q.from)
	last, _ := analytics.ToolDay(q.to)
	return []any{sql.Named("period_ms", window.Milliseconds()), sql.Named("day0_days", day0), sql.Named("day0", start), sql.Named("to_days", last)}
}

// readUsage runs a tool usage query (usageSQL or usageScanSQL): the tools'
// use by grant.
func (q query) readUsage(ctx context.Context, what, text string, extra ...any) (map[string]map[string]*usage, error) {
	rows, err := q.rows(ctx, what, text, extra...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]*usage{}
	for rows.Next() {
		u := &usage{}
		var g string
		var last sql.NullTime
		if err := rows.Scan(&g, &u.Tool, &u.Calls, &u.Allowed, &u.AllowedDays, &u.Refused, &u.Sessions, &u.AllowedSessions, &u.WithSession, &u.WithAgent,
			&u.Denied, &u.Hidden, &u.RateLimited, &u.Approval, &last, &u.EarlierPeriods); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if last.Valid {
			t := last.Time.UTC()
			u.LastAllowed = &t
		}
		if out[g] == nil {
			out[g] = map[string]*usage{}
		}
		out[g][u.Tool] = u
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
