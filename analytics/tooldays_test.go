package analytics

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// TestToolDaysIncremental: tool_days built as calls arrive in many small
// batches (a day's calls spread over them, some sent twice, or each once)
// equals the one built from a single batch and the one computed from the
// stored calls at once, as the migration backfills it. Batches whose
// calls are all new count their tool days in Go (collectCalls), the
// others in SQL (recordToolDayUse). Once with three grants, once with more than a
// batch's staging keeps apart (maxKeys), whose calls share chunks.
func TestToolDaysIncremental(t *testing.T) {
	few := []string{"", "ops", "ci"}
	var many []string
	for i := range 3 * maxKeys {
		many = append(many, fmt.Sprintf("g%03d", i))
	}
	t.Run("three grants", func(t *testing.T) { checkToolDaysIncremental(t, few) })
	t.Run("grants past maxKeys", func(t *testing.T) { checkToolDaysIncremental(t, many) })
}

func checkToolDaysIncremental(t *testing.T, grants []string) {
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 22, 0, 0, 0, time.UTC)
	var evs []audit.Event
	decisions := []audit.Decision{audit.Allowed, audit.Denied, audit.Allowed, audit.Hidden, audit.RateLimited}
	for i := range 3000 {
		e := audit.Event{ID: fmt.Sprintf("e-%d", i), TS: base.Add(time.Duration(i*97) * time.Second), Server: "pve",
			Tool: fmt.Sprintf("tool_%d", i%7), Decision: decisions[i%len(decisions)], Grant: grants[i%len(grants)]}
		if i%11 == 0 {
			e.Tool = "" // a call without a tool has no tool day
			e.Method = "resources/read"
		}
		evs = append(evs, e)
	}
	// Out of time order, within batches and across them.
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused), ',' ORDER BY server, "grant", tool, day) FROM tool_days`
	read := func(s *Store, q string) string {
		var out string
		require.NoError(t, s.DB().QueryRowContext(ctx, q).Scan(&out))
		return out
	}

	one := openTemp(t)
	_, err := one.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	want := read(one, rows)

	assert.Equal(t, want, read(inBatches(t, evs, false), rows), "each call sent once")
	many := inBatches(t, evs, true)
	assert.Equal(t, want, read(many, rows), "some calls sent twice")

	// Recluster merges each sealed day's tool_day_use rows into one, and
	// with them their times.
	const repeated = `SELECT count(*) FROM (SELECT 1 FROM tool_day_use GROUP BY server, "grant", tool, day HAVING count(*) > 1)`
	if len(grants) < maxKeys {
		require.Positive(t, count(t, many, repeated), "keys with a row per batch")
	}
	_, err = many.recluster(ctx, base.AddDate(0, 1, 0), 0, ReclusterMaxCalls)
	require.NoError(t, err)
	require.Zero(t, count(t, many, repeated), "a row per key once reclustered")
	assert.Equal(t, want, read(many, rows), "once reclustered")

	_, err = many.wconn.ExecContext(ctx, `DELETE FROM tool_day_use`)
	require.NoError(t, err)
	require.NoError(t, recordToolDayUse(ctx, many.wconn, "true"))
	assert.Equal(t, want, read(many, rows), "from the stored calls at once")

	assert.Equal(t, count(t, one, `SELECT count(DISTINCT (coalesce("grant", ''), tool, epoch_ms(ts) // 86400000)) FROM calls WHERE tool IS NOT NULL`),
		count(t, one, `SELECT count(*) FROM tool_days`), "a row per grant, tool and day; none for calls without a tool")
	assert.Positive(t, count(t, one, `SELECT count(*) FROM tool_days WHERE first_allowed IS NULL`), "days without an allowed call are kept")
}

// inBatches is a store holding evs appended in batches of 1 to 97 events
// (a day's calls and a session's spread over many), with, when redeliver
// is set, ten earlier events sent again in each batch past the first 50.
func inBatches(t *testing.T, evs []audit.Event, redeliver bool) *Store {
	t.Helper()
	s := openTemp(t)
	for lo, size := 0, 1; lo < len(evs); lo, size = lo+size, size%97+13 {
		hi := min(lo+size, len(evs))
		batch := evs[lo:hi]
		if redeliver && lo > 50 {
			batch = append(batch[:hi-lo:hi-lo], evs[lo-50:lo-40]...) // redelivered calls: duplicates
		}
		_, err := s.Append(context.Background(), ingest.Batch{Events: batch})
		require.NoError(t, err)
	}
	return s
}

