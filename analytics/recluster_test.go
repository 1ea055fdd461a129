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

// TestReclusterSortsSealedDaysByGrant: Recluster rewrites the calls of
// sealed days a week at a time, each week's calls along the row ids sorted
// by server, grant, time and id, the calls themselves unchanged; today's
// calls stay where they are stored, as do calls arriving later with an
// older time; a stored call sent again is still a duplicate; a short span
// waits for enough calls, a full week (or an empty one) does not.
func TestReclusterSortsSealedDaysByGrant(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	start := now.Add(-20 * 24 * time.Hour)
	var evs []audit.Event
	for i := range 4100 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%04d", i), TS: start.Add(time.Duration(i) * 7 * time.Minute), Server: []string{"pve", "k8s"}[i%2],
			Tool: fmt.Sprintf("tool_%d", i%5), Decision: audit.Allowed, Grant: []string{"", "ops", "ci"}[i%3], Session: fmt.Sprintf("s-%d", i/40)})
	}
	// The last calls fall today (not sealed); the batches come out of order.
	require.True(t, evs[len(evs)-1].TS.After(now.Truncate(24*time.Hour)))
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	s := openTemp(t)
	appendInBatches(t, s, evs, 700)
	read := func(q string, args ...any) string { return readString(t, s, q, args...) }
	const content = `SELECT string_agg(concat_ws('|', id, ts, server, tool, decision, "grant", session, ingested_at, session_source), ',' ORDER BY id) FROM calls`
	today := `SELECT string_agg(concat_ws('|', rowid, id), ',' ORDER BY rowid) FROM calls WHERE ts >= ?`
	stored, todays := read(content), read(today, now.Truncate(24*time.Hour))
	// tool_day_use: a row per batch that stored calls of a key, each
	// sealed day's merged into one by the recluster, today's left alone.
	repeated := func(op string) int {
		return count(t, s, `SELECT count(*) FROM (SELECT 1 FROM tool_day_use WHERE day `+op+` `+fmt.Sprint(now.UnixMilli()/86_400_000)+`
			GROUP BY server, "grant", tool, day HAVING count(*) > 1)`)
	}
	use := `SELECT string_agg(r, ',' ORDER BY r) FROM (SELECT concat_ws('|', server, "grant", tool, day, sum(calls), sum(allowed), count(*)) AS r
		FROM tool_day_use GROUP BY server, "grant", tool, day)`
	require.Positive(t, repeated("<"))
	require.Positive(t, repeated("="))
	uses := read(use)

	res, err := s.recluster(ctx, now, 100, ReclusterMaxCalls)
	require.NoError(t, err)
	assert.Zero(t, repeated("<"), "a row per key of the sealed days")
	assert.Positive(t, repeated("="), "today's rows as they were")
	assert.NotEqual(t, uses, read(use))
	assert.Equal(t, read(`SELECT string_agg(r, ',' ORDER BY r) FROM (SELECT concat_ws('|', server, "grant", tool, day, sum(calls), sum(allowed)) AS r
		FROM tool_day_use GROUP BY server, "grant", tool, day)`),
		read(`SELECT string_agg(r, ',' ORDER BY r) FROM (SELECT concat_ws('|', server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, count(*),
		count(*) FILTER (decision = 'allowed')) AS r FROM calls GROUP BY server, "grant", tool, epoch_ms(ts) // 86400000)`),
		"the same counts")
	assert.Equal(t, now.Truncate(24*time.Hour), res.Until)
	assert.Equal(t, 3, res.Spans, "20 sealed days: two weeks and six days")
	assert.Equal(t, stored, read(content), "the same calls")
	assert.Equal(t, todays, read(today, now.Truncate(24*time.Hour)), "today's calls where they were")
	var sealedCalls, misplaced int64
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE ts < ?`, res.Until).Scan(&sealedCalls))
	assert.Equal(t, sealedCalls, res.Calls)
	// Along the row ids, each week's calls in (server, grant, ts, id) order
	// (calls without a grant last, as ORDER BY puts NULL).
	require.NoError(t, s.DB().QueryRowContext(ctx, `
