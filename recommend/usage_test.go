package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/simulate"
)

// TestToolUsageFromToolDays: the tool usage read with tool_days for the
// days before the window's first day equals the one scanned from every
// call, for windows of a day or longer starting at any time of day, for
// each grant and for all, and for every grant at once (grantUsage), on a
// store filled in uneven batches (so that a day's calls span many of
// them); and the history it reads is exercised.
func TestToolUsageFromToolDays(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	end := time.Date(2026, 11, 29, 17, 23, 0, 0, time.UTC)
	sizes := []int{1, 7, 500, 3001}
	var batch []audit.Event
	flush := func() error {
		_, err := store.Append(ctx, ingest.Batch{Events: batch})
		batch = batch[:0]
		sizes = append(sizes[1:], sizes[0])
		return err
	}
	_, err := simulate.Generate(ctx, simulate.Options{Scenario: "proxmox", Seed: 3, Now: end, Duration: 120 * 24 * time.Hour, Count: 40000},
		func(e audit.Event) error {
			batch = append(batch, e)
			if len(batch) >= sizes[0] {
				return flush()
			}
			return nil
		})
	require.NoError(t, err)
	// Calls without a session, some with a gateway to stand in for it:
	// they count as calls but not as sessions.
	for i := range 400 {
		e := audit.Event{ID: fmt.Sprintf("nosession-%d", i), TS: end.Add(-time.Duration(i) * 7 * time.Hour), Server: "proxmox-mcp",
			Tool: []string{"get_vm_status", "list_vms", "delete_vm"}[i%3], Decision: []audit.Decision{audit.Allowed, audit.Denied}[i%2],
			Grant: []string{"", "ops-bot"}[i/2%2]}
		if i%5 == 0 {
			e.Gateway = fmt.Sprintf("gw-%d", i%3)
		}
		batch = append(batch, e)
	}
	// Calls at the instants where a window's parts meet: each midnight
	// (where the days read from tool_day_use meet those read from the
	// calls), and each window's start (not in it) and end (in it).
	windows := []time.Duration{24 * time.Hour, 36 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	// A window from midnight takes its first day whole from tool_day_use
	// unless a call is at that very instant (ops-bot's edge calls below).
	ends := []time.Time{end, end.Add(-17*24*time.Hour - 5*time.Hour - 13*time.Minute), end.Add(-45*24*time.Hour + time.Millisecond), end.Truncate(24 * time.Hour)}
	var edges []time.Time
	for d := range 121 {
		edges = append(edges, end.Truncate(24*time.Hour).Add(-time.Duration(d)*24*time.Hour))
	}
	for _, w := range windows {
		for _, to := range ends {
			edges = append(edges, to, to.Add(-w))
		}
	}
	for i, ts := range edges {
		batch = append(batch, audit.Event{ID: fmt.Sprintf("edge-%d", i), TS: ts, Server: "proxmox-mcp", Tool: "get_vm_status",
			Decision: audit.Allowed, Grant: "ops-bot", Session: fmt.Sprintf("edge-session-%d", i)})
	}
	require.NoError(t, flush())
	var noSession int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FROM calls WHERE `+sessionKey+` = ''`).Scan(&noSession))
	require.Positive(t, noSession)

	grants := append([]string{""}, storedGrants(t, store)...)
	require.Greater(t, len(grants), 1)

	history := 0
	for _, window := range windows {
		for _, to := range ends {
			server := query{db: store.DB(), server: "proxmox-mcp", from: to.Add(-window), to: to}
			byGrant, err := grantUsage(ctx, server, window)
			require.NoError(t, err)
			for _, grant := range grants {
				q := server
				q.grant = grant
				got, err := q.toolUsage(ctx, window)
				require.NoError(t, err)
				scanned, err := q.readUsage(ctx, "tool usage", usageScanSQL, sql.Named("period_ms", window.Milliseconds()))
				require.NoError(t, err)
				want := scanned[""]
				require.NotEmpty(t, want, "window %s to %s grant %q", window, to, grant)
				require.Equal(t, usageValues(want), usageValues(got), "window %s to %s grant %q", window, to, grant)
				if grant != "" {
					require.Equal(t, usageValues(want), usageValues(byGrant[grant]), "every grant's at once: window %s to %s grant %q", window, to, grant)
				}
				for _, u := range got {
					if u.EarlierPeriods > 1 && u.LastAllowed != nil {
						history++
					}
				}
			}
		}
	}
	assert.Positive(t, history, "tools with allowed calls in several periods before the window")
}

// storedGrants lists the grants of the stored calls.
func storedGrants(t *testing.T, store *analytics.Store) []string {
	t.Helper()
	rows, err := store.DB().Query(`SELECT DISTINCT "grant" FROM calls WHERE "grant" IS NOT NULL ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var grants []string
	for rows.Next() {
		var g string
		require.NoError(t, rows.Scan(&g))
		grants = append(grants, g)
	}
	require.NoError(t, rows.Err())
	return grants
}

func usageValues(m map[string]*usage) map[string]usage {
	out := make(map[string]usage, len(m))
	for k, u := range m {
		out[k] = *u
	}
	return out
}

// TestFiguresHistoryDays: history before the window, even with no call
// between the window's first day and its start, makes the whole window
// covered; without it the days covered run from the first call.
func TestFiguresHistoryDays(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	to := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	from := to.Add(-30 * 24 * time.Hour)
	call := func(id string, ts time.Time) audit.Event {
		return audit.Event{ID: id, TS: ts, Server: "pve", Tool: "get_vm_status", Decision: audit.Allowed}
	}
	// The window starts at 18:00; its first day's calls end at 06:00.
	_, err := store.Append(ctx, ingest.Batch{Events: []audit.Event{call("late", to.Add(-5*24*time.Hour)), call("day0", from.Add(-12*time.Hour))}})
	require.NoError(t, err)
	q := query{db: store.DB(), server: "pve", from: from, to: to}
	f, err := q.scopeFigures(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 30, f.window.HistoryDays, "a call before the window")

	q.server = "git"
	_, err = store.Append(ctx, ingest.Batch{Events: []audit.Event{{ID: "g", TS: to.Add(-5 * 24 * time.Hour), Server: "git", Tool: "x", Decision: audit.Allowed}}})
	require.NoError(t, err)
	f, err = q.scopeFigures(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 5, f.window.HistoryDays, "history starts inside the window")

	_, err = store.Append(ctx, ingest.Batch{Events: []audit.Event{{ID: "g0", TS: from.Add(-40 * 24 * time.Hour), Server: "git", Tool: "x", Decision: audit.Allowed}}})
	require.NoError(t, err)
	f, err = q.scopeFigures(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, 30, f.window.HistoryDays, "a call days before the window's first day")
}
