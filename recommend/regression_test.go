package recommend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// policyChangeStore stores the calls of a policy change up to end, in
// batches of 500 as a daemon would.
func policyChangeStore(t *testing.T, pc simulate.PolicyChange, end time.Time) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "pc.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	evs := simulate.PolicyChangeEvents(pc, end)
	for len(evs) > 0 {
		k := min(len(evs), 500)
		_, err := store.Append(context.Background(), ingest.Batch{Events: evs[:k]})
		require.NoError(t, err)
		evs = evs[k:]
	}
	return store
}

// scope is a regression scope over the default window, with no policy.
func scope(server, grant string, at time.Time) recommend.RegressionScope {
	return recommend.RegressionScope{Server: server, Grant: grant, Now: at, Lookback: 30 * 24 * time.Hour}
}

const (
	v1Policy = `{"version":"1","default":"deny","tools":{"get_vm_status":{},"list_backups":{"limits":[{"counter":"lb","window":"hour","max":60}]},"list_vms":{}}}`
	v2Policy = `{"version":"1","default":"deny","hide":["delete_vm","list_backups"],"tools":{"get_vm_status":{},"list_vms":{}}}`
)

// TestRegressionWhenANewVersionHidesADailyTool: version 2 hides the tool an
// agent calls every day. Within the first hour under version 2 (after 5,
// 20 and 55 minutes) the regression is found with the refused calls as
// evidence and the revert as a JSON Patch that restores the tool's rule
// from the policy recorded before; its evidence.sql gives its numbers; a
// version change that refuses only a tool nobody used raises nothing, and
// neither does going back to version 1.
func TestRegressionWhenANewVersionHidesADailyTool(t *testing.T) {
	change := now.Add(-2 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily, Days: 21}
	store := policyChangeStore(t, pc, change.Add(time.Hour))
	current, previous := parsePolicy(t, v2Policy), parsePolicy(t, v1Policy)

	for _, after := range []time.Duration{5 * time.Minute, 20 * time.Minute, 55 * time.Minute} {
		at := change.Add(after)
		r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: pc.Server, Grant: pc.Grant, Now: at,
			Params: recommend.DefaultParams(), Current: current, Previous: previous})
		require.NoError(t, err)
		regs := findings(r, recommend.KindRegression)
		require.Len(t, regs, 1, "%s after the change: %v", after, regs)
		f, ok := regs[simulate.PolicyChangeUsedDaily]
		require.True(t, ok)
		assert.Equal(t, "regression:proxmox-mcp:ops:list_backups", f.ID)
		assert.Equal(t, "high", f.Severity)
		assert.Equal(t, "v2", f.Evidence["policy_version"])
		assert.Equal(t, "v1", f.Evidence["previous_version"])
		assert.Equal(t, change.Add(7*time.Second), f.Evidence["since"])
		// list_backups at :00:07, :15:07, … since the change
		assert.Equal(t, int64((after-7*time.Second)/(15*time.Minute))+1, f.Evidence["refused"], after)
		assert.Equal(t, f.Evidence["refused"], f.Evidence["hidden"])
		assert.Equal(t, int64(14*96), f.Evidence["baseline_allowed"], "every 15 minutes for the 14 days before")
		assert.Equal(t, int64(15), f.Evidence["baseline_days"], "14 days that start and end inside a UTC day")
		examples := f.Evidence["first_refused"].([]recommend.RefusedCall)
		require.NotEmpty(t, examples)
		assert.Equal(t, "backup-bot", examples[0].Agent)
		assert.Equal(t, "hidden", examples[0].Decision)
		assert.Contains(t, f.Summary, "policy version v2")

		// The revert restores v1's rule and unhides the tool, nothing else.
		assert.Equal(t, recommend.OpRevert, f.Action.Op)
		assert.Equal(t, recommend.RevertFromPrevious, f.Evidence["revert_from"])
		var ops []map[string]any
		require.NoError(t, json.Unmarshal(f.Action.Patch, &ops))
		assert.ElementsMatch(t, []map[string]any{
			{"op": "remove", "path": "/hide/1"},
			{"op": "add", "path": "/tools/list_backups", "value": map[string]any{"limits": []any{
				map[string]any{"counter": "lb", "window": "hour", "max": float64(60)}}}},
		}, ops)
		assert.False(t, f.InPolicy(current))
		assert.True(t, f.InPolicy(previous), "the policy before the change holds the revert")
		// A revert widens the current policy by design, and says how.
		assert.Equal(t, []string{"hidden → allowed"}, f.Evidence["revert_widens"])

		// evidence.sql reproduces the numbers through the query sandbox.
		cols, row := queryOne(t, store, f.Evidence["sql"].(string))
		for i, c := range cols {
			assertSame(t, f.Evidence[c], row[i], c)
		}
		md := recommend.Markdown(r)
		assert.Contains(t, md, "Regression: a new policy version refuses 1 tool this grant used")
		assert.Contains(t, md, `"path": "/tools/list_backups"`)
		assert.Contains(t, md, "Applying it widens the current policy for `list_backups`: hidden → allowed.")
	}

	// Without an earlier policy the revert is the current one without the
	// refusal; without any policy no patch can be written, and it says so.
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: pc.Server, Grant: pc.Grant,
		Now: change.Add(time.Hour), Params: recommend.DefaultParams(), Current: current})
	require.NoError(t, err)
	f := findings(r, recommend.KindRegression)[simulate.PolicyChangeUsedDaily]
	assert.Equal(t, recommend.RevertFromRefusal, f.Evidence["revert_from"])
	assert.JSONEq(t, `[{"op":"remove","path":"/hide/1"},{"op":"add","path":"/tools/list_backups","value":{}}]`, string(f.Action.Patch))
	assert.Equal(t, []string{"hidden → allowed without a limit"}, f.Evidence["revert_widens"])
	r, err = recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: pc.Server, Grant: pc.Grant,
		Now: change.Add(time.Hour), Params: recommend.DefaultParams()})
	require.NoError(t, err)
	f = findings(r, recommend.KindRegression)[simulate.PolicyChangeUsedDaily]
	assert.Equal(t, recommend.RevertNoPolicy, f.Evidence["revert_from"])
	assert.Nil(t, f.Action.Patch)
	assert.Contains(t, recommend.Markdown(r), "no revert can be written")

	// Before version 2 there is nothing to compare.
	r, err = recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: pc.Server, Grant: pc.Grant,
		Now: change.Add(-time.Minute), Params: recommend.DefaultParams()})
	require.NoError(t, err)
	assert.Empty(t, findings(r, recommend.KindRegression))
}

