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

// TestToolDayUseIncremental: tool_day_use built as calls arrive in many
// small batches (a day's calls and a session's spread over them, some sent
// twice) equals the one built from a single batch and the one counted
// from the stored calls at once, as the migration fills it; with sessions
// derived in SQL (whose names follow the batches, so that the stored calls
// differ), it equals the one counted from its own calls; and its counts
// and sets are those of the calls.
func TestToolDayUseIncremental(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 22, 0, 0, 0, time.UTC)
	events := func(derived bool) []audit.Event {
		var evs []audit.Event
		decisions := []audit.Decision{audit.Allowed, audit.Denied, audit.Allowed, audit.Hidden, audit.RateLimited, audit.ApprovalRequired}
		for i := range 3000 {
			e := audit.Event{ID: fmt.Sprintf("e-%d", i), TS: base.Add(time.Duration(i*97) * time.Second), Server: []string{"pve", "git"}[i%13/12],
				Tool: fmt.Sprintf("tool_%d", i%7), Decision: decisions[i%len(decisions)], Grant: []string{"", "ops", "ci"}[i%3],
				Session: fmt.Sprintf("s-%d", i%41), Agent: fmt.Sprintf("a-%d", i%5)}
			switch i % 10 {
			case 1:
				e.Tool, e.Method = "", "resources/read" // no tool: not counted
			case 2:
				e.Session, e.Agent, e.Gateway = "", "", "gw-1" // the gateway stands in for the session
			case 3:
				e.Session, e.Agent = "", "" // no session key: a call, not a session
			case 4:
				if derived {
					e.Session = "" // a session derived in SQL from the agent
				}
			case 5:
				e.Session, e.Attrs = "", map[string]string{audit.AttrConversationID: fmt.Sprintf("c-%d", i%9)}
			}
			evs = append(evs, e)
		}
		// Out of time order, within batches and across them.
		rand.New(rand.NewPCG(5, 6)).Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		return evs
	}
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, calls, allowed, denied, hidden, rate_limited, approval,
	with_session, with_agent, last_allowed, hex(sessions), hex(allowed_sessions)), ',' ORDER BY server, "grant", tool, day) FROM tool_day_use`
	read := func(s *Store) string {
		var out string
		require.NoError(t, s.DB().QueryRowContext(ctx, rows).Scan(&out))
		return out
	}
	// compacted is the table once every key's rows are merged into one,
	// as Recluster leaves a sealed day.
	compacted := func(s *Store) string {
		require.NoError(t, compactToolDayUse(ctx, s.wconn, base.Add(-48*time.Hour), base.Add(30*24*time.Hour)))
		require.Zero(t, count(t, s, `SELECT count(*) FROM (SELECT 1 FROM tool_day_use GROUP BY server, "grant", tool, day HAVING count(*) > 1)`))
		return read(s)
	}
	recounted := func(s *Store) string {
		_, err := s.wconn.ExecContext(ctx, `DELETE FROM tool_day_use`)
		require.NoError(t, err)
		require.NoError(t, recordToolDayUse(ctx, s.wconn, "true"))
		return read(s)
	}

	evs := events(false)
	one := openTemp(t)
	_, err := one.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	want := read(one)
	require.Zero(t, count(t, one, `SELECT count(*) FROM (SELECT 1 FROM tool_day_use GROUP BY server, "grant", tool, day HAVING count(*) > 1)`),
		"one batch: a row per key")
	once := inBatches(t, evs, false)
	require.Positive(t, count(t, once, `SELECT count(*) FROM (SELECT 1 FROM tool_day_use GROUP BY server, "grant", tool, day HAVING count(*) > 1)`),
		"a key stored by several batches has a row of each")
	assert.Equal(t, want, compacted(once), "each call sent once")
	many := inBatches(t, evs, true)
	assert.Equal(t, want, compacted(many), "some calls sent twice")
	assert.Equal(t, want, recounted(many), "from the stored calls at once")

	derived := inBatches(t, events(true), true)
	require.Positive(t, count(t, derived, `SELECT count(*) FROM calls WHERE session_source = 'derived'`))
	kept := compacted(derived)
	assert.Equal(t, recounted(derived), kept, "with derived sessions, from its own calls")

	// The counts are the calls', and the sets hold the sessions' hashes.
	var sums, calls string
	require.NoError(t, one.DB().QueryRow(`SELECT concat_ws('|', sum(calls), sum(allowed), sum(denied), sum(hidden), sum(rate_limited), sum(approval),
		sum(with_session), sum(with_agent), count(*)) FROM tool_day_use`).Scan(&sums))
	require.NoError(t, one.DB().QueryRow(`SELECT concat_ws('|', count(*), count(*) FILTER (decision = 'allowed'), count(*) FILTER (decision = 'denied'),
		count(*) FILTER (decision = 'hidden'), count(*) FILTER (decision = 'rate_limited'), count(*) FILTER (decision = 'approval_required'),
		count(*) FILTER (session_source = 'event'), count(*) FILTER (agent IS NOT NULL),
		count(DISTINCT (server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000))) FROM calls WHERE tool IS NOT NULL`).Scan(&calls))
	assert.Equal(t, calls, sums)
	type key struct {
		server, grant, tool string
		day                 int64
	}
	wantSets, wantAllowed := map[key]map[uint64]bool{}, map[key]map[uint64]bool{}
	keys, err := one.DB().Query(`SELECT server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, ` + SessionKey + `, decision = 'allowed'
		FROM calls WHERE tool IS NOT NULL AND ` + SessionKey + ` <> ''`)
	require.NoError(t, err)
	for keys.Next() {
		var k key
		var session string
		var allowed bool
		require.NoError(t, keys.Scan(&k.server, &k.grant, &k.tool, &k.day, &session, &allowed))
		if wantSets[k] == nil {
			wantSets[k] = map[uint64]bool{}
		}
		wantSets[k][SessionHash(session)] = true
		if allowed {
			if wantAllowed[k] == nil {
				wantAllowed[k] = map[uint64]bool{}
			}
			wantAllowed[k][SessionHash(session)] = true
		}
	}
	require.NoError(t, keys.Err())
	keys.Close()
	stored, err := one.DB().Query(`SELECT server, "grant", tool, day, ` + dayUseColumns + ` FROM tool_day_use`)
	require.NoError(t, err)
	defer stored.Close()
	seen, allowedSeen := 0, 0
	for stored.Next() {
		var k key
		u := &DayUse{}
		require.NoError(t, scanDayUse(stored, u, []any{&k.server, &k.grant, &k.tool, &k.day}))
		got := map[uint64]bool{}
		for _, h := range u.Sessions {
			got[h] = true
		}
		assert.Len(t, u.Sessions, len(got), "distinct sessions")
		assert.True(t, isSorted(u.Sessions), "sorted sessions")
		if len(wantSets[k]) > 0 || len(got) > 0 {
			assert.Equal(t, wantSets[k], got, "the sessions of %v", k)
		}
		gotAllowed := map[uint64]bool{}
		for _, h := range u.AllowedSessions {
			gotAllowed[h] = true
		}
		if len(wantAllowed[k]) > 0 || len(gotAllowed) > 0 {
			assert.Equal(t, wantAllowed[k], gotAllowed, "the sessions with an allowed call of %v", k)
		}
		allowedSeen += len(gotAllowed)
		seen++
	}
	require.NoError(t, stored.Err())
	assert.Positive(t, seen)
	assert.Positive(t, allowedSeen)
}

func isSorted(s []uint64) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

// TestMigrationFillsToolDayUse: a database stored before tool_day_use
// gets it filled from its calls by migration 10, as the calls were kept.
func TestMigrationFillsToolDayUse(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.duckdb")
	evs := sampleEvents(500, time.Date(2026, 11, 3, 21, 0, 0, 0, time.UTC))
	old := openBefore(t, path, 9)
	_, err := old.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, calls, allowed, denied, hidden, rate_limited, approval,
	with_session, with_agent, last_allowed, hex(sessions), hex(allowed_sessions)), ',' ORDER BY server, "grant", tool, day) FROM tool_day_use`
	var want string
	require.NoError(t, old.DB().QueryRowContext(ctx, rows).Scan(&want))
	require.NotEmpty(t, want)
	dropStandIn(t, old)
	require.NoError(t, old.Close())

	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	var got string
	require.NoError(t, s.DB().QueryRowContext(ctx, rows).Scan(&got))
	assert.Equal(t, want, got)
}