// A database of schema 16 keeps tool_days as a table of its own; migration
// 17 keeps its rows beside tool_day_use's (tool_days_before) and makes
// tool_days a view of both: the view holds the table's rows, a day only
// the table has (one that tool_day_use does not cover), and, once later
// calls are stored, what a database that stored every call gives.
func TestMigrationKeepsToolDaysInToolDayUse(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 20, 0, 0, 0, time.UTC)
	var evs []audit.Event
	decisions := []audit.Decision{audit.Allowed, audit.Denied, audit.Allowed, audit.RateLimited}
	for i := range 2000 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%d", i), TS: base.Add(time.Duration(i*173) * time.Second), Server: "pve",
			Tool: fmt.Sprintf("tool_%d", i%5), Decision: decisions[i%len(decisions)], Grant: []string{"", "ops"}[i%2]})
	}
	before, later := evs[:1200], evs[1200:]
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused), ',' ORDER BY server, "grant", tool, day) FROM tool_days`

	// The older build's database: tool_days a table, tool_day_use without
	// the times.
	path := filepath.Join(t.TempDir(), "old.duckdb")
	old := openAtVersion(t, path, 16)
	_, err := old.DB().Exec(toolDaysStandIn)
	require.NoError(t, err)
	_, err = old.Append(ctx, ingest.Batch{Events: before})
	require.NoError(t, err)
	_, err = old.DB().Exec(toolDaysTable + `ALTER TABLE tool_day_use DROP COLUMN first_call; ALTER TABLE tool_day_use DROP COLUMN first_allowed;
ALTER TABLE tool_day_use DROP COLUMN last_refused`)
	require.NoError(t, err)
	// Its first day counted in tool_days alone, as a day the retention had
	// deleted before tool_day_use was counted.
	firstDay, _ := ToolDay(base)
	_, err = old.DB().Exec(`DELETE FROM tool_day_use WHERE day = ?`, firstDay)
	require.NoError(t, err)
	tableRows := readString(t, old, rows)
	require.Positive(t, count(t, old, fmt.Sprintf(`SELECT count(*) FROM tool_days WHERE day = %d`, firstDay)))
	require.NoError(t, old.Close())

	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, tableRows, readString(t, s, rows), "the table's rows, through the view")
	assert.Equal(t, "VIEW", readString(t, s, `SELECT table_type FROM information_schema.tables WHERE table_name = 'tool_days'`))
	_, err = s.Append(ctx, ingest.Batch{Events: later})
	require.NoError(t, err)

	whole := openTemp(t)
	_, err = whole.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	assert.Equal(t, readString(t, whole, rows), readString(t, s, rows), "with later calls, what every call stored gives")
}

// A call at the epoch or before it is a time like any other: tool_days
// holds its day's first and last calls whether a batch's calls are counted
// in Go, in SQL (a batch with a call stored before) or merged once the day
// is sealed.
func TestToolDaysAtAndBeforeTheEpoch(t *testing.T) {
	ctx := context.Background()
	epoch := time.Unix(0, 0).UTC()
	call := func(id string, at time.Time, d audit.Decision) audit.Event {
		return audit.Event{ID: id, TS: at, Server: "pve", Tool: "get_vm_status", Decision: d}
	}
	s := openTemp(t)
	_, err := s.Append(ctx, ingest.Batch{Events: []audit.Event{call("a", epoch, audit.Allowed), call("b", epoch.Add(-time.Hour), audit.Denied)}})
	require.NoError(t, err)
	checkToolDays(t, s, "counted in Go")
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{call("a", epoch, audit.Allowed),
		call("c", epoch.Add(-2*time.Hour), audit.Allowed), call("d", epoch.Add(30*time.Minute), audit.Allowed), call("e", epoch.Add(time.Hour), audit.Denied)}})
	require.NoError(t, err)
	checkToolDays(t, s, "counted in SQL")
	require.NoError(t, compactToolDayUse(ctx, s.wconn, epoch.Add(-48*time.Hour), epoch.Add(48*time.Hour)))
	require.Equal(t, 1, count(t, s, `SELECT count(*) FROM tool_day_use`), "the day's rows merged")
	checkToolDays(t, s, "merged")
	assert.Equal(t, "1969-12-31 22:00:00+00|1969-12-31 22:00:00+00|1970-01-01 00:30:00+00|1970-01-01 01:00:00+00",
		readString(t, s, `SELECT concat_ws('|', first_call, first_allowed, last_allowed, last_refused) FROM tool_days`))
}