SELECT count(*) FROM (
	SELECT (epoch_ms(ts) - epoch_ms(?::TIMESTAMPTZ)) // (7 * 86400000) AS week, server, "grant", ts, id,
	       lag((epoch_ms(ts) - epoch_ms(?::TIMESTAMPTZ)) // (7 * 86400000)) OVER w AS p_week, lag(server) OVER w AS p_server,
	       lag("grant") OVER w AS p_grant, lag(ts) OVER w AS p_ts, lag(id) OVER w AS p_id
	FROM calls WHERE ts < ? WINDOW w AS (ORDER BY rowid))
WHERE p_week IS NOT NULL AND (week, server, "grant" IS NULL, coalesce("grant", ''), ts, id) < (p_week, p_server, p_grant IS NULL, coalesce(p_grant, ''), p_ts, p_id)`,
		start.Truncate(24*time.Hour), start.Truncate(24*time.Hour), res.Until).Scan(&misplaced))
	assert.Zero(t, misplaced)

	again, err := s.recluster(ctx, now, 100, ReclusterMaxCalls)
	require.NoError(t, err)
	assert.Zero(t, again.Spans, "nothing new")
	// Sent again: duplicates still. A late call: stored where it lands.
	dup, err := s.Append(ctx, ingest.Batch{Events: append(evs[:5:5], audit.Event{ID: "late", TS: start.Add(time.Hour), Server: "pve", Tool: "tool_1", Decision: audit.Allowed})})
	require.NoError(t, err)
	assert.Equal(t, 5, dup.Duplicates)
	assert.Equal(t, 1, dup.Ingested)
	late, err := s.recluster(ctx, now, 100, ReclusterMaxCalls)
	require.NoError(t, err)
	assert.Zero(t, late.Spans)

	// Tomorrow today's calls are sealed, fewer than the span waits for.
	tomorrow := now.Add(24 * time.Hour)
	wait, err := s.recluster(ctx, tomorrow, 1000, ReclusterMaxCalls)
	require.NoError(t, err)
	assert.Zero(t, wait.Spans)
	assert.Positive(t, wait.Waiting)
	assert.Equal(t, res.Until, wait.Until)
	// A week on, the span is full: rewritten, then the empty weeks after it.
	later, err := s.recluster(ctx, now.Add(30*24*time.Hour), 1000, ReclusterMaxCalls)
	require.NoError(t, err)
	assert.Equal(t, wait.Waiting, later.Calls)
	assert.Equal(t, res.Until.Add(4*ReclusterSpan), later.Until, "30 days: four full weeks, and two days that wait")
	assert.Equal(t, 4, later.Spans)
	assert.Zero(t, later.Waiting)
	var n int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM calls`).Scan(&n))
	assert.Equal(t, len(evs)+1, n)
}

// TestReclusterShortensCrowdedSpans: a week with more calls than a span
// may hold goes in shorter spans, each within the bound, until every
// sealed call is clustered.
func TestReclusterShortensCrowdedSpans(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	start := now.Add(-10 * 24 * time.Hour).Truncate(24 * time.Hour)
	var evs []audit.Event
	for i := range 2000 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%04d", i), TS: start.Add(time.Duration(i) * 7 * time.Minute), Server: "pve",
			Tool: "tool", Decision: audit.Allowed, Grant: []string{"ops", "ci"}[i%2]})
	}
	s := openTemp(t)
	_, err := s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	sealed := now.Truncate(24 * time.Hour)
	var calls int64
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE ts < ?`, sealed).Scan(&calls))

	res, err := s.recluster(ctx, now, 100, 300)
	require.NoError(t, err)
	assert.Equal(t, sealed, res.Until)
	assert.Equal(t, calls, res.Calls)
	assert.LessOrEqual(t, res.Largest, int64(300))
	assert.GreaterOrEqual(t, int64(res.Spans), calls/300)
	assert.Zero(t, res.Waiting)
}

// TestReclusterBesideAppends: batches stored while spans are rewritten
// (new calls, and late ones inside the spans being sorted) are all kept,
// each once.
func TestReclusterBesideAppends(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	start := now.Add(-30 * 24 * time.Hour)
	s := openTemp(t)
	event := func(i int, ts time.Time) audit.Event {
		return audit.Event{ID: fmt.Sprintf("e-%05d", i), TS: ts, Server: "pve", Tool: "tool", Decision: audit.Allowed, Grant: []string{"ops", "ci", "qa"}[i%3]}
	}
	var first []audit.Event
	for i := range 6000 {
		first = append(first, event(i, start.Add(time.Duration(i)*7*time.Minute)))
	}
	_, err := s.Append(ctx, ingest.Batch{Events: first})
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		rng := rand.New(rand.NewPCG(7, 8))
		for b := range 40 {
			var batch []audit.Event
			for j := range 50 {
				i := 6000 + b*50 + j
				ts := now.Add(time.Duration(i) * time.Second) // new
				if j%2 == 0 {
					ts = start.Add(time.Duration(rng.Int64N(int64(29 * 24 * time.Hour)))) // late, inside a span
				}
				batch = append(batch, event(i, ts))
			}
			batch = append(batch, first[b*10]) // sent again
			if _, err := s.Append(ctx, ingest.Batch{Events: batch}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for day := range 6 {
		_, err := s.recluster(ctx, now.Add(time.Duration(day)*24*time.Hour), 100, 500)
		require.NoError(t, err)
	}
	require.NoError(t, <-done)
	var rows, ids int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT id) FROM calls`).Scan(&rows, &ids))
	assert.Equal(t, 6000+40*50, rows)
	assert.Equal(t, rows, ids)
}
