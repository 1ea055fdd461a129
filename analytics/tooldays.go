package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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
	return mergeToolDaysSQL(`
SELECT server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, min(ts),
       min(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision <> 'allowed')
FROM calls WHERE tool IS NOT NULL AND (` + where + `)
GROUP BY ALL`)
}

// mergeToolDaysSQL merges the rows rows selects (tool_days' columns) into
// tool_days.
func mergeToolDaysSQL(rows string) string {
	return `
INSERT INTO tool_days` + rows + `
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

// toolDay is a tool_days row of a staged batch, in microseconds; allowed
// (refused) says whether firstAllowed and lastAllowed (lastRefused) are set.
type toolDay struct {
	first, firstAllowed, lastAllowed, lastRefused int64
	allowed, refused                              bool
	// use is the day's tool_day_use row of the batch (found with the
	// tool day: one map lookup a call).
	use DayUse
}

// add counts a staged call of the tool that day, at us.
func (d *toolDay) add(us int64, allowed bool) {
	d.first = min(d.first, us)
	switch {
	case allowed && !d.allowed:
		d.firstAllowed, d.lastAllowed, d.allowed = us, us, true
	case allowed:
		d.firstAllowed, d.lastAllowed = min(d.firstAllowed, us), max(d.lastAllowed, us)
	case !d.refused:
		d.lastRefused, d.refused = us, true
	default:
		d.lastRefused = max(d.lastRefused, us)
	}
}

// recordBatchToolDays merges a batch's tool days, counted in Go from its
// staged calls (collectCalls), into tool_days: one small view instead of
// grouping the batch's stored calls again. For batches whose staged calls
// are all stored.
func recordBatchToolDays(v *arrowViews, days map[toolDayKey]*toolDay) error {
	if len(days) == 0 {
		return nil
	}
	mem := v.allocator()
	sb, gb, tb, db := array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewInt64Builder(mem)
	fb, fab, lab, lrb := array.NewTimestampBuilder(mem, tsType), array.NewTimestampBuilder(mem, tsType), array.NewTimestampBuilder(mem, tsType), array.NewTimestampBuilder(mem, tsType)
	optional := func(b *array.TimestampBuilder, set bool, us int64) {
		if set {
			b.Append(arrow.Timestamp(us))
		} else {
			b.AppendNull()
		}
	}
	for k, d := range days {
		sb.Append(k.server)
		gb.Append(k.grant)
		tb.Append(k.tool)
		db.Append(k.day)
		fb.Append(arrow.Timestamp(d.first))
		optional(fab, d.allowed, d.firstAllowed)
		optional(lab, d.allowed, d.lastAllowed)
		optional(lrb, d.refused, d.lastRefused)
	}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "server", Type: arrow.BinaryTypes.String}, {Name: "g", Type: arrow.BinaryTypes.String},
		{Name: "tool", Type: arrow.BinaryTypes.String}, {Name: "day", Type: arrow.PrimitiveTypes.Int64},
		{Name: "first_call", Type: tsType}, {Name: "first_allowed", Type: tsType, Nullable: true},
		{Name: "last_allowed", Type: tsType, Nullable: true}, {Name: "last_refused", Type: tsType, Nullable: true},
	}, nil)
	names, err := v.add(schema, "tool_days_new", 1, sb, gb, tb, db, fb, fab, lab, lrb)
	if err != nil {
		return err
	}
	if _, err := v.conn.ExecContext(v.ctx, mergeToolDaysSQL(`
SELECT server, g, tool, day, first_call, first_allowed, last_allowed, last_refused FROM `+names[0])); err != nil {
		return fmt.Errorf("record tool days: %w", err)
	}
	return nil
}
