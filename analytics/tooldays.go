package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// tool_days holds, per server, grant ('' for calls without one), tool and
// UTC day (epoch_ms(ts) // 86400000) with a call, the day's first call, its
// first and last allowed call (NULL when none was allowed) and its last
// refused call. The recommender and the report read a tool's history before
// their window from it (the last allowed call ever, the earlier
// window-length periods with an allowed call, a tool's first call, each
// grant's last access) instead of scanning every call ever stored, so that
// their cost follows tools and days, not calls. It is kept in the transaction that
// stores the calls, keeps a day's use after storage.retention deletes the
// day's calls, and min/max make a day recorded twice (a restore) the same.

// toolDaysSQL records the calls that where selects into tool_days.
func toolDaysSQL(where string) string {
	return `
INSERT INTO tool_days
SELECT server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, min(ts),
       min(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision <> 'allowed')
FROM calls WHERE tool IS NOT NULL AND (` + where + `)
GROUP BY ALL
ON CONFLICT DO UPDATE SET
	first_call = least(tool_days.first_call, excluded.first_call),
	first_allowed = least(tool_days.first_allowed, excluded.first_allowed),
	last_allowed = greatest(tool_days.last_allowed, excluded.last_allowed),
	last_refused = greatest(tool_days.last_refused, excluded.last_refused)`
}

// recordToolDays records in tool_days the calls that where (with args)
// selects, on conn, inside the caller's transaction.
func recordToolDays(ctx context.Context, conn *sql.Conn, where string, args ...any) error {
	if _, err := conn.ExecContext(ctx, toolDaysSQL(where), args...); err != nil {
		return fmt.Errorf("record tool days: %w", err)
	}
	return nil
}

// ToolDay is the tool_days day holding t (its day column) and the day's
// start: a reader of a tool's history takes the calls from start on and
// tool_days for the days before day.
func ToolDay(t time.Time) (day int64, start time.Time) {
	const dayMillis = 24 * 60 * 60 * 1000
	day = t.UnixMilli() / dayMillis
	return day, time.UnixMilli(day * dayMillis).UTC()
}