// openBefore opens path as it was before migration n+1 (6 to 9): only
// the first n migrations applied, with tool_day_use, session_peaks, the
// counted days and the view tool_days as stand-ins, for this build's Append
// keeps them (dropStandIn drops them before migrations 10, 11, 13 and 17
// add them, tool_days a table again).
func openBefore(t *testing.T, path string, n int) *Store {
	t.Helper()
	s := openAtVersion(t, path, n)
	_, err := s.DB().Exec(toolDayUseSchema + sessionPeaksSchema + countedDaysTable + toolDaysStandIn)
	require.NoError(t, err)
	return s
}

// openAtVersion opens path with only the first n migrations applied.
func openAtVersion(t *testing.T, path string, n int) *Store {
	t.Helper()
	all := migrations
	migrations = migrations[:n]
	s, err := Open(context.Background(), path, Options{})
	migrations = all
	require.NoError(t, err)
	return s
}

func dropStandIn(t *testing.T, s *Store) {
	t.Helper()
	_, err := s.DB().Exec(toolDaysTable + `DROP TABLE tool_day_use; DROP TABLE tool_day_use_from; DROP TABLE session_peaks; DROP TABLE session_peaks_days; DROP TABLE counted_days`)
	require.NoError(t, err)
}

// toolDaysStandIn makes tool_days the view through which this build keeps
// it, in a database of a schema before migration 17; toolDaysTable turns it
// back into the table, with the view's rows, as an older build kept it.
const (
	toolDaysStandIn = `ALTER TABLE tool_days RENAME TO tool_days_before;` + toolDaysViewSQL + `;`
	toolDaysTable   = `CREATE TABLE tool_days_table AS SELECT * FROM tool_days; DROP VIEW tool_days; DROP TABLE tool_days_before;
ALTER TABLE tool_days_table RENAME TO tool_days;`
)

