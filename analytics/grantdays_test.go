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

// grantDayEvents are n calls from start over four days and six hours, of
// two servers and three grants (one empty), with every kind of session
// key (the event's, a conversation's, a gateway's, none), agents or none,
// each decision, and calls that name no tool.
func grantDayEvents(n int, start time.Time) []audit.Event {
	rng := rand.New(rand.NewPCG(3, 4))
	evs := make([]audit.Event, 0, n)
	for i := range n {
		e := audit.Event{ID: fmt.Sprintf("e-%04d", i), TS: start.Add(time.Duration(rng.Int64N(int64(4*24*time.Hour + 6*time.Hour)))),
			Server: []string{"pve", "k8s"}[i%2], Tool: fmt.Sprintf("tool_%d", i%3), Decision: audit.Allowed,
			Grant: []string{"", "ops", "ci"}[i%3], Session: fmt.Sprintf("s-%d", rng.IntN(40)), Agent: fmt.Sprintf("agent-%d", i%4)}
		switch i % 9 {
		case 1:
			e.Decision = audit.Denied
		case 2:
			e.Decision = audit.RateLimited
		case 3:
			e.Session, e.Gateway, e.Agent = "", "gw-1", "" // keyed by its gateway
		case 4:
			e.Session, e.Gateway, e.Agent = "", "", "" // no session key
		case 5:
			e.Session, e.Attrs = "", map[string]string{audit.AttrConversationID: fmt.Sprintf("c-%d", rng.IntN(9))}
		case 6:
			e.Tool, e.Method = "", "tools/list" // a call of no tool
		}
		evs = append(evs, e)
	}
	return evs
}

// grantDaysFromCalls lists, one string per server, grant and day of the
// calls that where selects, what grant_days should hold: the counts, and
// the sorted session hashes, allowed sessions' hashes and agents.
func grantDaysFromCalls(where string) string {
	return `SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (
	SELECT concat_ws('|', server, coalesce("grant", ''), epoch_ms(ts) // 86400000, count(*),
		count(*) FILTER (decision = 'allowed'),
		count(*) FILTER (session_source = 'event'), count(*) FILTER (session_source = 'conversation'),
		count(*) FILTER (session_source = 'trace'), count(*) FILTER (session_source = 'derived'),
		count(*) FILTER (session_source = 'gateway'),
		coalesce(list_sort(list(DISTINCT hash(` + SessionKey + `)) FILTER (` + SessionKey + ` <> ''))::VARCHAR, '[]'),
		coalesce(list_sort(list(DISTINCT hash(` + SessionKey + `)) FILTER (` + SessionKey + ` <> '' AND decision = 'allowed'))::VARCHAR, '[]'),
		coalesce(list_sort(list(DISTINCT agent) FILTER (agent IS NOT NULL))::VARCHAR, '[]')) AS r
	FROM calls WHERE ` + where + ` GROUP BY server, coalesce("grant", ''), epoch_ms(ts) // 86400000)`
}

// grantDaysListed is the same of the grant_days rows of the listed days.
const grantDaysListed = `SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (
	SELECT concat_ws('|', server, "grant", day, calls, allowed, event, conversation, trace, derived, gateway,
		list_sort(sessions)::VARCHAR, list_sort(allowed_sessions)::VARCHAR, list_sort(agents)::VARCHAR) AS r
	FROM grant_days WHERE day IN (SELECT day FROM counted_days))`

