package recommend_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// synthetic stores hand-made calls: tool → days ago of each allowed call
// (one session per call).
func synthetic(t *testing.T, uses map[string][]int) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "s.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var evs []audit.Event
	n := 0
	for tool, agos := range uses {
		for _, ago := range agos {
			n++
			evs = append(evs, audit.Event{ID: fmt.Sprintf("e%d", n), TS: now.Add(-time.Duration(ago)*24*time.Hour - time.Duration(n)*time.Second),
				Server: "srv", Tool: tool, Method: "tools/call", Decision: audit.Allowed, Status: "ok",
				Grant: "g", Agent: "a", Session: fmt.Sprintf("s%d", n)})
		}
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	return store
}

func classes(tools ...string) []catalog.Classification {
	var out []catalog.Classification
	for _, t := range tools {
		out = append(out, catalog.Classify(catalog.Tool{Name: t}, nil))
	}
	return out
}

func TestUnusedToolsGraceAndPeriodicUse(t *testing.T) {
	days := func(from, to, step int) []int {
		var out []int
		for d := from; d <= to; d += step {
			out = append(out, d)
		}
		return out
	}
	store := synthetic(t, map[string][]int{
		"list_vms":       days(0, 60, 1),
		"get_monthly":    {35, 65, 95}, // used once a month, not in the last 30 days
		"get_old":        {40},         // used once, long ago
		"create_snap_vm": days(0, 20, 2),
	})
	p := recommend.DefaultParams()
	opts := recommend.Options{Server: "srv", Now: now, Params: p,
		Catalog:   classes("list_vms", "get_monthly", "get_old", "create_snap_vm", "get_new", "delete_everything"),
		ToolAdded: map[string]time.Time{"get_new": now.Add(-3 * 24 * time.Hour)}}
	r, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)
	unused := findings(r, recommend.KindUnusedTool)

	assert.Equal(t, recommend.OpHide, unused["get_old"].Action.Op)
	assert.Equal(t, recommend.OpHide, unused["delete_everything"].Action.Op, "never called")
	assert.Nil(t, unused["delete_everything"].Evidence["last_called"])
	assert.Equal(t, "medium", unused["delete_everything"].Severity, "unused destructive tools weigh more")

	assert.Equal(t, recommend.OpNone, unused["get_monthly"].Action.Op, "periodic use is kept")
	assert.Contains(t, unused["get_monthly"].Evidence["not_proposed"], "periodic")
	assert.NotContains(t, r.Policy.Hide, "get_monthly")

	assert.Equal(t, recommend.OpNone, unused["get_new"].Action.Op, "a tool added 3 days ago is in its grace period")
	assert.Contains(t, unused["get_new"].Evidence["not_proposed"], "grace")
	assert.NotContains(t, r.Policy.Hide, "get_new")

	assert.NotContains(t, unused, "list_vms")
	assert.NotContains(t, unused, "create_snap_vm")
}

// A tool named "*" (an event's, unused in the window) is never hidden: in a
// policy, hide "*" hides every tool.
func TestAToolNamedStarIsNeverHidden(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}, "*": {40}, "get_old": {40}})
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	assert.NotContains(t, r.Policy.Hide, policy.HideAll)
	assert.False(t, r.Policy.Hidden("list_vms"))
	assert.Contains(t, r.Policy.Hide, "get_old", "a tool as unused is hidden")
}

func TestCurrentPolicyRulesAreKept(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}, "refund": {1, 2}, "old_tool": {50}})
	current, err := policy.Parse([]byte(`{
  "version": "1", "default": "allow", "x-owner": "platform",
  "hide": ["list_vms"],
  "tools": {
    "refund": {
      "require": [{"path": "args.reason", "op": "exists", "value": true}],
      "deny_if": [{"conditions": [{"path": "args.amount", "op": "gt", "value": 10000}], "on_deny": "too much"}]
    },
    "old_tool": {}
  }
}`), "current.json")
	require.NoError(t, err)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Current: current, Catalog: classes("list_vms", "refund", "old_tool")})
	require.NoError(t, err)
	p := r.Policy
	assert.Equal(t, policy.DefaultDeny, p.Default)
	assert.Contains(t, p.Extra, "x-owner", "unknown fields survive")
	require.Contains(t, p.Tools, "refund")
	assert.Len(t, p.Tools["refund"].Require, 1, "require is kept")
	require.Len(t, p.Tools["refund"].DenyIf, 1, "deny_if with conditions is kept")
	assert.Equal(t, "too much", p.Tools["refund"].DenyIf[0].OnDeny)
	assert.NotContains(t, p.Hide, "list_vms", "a used tool stays allowed")
	assert.Contains(t, p.Tools, "list_vms")
	assert.Contains(t, p.Hide, "old_tool")
	assert.NotContains(t, p.Tools, "old_tool")
	assert.Same(t, current, r.Current)
	assert.NotEqual(t, "[]", string(r.Patch))
	assert.Contains(t, recommend.Diff(r), `-  "default": "allow",`)
}