// TestWindowUseBeforeItsFirstDay: in a database migrated after the
// retention had deleted some days (their calls only in the archive, so
// that migration 10 could not count them), a window reaching back into
// those days reads them from the calls (the archive's), and gives what a
// database that counted every day gives.
func TestWindowUseBeforeItsFirstDay(t *testing.T) {
	ctx := context.Background()
	day0 := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	var evs []audit.Event
	for i := range 600 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%d", i), TS: day0.Add(time.Duration(i) * 12 * time.Minute), Server: "pve",
			Tool: fmt.Sprintf("tool_%d", i%4), Decision: []audit.Decision{audit.Allowed, audit.Denied}[i%3/2], Session: fmt.Sprintf("s-%d", i%17)})
	}
	whole := openTemp(t)
	_, err := whole.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "old.duckdb")
	old := openBefore(t, path, 9)
	_, err = old.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	dropStandIn(t, old)
	// Days 0 and 1 archived and deleted: their calls stay here, standing
	// in for the archive's that a window past the retention reads.
	for d := range 2 {
		_, err = old.DB().Exec(`INSERT INTO archive_days VALUES ('pve', ?, 'f.parquet', 1, 'x', now(), now(), now())`, day0.AddDate(0, 0, d).Format(time.DateOnly))
		require.NoError(t, err)
	}
	require.NoError(t, old.Close())
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer s.Close()
	d0, _ := ToolDay(day0)
	assert.Equal(t, d0+2, int64(count(t, s, `SELECT day FROM tool_day_use_from`)))
	// What migration 10 would have found: no calls on the deleted days.
	_, err = s.DB().Exec(`DELETE FROM tool_day_use WHERE day < ?`, d0+2)
	require.NoError(t, err)

	for _, w := range [][2]time.Time{
		{day0.Add(-time.Hour), day0.Add(4 * 24 * time.Hour)},
		{day0.Add(7 * time.Hour), day0.Add(3*24*time.Hour + 5*time.Hour)},
		{day0.Add(30 * time.Hour), day0.Add(40 * time.Hour)},
		{day0.Add(24 * time.Hour), day0.Add(3 * 24 * time.Hour)},
	} {
		want, err := WindowUse(ctx, whole.DB(), "pve", "", w[0], w[1], false)
		require.NoError(t, err)
		got, err := WindowUse(ctx, s.DB(), "pve", "", w[0], w[1], false)
		require.NoError(t, err)
		require.NotEmpty(t, want[""])
		assert.Equal(t, want, got, "window %s to %s", w[0], w[1])
	}
}
