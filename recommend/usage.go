package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"golang.org/x/sync/errgroup"
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
const usageScope = inScope + ` AND ts <= $to AND tool IS NOT NULL`

// usageHistorySQL reads, per tool (and grant when byGrant, else under
// the empty grant), what a tool's usage takes from its history and from
// tool_days: the days with an allowed call in the window, the last
// allowed call before it, and the window-length periods before it with an
// allowed call; in_history says whether the tool has calls before the
// window (a tool of those rows alone has none in it). The calls of the
// window's first day up to its start are read, with the days before them
// from tool_days (the analytics store keeps it as it stores the calls). A
// tool's calls of one day lie in at most two window-length periods when a
// period is a day or longer, and the day's first and last allowed calls
// fall in each of those that holds one: so the periods counted from
// tool_days are exactly those the calls would give.
//
// The days with an allowed call in the window come from tool_days too: a
// day in it counts when its last allowed call is after the window's start
// and its first allowed call not after its end (which only the window's
// first and last days can fail, the window being a day or longer), as a
// distinct count over the window's calls would give, without that second
// pass (~0.2 s over 5M calls).
func usageHistorySQL(byGrant bool) string {
	g, dayG := `''`, `''`
	if byGrant {
		g, dayG = `coalesce("grant", '')`, `"grant"`
	}
	return `
WITH d AS (
	SELECT ` + dayG + ` AS g, tool, count(DISTINCT day) AS allowed_days
	FROM tool_days
	WHERE ` + inScope + ` AND day BETWEEN $day0_days AND $to_days
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
	WHERE ` + inScope + ` AND day < $day0_days
), h AS (
	SELECT g, tool, max(last_allowed) AS last_allowed, list(DISTINCT p) FILTER (p IS NOT NULL) AS periods
	FROM hd GROUP BY g, tool
), k AS (
	SELECT g, tool FROM f UNION SELECT g, tool FROM h
)
SELECT g, tool, k.tool IS NOT NULL AS in_history, coalesce(d.allowed_days, 0),
       coalesce(epoch_us(greatest(f.last_allowed, h.last_allowed)), 0),
       len(list_distinct(list_concat(coalesce(f.periods, []), coalesce(h.periods, []))))
FROM k LEFT JOIN f USING (g, tool) LEFT JOIN h USING (g, tool) FULL JOIN d USING (g, tool)`
}

// usage reads every tool's use in q's scope's window of a day or longer
// (by grant when byGrant, else under grant ""): the window's figures from
// tool_day_use (analytics.WindowUse: a row per tool and day, and the
// calls of the window's first and last days, instead of every call of the
// window grouped by tool and session), the history from
// usageHistorySQL.
func (q query) usage(ctx context.Context, what string, window time.Duration, byGrant bool) (map[string]map[string]*usage, error) {
	defer q.timed(what)()
	// The history is read beside the window's use: its query runs while
	// WindowUse decodes and counts session sets in Go.
	var history []usageHistory
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() (err error) {
		history, err = q.usageHistory(ectx, window, byGrant)
		return err
	})
	inWindow, err := analytics.WindowUse(ctx, q.db, q.server, q.grant, q.from, q.to, byGrant)
	if werr := eg.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := map[string]map[string]*usage{}
	get := func(g, tool string) *usage {
		if out[g] == nil {
			out[g] = map[string]*usage{}
		}
		u := out[g][tool]
		if u == nil {
			u = &usage{Tool: tool}
			out[g][tool] = u
		}
		return u
	}
	// later keeps u's last allowed call at us (microseconds, 0: none) when
	// that is later.
	later := func(u *usage, us int64) {
		if us != 0 && (u.LastAllowed == nil || us > u.LastAllowed.UnixMicro()) {
			t := time.UnixMicro(us).UTC()
			u.LastAllowed = &t
		}
	}
	for g, tools := range inWindow {
		for tool, w := range tools {
			u := get(g, tool)
			u.Calls, u.Allowed, u.Refused = w.Calls, w.Allowed, w.Calls-w.Allowed
			u.Sessions, u.AllowedSessions = w.SessionCount, w.AllowedSessionCount
			u.WithSession, u.WithAgent = w.WithSession, w.WithAgent
			u.Denied, u.Hidden, u.RateLimited, u.Approval = w.Denied, w.Hidden, w.RateLimited, w.Approval
			later(u, w.LastAllowed)
		}
	}
	for _, h := range history {
		if !h.inHistory && (out[h.g] == nil || out[h.g][h.tool] == nil) {
			continue // allowed days of a tool with no call left in the window
		}
		u := get(h.g, h.tool)
		u.AllowedDays, u.EarlierPeriods = h.days, h.periods
		later(u, h.last)
	}
	return out, nil
}

// usageHistory is a row of usageHistorySQL.
type usageHistory struct {
	g, tool             string
	inHistory           bool
	days, last, periods int64
}

// usageHistory reads usageHistorySQL's rows.
func (q query) usageHistory(ctx context.Context, window time.Duration, byGrant bool) ([]usageHistory, error) {
	rows, err := q.db.QueryContext(ctx, usageHistorySQL(byGrant), q.args(q.usageArgs(window)...)...)
	if err != nil {
		return nil, fmt.Errorf("usage history: %w", err)
	}
	defer rows.Close()
	var out []usageHistory
	for rows.Next() {
		var h usageHistory
		if err := rows.Scan(&h.g, &h.tool, &h.inHistory, &h.days, &h.last, &h.periods); err != nil {
			return nil, fmt.Errorf("usage history: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage history: %w", err)
	}
	return out, nil
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
	var byGrant map[string]map[string]*usage
	var err error
	if window < 24*time.Hour {
		byGrant, err = q.readUsage(ctx, "tool usage", usageScanSQL, sql.Named("period_ms", window.Milliseconds()))
	} else {
		byGrant, err = q.usage(ctx, "tool usage", window, false)
	}
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
	return q.usage(ctx, "grant usage", window, true)
}

// usageArgs are usageHistorySQL's arguments besides the scope's.
func (q query) usageArgs(window time.Duration) []any {
	day0, start := analytics.ToolDay(q.from)
	last, _ := analytics.ToolDay(q.to)
	return []any{sql.Named("period_ms", window.Milliseconds()), sql.Named("day0_days", day0), sql.Named("day0", start), sql.Named("to_days", last)}
}

// readUsage runs usageScanSQL: the tools' use, under grant "".
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