// TestGrantDaysCountSealedDays: Recluster counts each sealed day's calls
// per server and grant into grant_days, as grouping the day's calls does
// (calls of no tool too), although batches split the day; today is not
// counted. A late call of a counted day takes it off the list until the
// next Recluster counts it again. FigureDays leaves out a window's first
// day when a call at its very start, even one of no tool, is left out of
// the window, where PeakDays looks at calls of tools only.
func TestGrantDaysCountSealedDays(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	start := today.Add(-4 * 24 * time.Hour)
	evs := grantDayEvents(3000, start)
	s := openTemp(t)
	appendInBatches(t, s, evs, 250)
	read := func(q string, args ...any) string { return readString(t, s, q, args...) }
	require.Equal(t, "", read(grantDaysListed), "nothing counted before Recluster")
	for _, source := range []string{audit.SessionFromEvent, audit.SessionFromConversation, audit.SessionFromGateway} {
		require.Positive(t, count(t, s, `SELECT count(*) FROM calls WHERE session_source = '`+source+`'`), source)
	}
	require.Positive(t, count(t, s, `SELECT count(*) FROM calls WHERE tool IS NULL`), "calls of no tool")

	res, err := s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 4, res.CountedDays, "the four sealed days")
	want := read(grantDaysFromCalls(`ts < ?`), today)
	assert.Equal(t, want, read(grantDaysListed))
	assert.Equal(t, 4*2*3, count(t, s, `SELECT count(*) FROM grant_days`), "a row per day, server and grant; none of today")

	// A call of no tool at the very start of the second day: a window
	// starting there leaves it out, so the day's row cannot stand for it.
	second := start.Add(24 * time.Hour)
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{{ID: "at-midnight", TS: second, Server: "pve", Method: "tools/list", Decision: audit.Allowed}}})
	require.NoError(t, err)
	_, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	days, err := FigureDays(ctx, s.DB(), "pve", "", second, today)
	require.NoError(t, err)
	assert.Equal(t, []int64{dayNumber(second) + 1, dayNumber(second) + 2}, days, "the first day left to the calls")
	days, err = PeakDays(ctx, s.DB(), "pve", "", second, today)
	require.NoError(t, err)
	assert.Equal(t, []int64{dayNumber(second), dayNumber(second) + 1, dayNumber(second) + 2}, days, "no call of a tool at the start")

	// A late call of the third day.
	late := audit.Event{ID: "late", TS: second.Add(30 * time.Hour), Server: "k8s", Grant: "ci", Tool: "tool_1", Decision: audit.Allowed, Session: "late-session", Agent: "late-agent"}
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{late}})
	require.NoError(t, err)
	days, err = FigureDays(ctx, s.DB(), "k8s", "", start, today)
	require.NoError(t, err)
	assert.NotContains(t, days, dayNumber(late.TS), "the late call's day is left to the calls")
	res, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 1, res.CountedDays, "the late call's day, again")
	assert.Equal(t, read(grantDaysFromCalls(`ts < ?`), today), read(grantDaysListed))
	assert.Contains(t, read(grantDaysListed), "late-agent")
}

// A database whose days were counted into session_peaks before grant_days
// existed (version 11) gets those days' grant_days rows from their calls
// when it is migrated; the days not listed stay left to the calls. The
// list keeps its days under its new name (migration 13).
func TestMigrationCountsGrantDaysOfListedDays(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	path := filepath.Join(t.TempDir(), "old.duckdb")
	s := openAtVersion(t, path, 11)
	// Version 11's Append and Recluster, through stand-ins of the tables
	// they lack (the list under its later name, its days then moved to the
	// old one).
	_, err := s.DB().Exec(grantDaysSchema + countedDaysTable + peaksClusteredSchema + toolDaysStandIn)
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: grantDayEvents(2000, today.Add(-4*24*time.Hour))})
	require.NoError(t, err)
	_, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	_, err = s.DB().Exec(toolDaysTable + `INSERT INTO session_peaks_days SELECT day FROM counted_days; DROP TABLE counted_days; DROP TABLE grant_days; DROP TABLE peaks_clustered;
		DELETE FROM session_peaks_days WHERE day = (SELECT max(day) FROM session_peaks_days)`)
	require.NoError(t, err)
	require.Equal(t, 3, count(t, s, `SELECT count(*) FROM session_peaks_days`))
	daysIn := func(s *Store, table string) string {
		return readString(t, s, `SELECT string_agg(day::VARCHAR, ',' ORDER BY day) FROM `+table)
	}
	listed := daysIn(s, "session_peaks_days")
	require.NoError(t, s.Close())

	m, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer m.Close()
	var want, got string
	assert.Equal(t, listed, daysIn(m, "counted_days"), "the listed days, under the list's new name")
	require.NoError(t, m.DB().QueryRow(grantDaysFromCalls(`epoch_ms(ts) // 86400000 IN (SELECT day FROM counted_days)`)).Scan(&want))
	require.NoError(t, m.DB().QueryRow(grantDaysListed).Scan(&got))
	assert.Equal(t, want, got, "the listed days' rows count their calls")
	assert.Equal(t, 3*2*3, count(t, m, `SELECT count(*) FROM grant_days`), "the listed days' rows only")
}