// TestNoRegressionWhenOnlyUnusedToolsAreRefused: version 2 hides delete_vm,
// which nobody used; the one call that tries it is refused, and nothing
// fires.
func TestNoRegressionWhenOnlyUnusedToolsAreRefused(t *testing.T) {
	change := now.Add(-2 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUnused, Days: 21}
	store := policyChangeStore(t, pc, change.Add(time.Hour))
	var hidden int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FROM calls WHERE decision = 'hidden' AND policy_version = 'v2'`).Scan(&hidden))
	require.Equal(t, 1, hidden, "the unused tool is tried once under v2")
	regs, err := recommend.Regressions(context.Background(), store.DB(), scope(pc.Server, pc.Grant, change.Add(time.Hour)), recommend.DefaultParams())
	require.NoError(t, err)
	assert.Empty(t, regs)
}

// TestRegressionFollowsTheVersionInUse: a version that goes back and forth.
// After v2 broke list_backups, going back to v1 (first seen long ago) leaves
// nothing to report; a rate limit that refuses one runaway session's calls
// is the policy working, not a regression.
func TestRegressionFollowsTheVersionInUse(t *testing.T) {
	change := now.Add(-3 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily, Days: 21}
	evs := simulate.PolicyChangeEvents(pc, change.Add(time.Hour))
	// Back to v1 an hour later: the same calls, all allowed again.
	back := simulate.PolicyChangeEvents(simulate.PolicyChange{Server: pc.Server, Grant: pc.Grant, Change: now.Add(time.Hour), Days: 1},
		now)
	for _, e := range back {
		if !e.TS.Before(change.Add(time.Hour)) {
			evs = append(evs, e)
		}
	}
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "back.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)

	regs, err := recommend.Regressions(context.Background(), store.DB(), scope(pc.Server, pc.Grant, change.Add(50*time.Minute)), recommend.DefaultParams())
	require.NoError(t, err)
	require.Len(t, regs, 1, "under v2")
	regs, err = recommend.Regressions(context.Background(), store.DB(), scope(pc.Server, pc.Grant, now), recommend.DefaultParams())
	require.NoError(t, err)
	assert.Empty(t, regs, "back under v1, which the history began with")

	// A new limit that cuts one runaway session among many refuses many
	// calls of one session: no rise in the share of sessions refused.
	limited := simulate.PolicyChangeEvents(simulate.PolicyChange{Server: "srv", Grant: "ops", Change: change, Days: 3}, now)
	for w := range 10 { // ten workers poll get_vm_status every minute, each in its own session per hour
		for ts := change.Add(-3 * 24 * time.Hour); ts.Before(now); ts = ts.Add(time.Minute) {
			v := "v1"
			if !ts.Before(change) {
				v = "v2"
			}
			agent := fmt.Sprintf("worker-%d", w)
			limited = append(limited, audit.Event{ID: fmt.Sprintf("%s-%d", agent, ts.Unix()), TS: ts.Add(time.Duration(w) * time.Second),
				Server: "srv", Tool: simulate.PolicyChangeStatus, Method: audit.DefaultMethod, Decision: audit.Allowed, Grant: "ops",
				Agent: agent, Session: agent + ts.Truncate(time.Hour).Format("-15"), PolicyVersion: v})
		}
	}
	for i := range 200 {
		d := audit.RateLimited
		if i < 20 {
			d = audit.Allowed
		}
		limited = append(limited, audit.Event{ID: fmt.Sprintf("loop-%d", i), TS: change.Add(time.Duration(i) * 3 * time.Second), Server: "srv",
			Tool: simulate.PolicyChangeStatus, Method: audit.DefaultMethod, Decision: d, Grant: "ops", Agent: "runaway",
			Session: "runaway-1", PolicyVersion: "v2"})
	}
	store2, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "limited.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store2.Close()
	_, err = store2.Append(context.Background(), ingest.Batch{Events: limited})
	require.NoError(t, err)
	regs, err = recommend.Regressions(context.Background(), store2.DB(), scope("srv", "ops", change.Add(time.Hour)), recommend.DefaultParams())
	require.NoError(t, err)
	assert.Empty(t, regs, "one session of 13 refused")
}

// TestNoRegressionForAVersionInUseBeforeTheWindow: version 2 hid the tool
// 35 days ago, outside the 30-day window. Its first call in the window is
// only where the window cut it, and the calls before it carry version 2
// too: nothing changed there, so nothing is compared (a baseline half
// under version 1 would otherwise make the window's first day look like a
// regression of version 2 against itself). A change inside the window of a
// history longer than the window is still found.
func TestNoRegressionForAVersionInUseBeforeTheWindow(t *testing.T) {
	change := now.Add(-35 * 24 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily, Days: 10}
	store := policyChangeStore(t, pc, now)
	regs, err := recommend.Regressions(context.Background(), store.DB(), scope(pc.Server, pc.Grant, now), recommend.DefaultParams())
	require.NoError(t, err)
	assert.Empty(t, regs, "version 2 was in use before the window")

	recent := now.Add(-2 * time.Hour)
	pc = simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: recent, Refused: simulate.PolicyChangeUsedDaily, Days: 45}
	store = policyChangeStore(t, pc, recent.Add(time.Hour))
	regs, err = recommend.Regressions(context.Background(), store.DB(), scope(pc.Server, pc.Grant, recent.Add(time.Hour)), recommend.DefaultParams())
	require.NoError(t, err)
	require.Len(t, regs, 1, "version 2 is new in the window, 45 days of version 1 before it")
	assert.Equal(t, simulate.PolicyChangeUsedDaily, regs[0].Tool)
	assert.Equal(t, "v1", regs[0].Previous)
}

// TestRegressionWhenAHiddenToolVanishes: agents that list tools do not call
// a hidden one. Version 2 hides list_backups and backup-bot stops calling
// it: with the current policy (v2, which hides it) the silence is a
// regression once the baseline's rate predicts three calls (45 minutes at
// four an hour); without a policy, or with one that allows the tool, it is
// only silence.
func TestRegressionWhenAHiddenToolVanishes(t *testing.T) {
	change := now.Add(-2 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily,
		Days: 21, Silent: true}
	store := policyChangeStore(t, pc, change.Add(time.Hour))
	var calls int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FROM calls WHERE tool = 'list_backups' AND policy_version = 'v2'`).Scan(&calls))
	require.Zero(t, calls, "backup-bot no longer calls the hidden tool")
	at := func(d time.Duration, current *policy.Policy) []recommend.Regression {
		sc := scope(pc.Server, pc.Grant, change.Add(d))
		sc.Current = current
		regs, err := recommend.Regressions(context.Background(), store.DB(), sc, recommend.DefaultParams())
		require.NoError(t, err)
		return regs
	}
	assert.Empty(t, at(40*time.Minute, parsePolicy(t, v2Policy)), "2.7 calls expected: not yet")
	regs := at(50*time.Minute, parsePolicy(t, v2Policy))
	require.Len(t, regs, 1)
	assert.True(t, regs[0].Vanished)
	assert.Equal(t, simulate.PolicyChangeUsedDaily, regs[0].Tool)
	assert.InDelta(t, 3.3, regs[0].Expected, 0.05)
	assert.Empty(t, at(50*time.Minute, nil), "no policy: silence is no evidence")
	assert.Empty(t, at(50*time.Minute, parsePolicy(t, v1Policy)), "the policy allows it: the agent is only quiet")

	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: pc.Server, Grant: pc.Grant,
		Now: change.Add(50 * time.Minute), Params: recommend.DefaultParams(), Current: parsePolicy(t, v2Policy), Previous: parsePolicy(t, v1Policy)})
	require.NoError(t, err)
	f, ok := findings(r, recommend.KindRegression)[simulate.PolicyChangeUsedDaily]
	require.True(t, ok)
	assert.Contains(t, f.Summary, "list_backups vanished under policy version v2")
	assert.Contains(t, f.Summary, "which the current policy hides")
	assert.Equal(t, true, f.Evidence["vanished"])
	cols, row := queryOne(t, store, f.Evidence["sql"].(string))
	for i, c := range cols {
		assertSame(t, f.Evidence[c], row[i], c)
	}
}

// The watch looks only at servers with a version new within the watch: a
// day after the change, or before it, there is none.
func TestServersWithNewVersions(t *testing.T) {
	change := now.Add(-2 * time.Hour)
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily, Days: 3}
	store := policyChangeStore(t, pc, change.Add(30*time.Hour))
	at := func(d time.Duration) []string {
		s, err := recommend.ServersWithNewVersions(context.Background(), store.DB(), change.Add(d), 30*24*time.Hour, recommend.DefaultParams())
		require.NoError(t, err)
		return s
	}
	assert.Equal(t, []string{"proxmox-mcp"}, at(30*time.Minute))
	assert.Equal(t, []string{"proxmox-mcp"}, at(23*time.Hour))
	assert.Empty(t, at(-time.Hour), "only v1, seen for days")
	assert.Empty(t, at(25*time.Hour), "v2 is older than the watch")
}