func TestSuppressions(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}})
	cat := classes("list_vms", "get_a", "get_b")
	id := recommend.FindingID(recommend.KindUnusedTool, "srv", "", "get_a")
	expired := recommend.FindingID(recommend.KindUnusedTool, "srv", "", "get_b")
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: cat,
		Suppressions: []analytics.Suppression{
			{FindingID: id, Reason: "needed for DR drills", Owner: "alice", Until: now.Add(24 * time.Hour)},
			{FindingID: expired, Reason: "old", Until: now.Add(-time.Hour)},
		}})
	require.NoError(t, err)
	unused := findings(r, recommend.KindUnusedTool)
	require.NotNil(t, unused["get_a"].Suppressed)
	assert.Equal(t, "alice", unused["get_a"].Suppressed.By)
	assert.NotContains(t, r.Policy.Hide, "get_a", "a suppressed finding leaves the proposal")
	assert.Nil(t, unused["get_b"].Suppressed, "an expired suppression stops applying")
	assert.Contains(t, r.Policy.Hide, "get_b")
	assert.Contains(t, recommend.Markdown(r), "needed for DR drills")
}

func TestGrantScope(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "g.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	var evs []audit.Event
	for i := 0; i < 10; i++ {
		for _, g := range []string{"ops", "ci"} {
			tool := "list_vms"
			if g == "ci" {
				tool = "start_vm"
			}
			evs = append(evs, audit.Event{ID: fmt.Sprintf("%s%d", g, i), TS: now.Add(-time.Duration(i) * time.Hour), Server: "srv",
				Tool: tool, Method: "tools/call", Decision: audit.Allowed, Grant: g, Session: fmt.Sprintf("%s-%d", g, i)})
		}
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Grant: "ci", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("list_vms", "start_vm")})
	require.NoError(t, err)
	assert.Equal(t, int64(10), r.Window.Calls)
	assert.Contains(t, r.Policy.Tools, "start_vm")
	assert.Contains(t, r.Policy.Hide, "list_vms", "another grant's tool is unused in this grant")
	assert.Contains(t, findings(r, recommend.KindUnusedTool)["list_vms"].ID, ":ci:")
}

func TestAllowCandidateIsForReviewOnly(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "a.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	var evs []audit.Event
	for i := 0; i < 8; i++ {
		s := fmt.Sprintf("s%d", i%4)
		evs = append(evs,
			audit.Event{ID: fmt.Sprintf("ok%d", i), TS: now.Add(-time.Duration(i) * time.Hour), Server: "srv", Tool: "list_vms",
				Method: "tools/call", Decision: audit.Allowed, Session: s},
			audit.Event{ID: fmt.Sprintf("no%d", i), TS: now.Add(-time.Duration(i)*time.Hour - time.Minute), Server: "srv", Tool: "get_vm_config",
				Method: "tools/call", Decision: audit.Denied, Rule: "(default deny)", Session: s})
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("list_vms", "get_vm_config")})
	require.NoError(t, err)
	f, ok := findings(r, recommend.KindAllowCandidate)["get_vm_config"]
	require.True(t, ok)
	assert.Equal(t, recommend.OpAllow, f.Action.Op)
	assert.Equal(t, int64(8), f.Evidence["refused"])
	assert.NotContains(t, r.Policy.Tools, "get_vm_config", "an allow candidate is never applied")
}

// TestProbeBurstOfEachKindOfRefusedTool: a burst of three tools, one
// denied, one hidden and one called that the catalog does not hold, is a
// probe; the window's usage holds just those three such tools, as many as
// a probe needs, so the recommender reads the calls for it; with any of the
// three left out of that count it would not (and finds nothing).
func TestProbeBurstOfEachKindOfRefusedTool(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "p.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	var evs []audit.Event
	add := func(id, session, tool string, at time.Time, d audit.Decision) {
		evs = append(evs, audit.Event{ID: id, TS: at, Server: "srv", Tool: tool, Method: "tools/call", Decision: d,
			Agent: "prober", Session: session})
	}
	for i := range 12 {
		add(fmt.Sprintf("ok%d", i), fmt.Sprintf("s%d", i%3), "list_vms", now.Add(-time.Duration(i)*time.Hour), audit.Allowed)
	}
	at := now.Add(-3 * time.Hour)
	add("p1", "burst", "delete_vm", at, audit.Denied)
	add("p2", "burst", "get_vm_config", at.Add(time.Second), audit.Hidden)
	add("p3", "burst", "mystery_tool", at.Add(2*time.Second), audit.Allowed)
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("list_vms", "delete_vm", "get_vm_config")})
	require.NoError(t, err)
	f, ok := findings(r, recommend.KindDeniedProbe)["prober"]
	require.True(t, ok, "the burst is a probe")
	assert.Equal(t, []string{"delete_vm", "get_vm_config", "mystery_tool"}, f.Evidence["tools"])
}
