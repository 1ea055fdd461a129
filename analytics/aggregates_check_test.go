package analytics

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkAggregates holds every aggregate of s to what its stored calls give (recomputed from them).
// It rewrites tool_day_use and the runs (compacts and rebuilds them), so
// it is the last thing a test does with s.
func checkAggregates(t *testing.T, s *Store, what string) {
	t.Helper()
	ctx := context.Background()
	read := func(q string, args ...any) string { return readString(t, s, q, args...) }

	checkToolDays(t, s, what)

	// session_peaks and grant_days of the listed days
	var days []int64
	days, err := QueryColumn[int64](ctx, s.DB(), `SELECT day FROM counted_days ORDER BY day`)
	require.NoError(t, err)
	for _, d := range days {
		start := DayStart(d)
		got := read(`SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (SELECT concat_ws('|', server, "grant", tool, day, coalesce(session, '-'), peak, calls, peak_all) AS r FROM session_peaks WHERE day = ?)`, d)
		want := read(`SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (SELECT concat_ws('|', c1, c2, c3, c4, coalesce(c5, '-'), c6, c7, c8) AS r FROM (`+
			sessionPeaksSQL(`ts >= ? AND ts < ?`)+`) t(c1, c2, c3, c4, c5, c6, c7, c8, c9))`, start, start.Add(24*time.Hour))
		assert.Equal(t, want, got, "%s: session_peaks of listed day %d", what, d)
		gotG := read(`SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (SELECT concat_ws('|', server, "grant", day, calls, allowed, event, conversation, trace, derived, gateway, list_sort(sessions), list_sort(allowed_sessions), list_sort(agents)) AS r FROM grant_days WHERE day = ?)`, d)
		wantG := read(`SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (SELECT concat_ws('|', c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, list_sort(c11), list_sort(c12), list_sort(c13)) AS r FROM (`+
			grantDaysSQL(`ts >= ? AND ts < ?`)+`) t(c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13))`, start, start.Add(24*time.Hour))
		assert.Equal(t, wantG, gotG, "%s: grant_days of listed day %d", what, d)
	}
	// alone
	assert.Zero(t, count(t, s, `SELECT count(*) FROM session_peaks p WHERE alone AND (session IS NULL OR
		(SELECT count(*) FROM session_peaks q WHERE q.server = p.server AND q.tool = p.tool AND q.session = p.session) > 1)`), "%s: alone rows that are not", what)

	// tool_day_use
	const useRows = `SELECT coalesce(string_agg(concat_ws('|', server, "grant", tool, day, calls, allowed, denied, hidden, rate_limited, approval,
	with_session, with_agent, last_allowed, hex(sessions), hex(allowed_sessions)), ',' ORDER BY server, "grant", tool, day), '') FROM tool_day_use`
	require.NoError(t, compactToolDayUse(ctx, s.wconn, time.Unix(0, 0), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)))
	gotU := read(useRows)
	_, err = s.wconn.ExecContext(ctx, `DELETE FROM tool_day_use`)
	require.NoError(t, err)
	require.NoError(t, recordToolDayUse(ctx, s.wconn, "true"))
	assert.Equal(t, read(useRows), gotU, "%s: tool_day_use", what)

	// runs
	runs, tails, wantRuns, wantTails := rebuiltState(t, s)
	assert.Equal(t, wantRuns, runs, "%s: call_runs", what)
	assert.Equal(t, wantTails, tails, "%s: run_tails", what)
}

// checkToolDays holds tool_days to what the stored calls give.
func checkToolDays(t *testing.T, s *Store, what string) {
	t.Helper()
	const toolDaysRows = `SELECT coalesce(string_agg(concat_ws('|', server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused), ',' ORDER BY server, "grant", tool, day), '') FROM `
	got := readString(t, s, toolDaysRows+`tool_days`)
	want := readString(t, s, toolDaysRows+`(SELECT server, coalesce("grant", '') AS "grant", tool, epoch_ms(ts) // 86400000 AS day, min(ts) AS first_call,
       min(ts) FILTER (decision = 'allowed') AS first_allowed, max(ts) FILTER (decision = 'allowed') AS last_allowed, max(ts) FILTER (decision <> 'allowed') AS last_refused
       FROM calls WHERE tool IS NOT NULL GROUP BY ALL)`)
	assert.Equal(t, want, got, "%s: tool_days", what)
}
