package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
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

// TestStoredRunsMatchTheScan: the window's runs read from the runs the
// store keeps equal those found by sorting the window's calls, for random
// windows whose edges fall anywhere, on calls and between the
// milliseconds' microseconds, a quarter of them ending after the last
// call, for every grant and for a server without grants; the calls stored
// in uneven batches, some of them twice.
func TestStoredRunsMatchTheScan(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	evs, err := runtraffic.Generate(5, 30000, 4*24*time.Hour, end, true)
	require.NoError(t, err)
	for i := range evs {
		if i%7 == 3 {
			evs[i].Server, evs[i].Grant = "other", "" // a server whose calls carry no grant
		}
	}
	sizes := []int{1, 7, 500, 3001, 40}
	for lo := 0; lo < len(evs); {
		hi := min(lo+sizes[0], len(evs))
		batch := evs[lo:hi]
		if lo > 30 {
			batch = append(batch[:len(batch):len(batch)], evs[lo-30:lo-25]...) // sent twice
		}
		_, err := store.Append(ctx, ingest.Batch{Events: batch})
		require.NoError(t, err)
		lo, sizes = hi, append(sizes[1:], sizes[0])
	}

	scopes := [][2]string{{"other", ""}}
	for _, g := range storedGrants(t, store) {
		scopes = append(scopes, [2]string{"proxmox-mcp", g})
	}
	require.Greater(t, len(scopes), 2)

	rng := rand.New(rand.NewPCG(5, 8))
	edge := func() time.Time {
		at := evs[rng.IntN(len(evs))].TS // on a call, or a microsecond beside one, or anywhere
		switch rng.IntN(4) {
		case 0:
			return at
		case 1:
			return at.Add(-time.Microsecond)
		case 2:
			return at.Add(time.Microsecond)
		}
		return end.Add(-time.Duration(rng.Int64N(int64(5 * 24 * time.Hour))))
	}
	var runs, edgeRuns, crossingNow int
	for i := range 80 {
		from, to := edge(), edge()
		if to.Before(from) {
			from, to = to, from
		}
		if i%4 == 0 {
			to = end.Add(time.Duration(rng.Int64N(int64(time.Hour)))) // no call after the window
		}
		for _, sc := range scopes {
			q := query{db: store.DB(), server: sc[0], grant: sc[1], from: from, to: to}
			usable, later, err := q.storedRunsUsable(ctx, 3, DefaultParams().PollMaxInterval)
			require.NoError(t, err)
			require.True(t, usable, "stored runs for %v", sc)
			names, err := q.toolNames(ctx, simulateTools(t, store))
			require.NoError(t, err)
			want, err := q.readRuns(ctx, names, scanRunsSQL(3, analytics.RunsMaxGap))
			require.NoError(t, err)
			got, err := q.runs(ctx, names, 3, analytics.RunsMaxGap)
			require.NoError(t, err)
			require.Equal(t, runLines(want), runLines(got), "window (%s, %s] of %v", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), sc)
			runs += want.len()
			var n, crossing int
			require.NoError(t, store.DB().QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (first_ts <= $3) FROM call_runs WHERE server = $1 AND "grant" = $2
				AND last_ts > $3 AND first_ts <= $4 AND (first_ts <= $3 OR last_ts > $4)`, sc[0], sc[1], from, to).Scan(&n, &crossing))
			edgeRuns += n
			if !later {
				crossingNow += crossing
			}
		}
	}
	assert.Greater(t, runs, 1000, "runs compared")
	assert.Greater(t, edgeRuns, 20, "runs cut by a window's edge")
	assert.Greater(t, crossingNow, 5, "runs crossing the start of a window with no call after it")

	q := query{db: store.DB(), server: "proxmox-mcp", from: end.Add(-24 * time.Hour), to: end}
	usable, _, err := q.storedRunsUsable(ctx, 3, DefaultParams().PollMaxInterval)
	require.NoError(t, err)
	assert.False(t, usable, "every grant together: runs are kept per grant")
	q.grant = scopes[1][1]
	usable, _, err = q.storedRunsUsable(ctx, 3, 30*time.Second)
	require.NoError(t, err)
	assert.False(t, usable, "another polling interval")
}

// simulateTools lists the stored tools.
func simulateTools(t *testing.T, store *analytics.Store) []string {
	return queryTools(t, store.DB(), `SELECT DISTINCT tool FROM calls WHERE tool IS NOT NULL`)
}

// queryTools lists the tools a query selects.
func queryTools(t *testing.T, db *sql.DB, text string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(text, args...)
	require.NoError(t, err)
	defer rows.Close()
	var tools []string
	for rows.Next() {
		var tool string
		require.NoError(t, rows.Scan(&tool))
		tools = append(tools, tool)
	}
	require.NoError(t, rows.Err())
	return tools
}

// runLines prints runs one per line, sorted: runs that start in the same
// millisecond of a session come in either order.
func runLines(rs runList) []string {
	var out []string
	for r := range rs.all() {
		out = append(out, fmt.Sprintf("%s %s<-%s %.6f %d %.6f %.6f %.6f %.6f %d %t %s %s", r.session(), r.Tool, r.StartTool, r.StartGap, r.Polls,
			r.SpanS, r.MeanGap, r.SDGap, r.MedianGap, r.Errors, r.LastErr, r.first().Format(time.RFC3339Nano), r.last().Format(time.RFC3339Nano)))
	}
	slices.Sort(out)
	return out
}

// TestStoredRunsTiesAtTheEdges: a window edge inside a millisecond that
// holds calls on both of its sides. At the start, the call before a run
// lies before the window while another call of its millisecond, ordered
// before it, lies inside: that call starts the run in the window; likewise
// for a run crossing the start from that millisecond. At the end, a call
// of the end's millisecond outside the window separates a run from a call
// that continues it inside the window: the window's run is one call longer
// than the stored one.
func TestStoredRunsTiesAtTheEdges(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	// Two tools in the order of their hashes: calls of one millisecond come
	// in that order.
	var first, second string
	require.NoError(t, store.DB().QueryRowContext(ctx, `SELECT arg_min(t, hash(t)), arg_max(t, hash(t)) FROM unnest(['get_task_status', 'list_vms']) u(t)`).Scan(&first, &second))
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	call := func(id, tool, args string, at time.Time) audit.Event {
		session := "start" // each case in its own session: any makes its session's runs read from the calls
		switch {
		case id[0] == 'l' || id == "after":
			session = "end"
		case id[0] == 'x' || id == "c1":
			session = "cross"
		}
		return audit.Event{ID: id, TS: at, Server: "pve", Grant: "g", Session: session, Tool: tool, ArgsHash: args, Decision: audit.Allowed}
	}
	evs := []audit.Event{
		call("inside", first, "x", t0.Add(800*time.Microsecond)),  // in the window: the run's start in it
		call("before", second, "y", t0.Add(100*time.Microsecond)), // before the window: the stored run's start
		call("r1", "vm_agent_exec_status", "p", t0.Add(5*time.Second)),
		call("r2", "vm_agent_exec_status", "p", t0.Add(10*time.Second)),
		call("r3", "vm_agent_exec_status", "p", t0.Add(15*time.Second)),
		call("l1", second, "z", t0.Add(time.Hour)),
		call("l2", second, "z", t0.Add(time.Hour+5*time.Second)),
		call("l3", second, "z", t0.Add(time.Hour+10*time.Second)),
		call("after", first, "w", t0.Add(time.Hour+20*time.Second+800*time.Microsecond)), // after the window, ordered first
		call("l4", second, "z", t0.Add(time.Hour+20*time.Second+100*time.Microsecond)),   // inside: continues l1-l3 there
		// A run crossing the start from its millisecond: the call of that
		// millisecond inside the window comes first, and starts it there.
		call("x1", second, "r", t0.Add(100*time.Microsecond)),
		call("c1", first, "c", t0.Add(800*time.Microsecond)),
		call("x2", second, "r", t0.Add(5*time.Second)),
		call("x3", second, "r", t0.Add(10*time.Second)),
		call("x4", second, "r", t0.Add(15*time.Second)),
	}
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	q := query{db: store.DB(), server: "pve", grant: "g", from: t0.Add(500 * time.Microsecond), to: t0.Add(time.Hour + 20*time.Second + 500*time.Microsecond)}
	names, err := q.toolNames(ctx, []string{first, second, "vm_agent_exec_status"})
	require.NoError(t, err)
	want, err := q.readRuns(ctx, names, scanRunsSQL(3, analytics.RunsMaxGap))
	require.NoError(t, err)
	require.Equal(t, 3, want.len())
	shapes := map[string]bool{}
	for r := range want.all() {
		shapes[fmt.Sprintf("%s<-%s %d", r.Tool, r.StartTool, r.Polls)] = true
	}
	assert.True(t, shapes["vm_agent_exec_status<-"+first+" 3"], "the run starts after the call inside the window: %v", shapes)
	assert.True(t, shapes[second+"<- 4"], "the run continues across the call after the window: %v", shapes)
	assert.True(t, shapes[second+"<-"+first+" 3"], "the crossing run starts after the call of the start's millisecond: %v", shapes)
	got, err := q.runs(ctx, names, 3, analytics.RunsMaxGap)
	require.NoError(t, err)
	assert.Equal(t, runLines(want), runLines(got))
}

// len is the number of runs.
func (l runList) len() int {
	n := 0
	for _, c := range l {
		n += len(c)
	}
	return n
}

// A day the retention deleted is read through the archive's view with its
// stored runs, until a call of it comes late: the store recomputed that
// session's runs without the archived calls, so they are read from the
// calls instead.
func TestStoredRunsOfADeletedDayThatACallReachedLate(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o755))
	store, err := analytics.Open(ctx, filepath.Join(tmp, "s.duckdb"), analytics.Options{ArchiveDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	poll := func(id string, at time.Duration) audit.Event {
		return audit.Event{ID: id, TS: day.Add(at), Server: "pve", Tool: "get_task_status", ArgsHash: "upid",
			Decision: audit.Allowed, Grant: "g", Session: "s1"}
	}
	var evs []audit.Event
	for i := range 10 {
		evs = append(evs, poll(fmt.Sprintf("p-%d", i), 10*time.Hour+time.Duration(i)*20*time.Second))
	}
	_, err = store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	rel := "server=pve/date=2026-11-20/calls-0.parquet"
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
	w, err := store.WriteDay(ctx, "pve", day, nil, filepath.Join(dir, rel))
	require.NoError(t, err)
	now := time.Now().UTC()
	require.NoError(t, store.RecordArchiveFile(ctx, analytics.ArchiveFile{Server: "pve", Day: day, File: rel, Rows: w.Rows, Checksum: w.Checksum, ArchivedAt: now, VerifiedAt: now}))
	_, err = store.DeleteArchived(ctx, "pve", day, []string{filepath.Join(dir, rel)}, now)
	require.NoError(t, err)

	usable := func() bool {
		adb, err := store.ArchiveDB(ctx)
		require.NoError(t, err)
		defer adb.Close()
		q := query{db: adb, server: "pve", grant: "g", from: day, to: day.Add(24 * time.Hour)}
		ok, _, err := q.storedRunsUsable(ctx, 3, DefaultParams().PollMaxInterval)
		require.NoError(t, err)
		return ok
	}
	assert.True(t, usable(), "a deleted day, through the archive's view")
	_, err = store.Append(ctx, ingest.Batch{Events: []audit.Event{poll("late", 10*time.Hour+95*time.Second)}})
	require.NoError(t, err)
	assert.False(t, usable(), "a call of the deleted day came late")
}
