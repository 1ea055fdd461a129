package analytics

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// TestSessionPeaksCountSealedDays: Recluster counts each sealed day's
// busiest minute per server, grant, tool and session (NULL for calls
// without one) into session_peaks, exactly as grouping the day's calls
// does, although the batches split minutes between them; today is not
// counted. A late call of a counted day takes the day off the list until
// the next Recluster counts it again, with the call; PeakDays lists only
// the counted days wholly inside a window.
func TestSessionPeaksCountSealedDays(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	start := today.Add(-4 * 24 * time.Hour)
	rng := rand.New(rand.NewPCG(7, 8))
	var evs []audit.Event
	for i := range 3000 {
		e := audit.Event{ID: fmt.Sprintf("e-%04d", i), TS: start.Add(time.Duration(rng.Int64N(int64(4*24*time.Hour + 6*time.Hour)))),
			Server: []string{"pve", "k8s"}[i%2], Tool: fmt.Sprintf("tool_%d", i%3), Decision: audit.Allowed,
			Grant: []string{"", "ops", "ci"}[i%3], Session: fmt.Sprintf("s-%d", rng.IntN(6))}
		switch i % 7 {
		case 1:
			e.Decision = audit.Denied // in peak_all only
		case 2:
			e.Decision = audit.RateLimited
		case 3:
			e.Session = "" // counted under its grant
		case 4:
			e.Session = fmt.Sprintf("once-%d", i) // a session of one call
		case 5:
			e.Session = fmt.Sprintf("twice-%d", i/50) // spread over days, some of them
		}
		evs = append(evs, e)
	}
	s := openTemp(t)
	appendInBatches(t, s, evs, 250)
	const stored = `SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (
		SELECT concat_ws('|', server, "grant", tool, day, coalesce(session, '-'), peak, calls, peak_all) AS r
		FROM session_peaks WHERE day IN (SELECT day FROM counted_days))`
	const fromCalls = `SELECT coalesce(string_agg(r, ',' ORDER BY r), '') FROM (
		SELECT concat_ws('|', server, g, tool, w // 1440, coalesce(s, '-'), max(n), sum(n), max(n_all)) AS r
		FROM (SELECT server, coalesce("grant", '') AS g, tool, nullif(session, '') AS s, epoch_ms(ts) // 60000 AS w,
			count(*) FILTER (decision IN ('allowed', 'rate_limited')) AS n, count(*) AS n_all
			FROM calls WHERE ts < ? GROUP BY ALL) GROUP BY server, g, tool, w // 1440, s)`
	read := func(q string, args ...any) string { return readString(t, s, q, args...) }
	require.Equal(t, "", read(stored), "nothing counted before Recluster")
	require.Positive(t, count(t, s, `SELECT count(*) FROM (SELECT server, tool, session, epoch_ms(ts) // 60000 FROM calls
		GROUP BY ALL HAVING count(DISTINCT ingested_at) > 1)`), "minutes whose calls came in several batches")

	res, err := s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 4, res.CountedDays, "the four sealed days")
	assert.Equal(t, read(fromCalls, today), read(stored))
	assert.Contains(t, read(stored), "|-|", "calls without a session")
	// A row is alone when no other row has its server, tool and session.
	const alone = `SELECT count(*) FILTER (alone), count(*) FILTER (alone <> (session IS NOT NULL AND
		(SELECT count(*) FROM session_peaks q WHERE q.server = p.server AND q.tool = p.tool AND q.session = p.session) = 1))
		FROM session_peaks p`
	checkAlone := func() {
		var n, wrong int
		require.NoError(t, s.DB().QueryRowContext(ctx, alone).Scan(&n, &wrong))
		assert.Positive(t, n, "rows alone")
		assert.Zero(t, wrong, "rows marked wrongly")
	}
	checkAlone()
	assert.Positive(t, count(t, s, `SELECT count(*) FROM (SELECT 1 FROM session_peaks WHERE session LIKE 'twice-%' GROUP BY server, tool, session HAVING count(DISTINCT day) > 1)`),
		"sessions of several days")
	assert.Zero(t, count(t, s, fmt.Sprintf(`SELECT count(*) FROM counted_days WHERE day >= %d`, dayNumber(today))), "today is not sealed")

	days, err := PeakDays(ctx, s.DB(), "pve", "", start.Add(time.Hour), today)
	require.NoError(t, err)
	assert.Equal(t, []int64{dayNumber(start) + 1, dayNumber(start) + 2, dayNumber(start) + 3}, days, "the first day only in part")

	// A late call makes a minute of the second day busier.
	var late audit.Event
	for _, e := range evs {
		if e.TS.After(start.Add(24*time.Hour)) && e.TS.Before(start.Add(48*time.Hour)) && e.Session != "" && e.Decision == audit.Allowed {
			late = e
			break
		}
	}
	late.ID = "late"
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{late}})
	require.NoError(t, err)
	days, err = PeakDays(ctx, s.DB(), "pve", "", start, today)
	require.NoError(t, err)
	assert.Equal(t, []int64{dayNumber(start), dayNumber(start) + 2, dayNumber(start) + 3}, days, "the late call's day is left to the calls")
	const all = `SELECT string_agg(r, ',' ORDER BY r) FROM (
		SELECT concat_ws('|', server, "grant", tool, day, coalesce(session, '-'), peak, calls, peak_all) AS r FROM session_peaks)`
	assert.NotEqual(t, read(fromCalls, today), read(all), "the day's rows do not count the late call")

	res, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 1, res.CountedDays, "the late call's day, again")
	assert.Equal(t, read(fromCalls, today), read(stored))
	checkAlone()
	res, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Zero(t, res.CountedDays, "nothing left to count")
}

