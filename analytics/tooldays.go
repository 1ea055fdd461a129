package analytics

import "time"

// tool_days holds, per server, grant (empty for calls without one), tool and
// UTC day (epoch_ms(ts) // 86400000) with a call, the day's first call, its
// first and last allowed call (NULL when none was allowed) and its last
// refused call. The recommender and the report read a tool's history before
// their window from it (the last allowed call ever, the earlier
// window-length periods with an allowed call, a tool's first call, each
// grant's last access) instead of scanning every call ever stored, so that
// their cost follows tools and days, not calls. It keeps a day's use after
// storage.retention deletes the day's calls.
//
// Since migration 17 it is a view: tool_day_use's rows carry those times
// (kept in the transaction that stores the calls, a row per batch), and
// tool_days_before holds the table's rows from before, which the view
// merges with min/max. Merging a table's row with every batch's (an upsert
// on its primary key) cost the batch's upkeep a statement and a view of its
// own: ~5 ms a batch, 1.5-2% of file ingest.
const toolDaysViewSQL = `
CREATE VIEW tool_days AS
SELECT server, "grant", tool, day, min(first_call) AS first_call, min(first_allowed) AS first_allowed,
       max(last_allowed) AS last_allowed, max(last_refused) AS last_refused
FROM (SELECT server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused
      FROM tool_day_use WHERE first_call IS NOT NULL
      UNION ALL
      SELECT server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused FROM tool_days_before)
GROUP BY server, "grant", tool, day`

// ToolDay is the tool_days day holding t (its day column) and the day's
// start: a reader of a tool's history takes the calls from start on and
// tool_days for the days before day.
func ToolDay(t time.Time) (day int64, start time.Time) {
	day = t.UnixMilli() / dayMillis
	return day, DayStart(day)
}

// dayMillis is a UTC day in milliseconds: the aggregates' day column is
// epoch_ms(ts) // dayMillis.
const dayMillis = 24 * 60 * 60 * 1000

// DayStart is the midnight (UTC) that starts day, a day column's value.
func DayStart(day int64) time.Time { return time.UnixMilli(day * dayMillis).UTC() }

// toolDayKey is a tool_days row's key.
type toolDayKey struct {
	server, grant, tool string
	day                 int64
}
