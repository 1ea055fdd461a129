package recommend

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
)

// TestGrantFiguresMatchEachScope: the window figures RecommendGrants counts
// for every grant and the server in one pass equal those each grant's and
// the server's own count gives (calls, sessions, agents, days, session
// sources, allowed calls and sessions, the days history covers), for
// random windows, and those counted the plain way (directFigures); calls
// without a grant count as ungranted, apart from the grants, and in the
// server's figures; a session shared by two grants counts once for the
// server; calls without a session key count as calls, not sessions. Each
// holds before Recluster counted the sealed days into grant_days (every
// day from the calls) and after (the listed days wholly inside a window
// from their rows, the rest from the calls), when the rows are read: a
// window of listed days counts what they hold.
func TestGrantFiguresMatchEachScope(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	store := trafficStore(t, 9, 6000, 6*24*time.Hour, end, func(i int, e *audit.Event) {
		switch i % 11 {
		case 4:
			e.Grant = "" // ungranted
		case 7:
			e.Grant = "shared" // in another grant, in a session of its own grant too
		case 9:
			e.Agent = ""
		case 10:
			e.Session, e.Gateway, e.Agent = "", "", "" // no session key (nor one to derive)
		case 2:
			e.Session, e.Gateway, e.Agent = "", "gw-1", "" // the gateway stands in for it
		}
	})
	var keyless int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FROM calls WHERE `+sessionKey+` = ''`).Scan(&keyless))
	require.Positive(t, keyless, "calls without a session key")

	var sawShared, sawUngranted, sawListed bool
	for _, counted := range []bool{false, true} {
		if counted {
			res, err := store.Recluster(ctx, end)
			require.NoError(t, err)
			require.Equal(t, 6, res.CountedDays, "the six sealed days counted")
		}
		rng := rand.New(rand.NewPCG(9, 1))
		windows := [][2]time.Time{{end.Add(-4 * 24 * time.Hour), end}, {end.Add(-5 * 24 * time.Hour), end.Add(-2 * 24 * time.Hour)}}
		for range 25 {
			from := end.Add(-time.Duration(rng.Int64N(int64(8 * 24 * time.Hour))))
			windows = append(windows, [2]time.Time{from, from.Add(time.Duration(rng.Int64N(int64(5 * 24 * time.Hour))))})
		}
		for _, w := range windows {
			days, err := analytics.FigureDays(ctx, store.DB(), "proxmox-mcp", "", w[0], w[1])
			require.NoError(t, err)
			if !counted {
				require.Empty(t, days, "no day listed before Recluster")
			}
			sawListed = sawListed || len(days) > 0
			checkGrantFigures(t, store, w[0], w[1], &sawShared, &sawUngranted)
		}
	}
	assert.True(t, sawShared && sawUngranted && sawListed, "the windows held ungranted calls, the shared grant and listed days")

	// The listed days' rows are what the figures read.
	_, err := store.DB().Exec(`UPDATE grant_days SET calls = calls + 1000`)
	require.NoError(t, err)
	q := query{db: store.DB(), server: "proxmox-mcp", from: end.Add(-4 * 24 * time.Hour), to: end}
	_, all, _, _, err := grantFigures(ctx, q)
	require.NoError(t, err)
	assert.Greater(t, all.window.Calls, directFigures(t, q).window.Calls+3000, "the calls of the listed days, as their rows hold them")
}

// checkGrantFigures compares, for the window (from, to], the figures of
// the server and of each grant grantFigures counts with directFigures'.
func checkGrantFigures(t *testing.T, store *analytics.Store, from, to time.Time, sawShared, sawUngranted *bool) {
	t.Helper()
	ctx := context.Background()
	q := query{db: store.DB(), server: "proxmox-mcp", from: from, to: to}
	byGrant, all, grants, ungranted, err := grantFigures(ctx, q)
	require.NoError(t, err)
	want := directFigures(t, q)
	got, err := q.scopeFigures(ctx, all)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the server's figures, %s to %s", from, to)
	own, err := q.scopeFigures(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, want, own, "the server's own count, %s to %s", from, to)
	listed, unlisted, err := Grants(ctx, store.DB(), "proxmox-mcp", from, to)
	require.NoError(t, err)
	assert.Equal(t, listed, grants, "the grants, as Grants lists them")
	assert.Equal(t, unlisted, ungranted, "the ungranted calls, as Grants counts them")
	*sawUngranted = *sawUngranted || ungranted > 0
	*sawShared = *sawShared || slices.Contains(grants, "shared")
	for _, g := range grants {
		scope := q
		scope.grant = g
		want := directFigures(t, scope)
		require.NotNil(t, byGrant[g], "grant %s", g)
		got, err := scope.scopeFigures(ctx, byGrant[g])
		require.NoError(t, err)
		assert.Equal(t, want, got, "grant %s, %s to %s", g, from, to)
		own, err := scope.scopeFigures(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, want, own, "grant %s's own count, %s to %s", g, from, to)
	}
	assert.Len(t, byGrant, len(grants), "figures for the grants alone")
}

// directFigures counts a scope's figures the plain way, each a count
// (DISTINCT) over the scope's calls, with the window's dates.
func directFigures(t *testing.T, q query) figures {
	t.Helper()
	var f figures
	w := &f.window
	require.NoError(t, q.db.QueryRow(`
SELECT count(*), count(DISTINCT `+sessionKey+`) FILTER (`+sessionKey+` <> ''), count(DISTINCT agent),
       count(DISTINCT epoch_ms(ts) // 86400000),
       count(*) FILTER (session_source = 'event'), count(*) FILTER (session_source = 'conversation'),
       count(*) FILTER (session_source = 'trace'), count(*) FILTER (session_source = 'derived'),
       count(*) FILTER (session_source = 'gateway'), count(*) FILTER (decision = 'allowed'),
       count(DISTINCT `+sessionKey+`) FILTER (`+sessionKey+` <> '' AND decision = 'allowed')
FROM calls WHERE `+inWindow, q.args()...).Scan(&w.Calls, &w.Sessions, &w.Agents, &f.activeDays,
		&w.SessionSources.Event, &w.SessionSources.Conversation, &w.SessionSources.Trace, &w.SessionSources.Derived,
		&w.SessionSources.Gateway, &f.allowed, &f.allowedSessions))
	require.NoError(t, q.dates(context.Background(), w))
	return f
}

// The figures given to Recommend are the ones it reports: a scope's own
// count is not run again (Options.figures).
func TestRecommendUsesTheFiguresGiven(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	_, err := store.Append(ctx, ingest.Batch{Events: []audit.Event{
		{ID: "a", TS: now.Add(-time.Hour), Server: "pve", Tool: "get_vm_status", Decision: audit.Allowed, Session: "s"},
	}})
	require.NoError(t, err)
	given := &figures{window: Window{Calls: 7, Sessions: 5}, activeDays: 3, allowed: 6, allowedSessions: 4}
	r, err := Recommend(ctx, store.DB(), Options{Server: "pve", Now: now, Params: DefaultParams(), figures: given})
	require.NoError(t, err)
	assert.Equal(t, int64(7), r.Window.Calls)
	assert.Equal(t, int64(5), r.Window.Sessions)
}

// tempStore is an empty store in a file of the test's own, closed when the
// test ends.
// trafficStore is a store holding runtraffic's n events (with seed, over
// span up to end, sessionless ones among them), each first changed by edit,
// appended in one batch.
func trafficStore(t *testing.T, seed int64, n int, span time.Duration, end time.Time, edit func(i int, e *audit.Event)) *analytics.Store {
	t.Helper()
	store := tempStore(t)
	evs, err := runtraffic.Generate(seed, n, span, end, true)
	require.NoError(t, err)
	for i := range evs {
		edit(i, &evs[i])
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	return store
}

func tempStore(t *testing.T) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "calls.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}