// TestReclusterSortsPeaksByGrant: once Recluster has counted the sealed
// days, each epoch's session_peaks rows are stored sorted by server,
// grant, day, tool and session (by rowid, the order a scan meets them),
// across an epoch's boundary, and the sort changes no row. A late call
// counts its day again at the table's end: the next Recluster sorts that
// epoch again, and leaves the other one as it was.
func TestReclusterSortsPeaksByGrant(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	today := now.Truncate(24 * time.Hour)
	start := today.Add(-40 * 24 * time.Hour) // two epochs
	rng := rand.New(rand.NewPCG(3, 4))
	var evs []audit.Event
	for i := range 4000 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%04d", i), TS: start.Add(time.Duration(rng.Int64N(int64(40 * 24 * time.Hour)))),
			Server: []string{"pve", "k8s"}[i%2], Tool: fmt.Sprintf("tool_%d", i%3), Decision: audit.Allowed,
			Grant: []string{"ops", "ci", "", "helpdesk"}[i%4], Session: fmt.Sprintf("s-%d", rng.IntN(40))})
	}
	s := openTemp(t)
	appendInBatches(t, s, evs, 500)

	// The rows as counted, day by day (every grant's sessions of a day
	// together), then as clusterPeaks leaves them.
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, coalesce(session, '-'), peak, calls, peak_all, alone), ','
		ORDER BY server, "grant", tool, day, session) FROM session_peaks`
	// unsorted counts, per epoch, the rows that come after one sorting
	// after them, in rowid order.
	const unsorted = `SELECT count(*) FROM (
		SELECT (server, "grant", day, tool, coalesce(session, '')) AS k,
		       lag((server, "grant", day, tool, coalesce(session, ''))) OVER (PARTITION BY day // 32 ORDER BY rowid) AS prev
		FROM session_peaks) WHERE k < prev`
	counted, err := s.countSealedDays(ctx, today)
	require.NoError(t, err)
	require.Equal(t, 40, counted)
	asCounted := readString(t, s, rows)
	require.Positive(t, count(t, s, unsorted), "counted a day at a time, every grant's rows interleave")
	require.Equal(t, 2, count(t, s, `SELECT count(DISTINCT day // 32) FROM session_peaks`), "two epochs")

	_, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Zero(t, count(t, s, unsorted), "each epoch sorted")
	assert.Equal(t, asCounted, readString(t, s, rows), "the same rows")
	assert.Equal(t, 2, count(t, s, `SELECT count(*) FROM peaks_clustered`))

	// A late call of the first day (the first epoch) counts the day again.
	late := evs[0]
	for _, e := range evs {
		if e.TS.Before(late.TS) {
			late = e
		}
	}
	late.ID = "late"
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{late}})
	require.NoError(t, err)
	lateEpoch := dayNumber(late.TS) / peaksEpochDays
	other := readString(t, s, fmt.Sprintf(`SELECT string_agg(rowid::VARCHAR, ',' ORDER BY rowid) FROM session_peaks WHERE day // 32 <> %d`, lateEpoch))
	res, err := s.Recluster(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 1, res.CountedDays, "the late call's day")
	assert.Zero(t, count(t, s, unsorted), "its epoch sorted again")
	assert.Equal(t, 2, count(t, s, `SELECT count(*) FROM peaks_clustered`))
	assert.Equal(t, other, readString(t, s, fmt.Sprintf(`SELECT string_agg(rowid::VARCHAR, ',' ORDER BY rowid) FROM session_peaks WHERE day // 32 <> %d`, lateEpoch)),
		"the other epoch's rows where they were")
}
