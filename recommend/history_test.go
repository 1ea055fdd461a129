package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
)

// TestAdvanceHistory walks a scope through two runs: run 2 no longer finds
// one finding (resolved), finds a new one (marked new), one is suppressed
// (dismissed) and the current policy took another's change (accepted).
func TestAdvanceHistory(t *testing.T) {
	t1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(24 * time.Hour)
	hide := func(tool string) Finding {
		return Finding{ID: "hide-" + tool, Kind: "unused_tool", Tool: tool, Severity: Low, Action: Action{Op: OpHide}}
	}
	run1 := &Report{Window: Window{To: t1}, Findings: []Finding{hide("gone"), hide("kept"), hide("muted"), hide("taken")}}
	next, log := AdvanceHistory(run1, analytics.RunHistory{RunID: 1})
	require.Len(t, next, 4)
	assert.Len(t, log, 4)
	for _, f := range run1.Findings {
		assert.Equal(t, &History{State: StateOpen, FirstSeen: t1, LastSeen: t1}, f.History, "the first run marks nothing new")
	}

	muted := hide("muted")
	muted.Suppressed = &Suppressed{Reason: "known", Until: t2.AddDate(0, 1, 0)}
	run2 := &Report{Window: Window{To: t2}, Current: &policy.Policy{Default: policy.DefaultAllow, Hide: []string{"taken"}},
		Findings: []Finding{hide("kept"), muted, hide("taken"), hide("fresh")}}
	next, log = AdvanceHistory(run2, analytics.RunHistory{RunID: 2, PreviousRunID: 1, Known: next})

	byID := map[string]*History{}
	for _, f := range run2.Findings {
		byID[f.ID] = f.History
	}
	assert.Equal(t, &History{State: StateOpen, FirstSeen: t1, LastSeen: t2}, byID["hide-kept"])
	assert.Equal(t, &History{State: StateDismissed, FirstSeen: t1, LastSeen: t2, Changed: true}, byID["hide-muted"])
	assert.Equal(t, &History{State: StateAccepted, FirstSeen: t1, LastSeen: t2, Changed: true}, byID["hide-taken"])
	assert.Equal(t, &History{State: StateOpen, FirstSeen: t2, LastSeen: t2, New: true}, byID["hide-fresh"])

	states := map[string]analytics.FindingRecord{}
	for _, r := range next {
		states[r.ID] = r
	}
	assert.Equal(t, StateResolved, states["hide-gone"].State)
	assert.Equal(t, t1, states["hide-gone"].LastSeen, "a resolved finding keeps when it was last seen")
	assert.Equal(t, t2, states["hide-gone"].ChangedAt)
	assert.Equal(t, t1, states["hide-kept"].ChangedAt, "an unchanged state keeps when it changed")
	assert.Equal(t, []analytics.FindingTransition{
		{FindingID: "hide-muted", From: StateOpen, To: StateDismissed},
		{FindingID: "hide-taken", From: StateOpen, To: StateAccepted},
		{FindingID: "hide-fresh", To: StateOpen},
		{FindingID: "hide-gone", From: StateOpen, To: StateResolved},
	}, log)
	require.NotNil(t, run2.Recorded)
	assert.Equal(t, int64(1), run2.Recorded.PreviousRunID)
	require.Len(t, run2.Recorded.Gone, 1)
	assert.Equal(t, "hide-gone", run2.Recorded.Gone[0].ID)

	// Run 3: the accepted finding is gone and its change is still in the
	// policy, so it stays accepted; the same run again logs nothing.
	run3 := &Report{Window: Window{To: t2.Add(time.Hour)}, Current: run2.Current, Findings: []Finding{hide("kept"), muted, hide("fresh")}}
	next, log = AdvanceHistory(run3, analytics.RunHistory{RunID: 3, PreviousRunID: 2, Known: next})
	assert.Empty(t, log)
	for _, f := range run3.Findings {
		assert.False(t, f.History.New || f.History.Changed, f.ID)
	}
	// Run 4: a resolved finding found again is new, and open.
	run4 := &Report{Window: Window{To: t2.Add(2 * time.Hour)}, Current: run2.Current, Findings: []Finding{hide("gone")}}
	_, log = AdvanceHistory(run4, analytics.RunHistory{RunID: 4, PreviousRunID: 3, Known: next})
	assert.True(t, run4.Findings[0].History.New)
	assert.Equal(t, t1, run4.Findings[0].History.FirstSeen)
	assert.Contains(t, log, analytics.FindingTransition{FindingID: "hide-gone", From: StateResolved, To: StateOpen})
}

// TestInPolicy holds which current policies hold a finding's change.
func TestInPolicy(t *testing.T) {
	limit := &policy.Limit{Max: 10, Window: policy.WindowMinute}
	p := &policy.Policy{Default: policy.DefaultDeny, Hide: []string{"h"}, Tools: map[string]*policy.ToolRule{
		"a": {DenyIf: []policy.DenyRule{{}}},
		"l": {Limits: []policy.Limit{{Max: 5, Window: policy.WindowMinute}}},
		"w": {Limits: []policy.Limit{{Max: 50, Window: policy.WindowMinute}}},
	}}
	for _, c := range []struct {
		f    Finding
		want bool
	}{
		{Finding{Tool: "h", Action: Action{Op: OpHide}}, true},
		{Finding{Tool: "a", Action: Action{Op: OpHide}}, false},
		{Finding{Tool: "a", Action: Action{Op: OpRequireApproval}}, true},
		{Finding{Tool: "l", Action: Action{Op: OpRateLimit, Limit: limit}}, true},
		{Finding{Tool: "w", Action: Action{Op: OpRateLimit, Limit: limit}}, false},
		{Finding{Tool: "a", Action: Action{Op: OpAllow}}, true},
		{Finding{Tool: "x", Action: Action{Op: OpAllow}}, false},
		{Finding{Tool: "a", Action: Action{Op: OpNone}}, false},
	} {
		assert.Equal(t, c.want, c.f.InPolicy(p), "%s %s", c.f.Action.Op, c.f.Tool)
	}
	assert.False(t, Finding{Tool: "h", Action: Action{Op: OpHide}}.InPolicy(nil))
}

// A loosening found again that widens another way is changed: its action
// is always widen, and what changed is what it widens.
func TestAdvanceHistoryLooseningWidensAnotherWay(t *testing.T) {
	t1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	loosening := func(change string) Finding {
		return Finding{ID: "loosening:srv:ci:list_backups", Kind: KindLoosening, Tool: "list_backups", Severity: Medium,
			Action: Action{Op: OpWiden}, Evidence: map[string]any{"changes": []string{change}}}
	}
	run1 := &Report{Window: Window{To: t1}, Findings: []Finding{loosening("denied → allowed")}}
	next, _ := AdvanceHistory(run1, analytics.RunHistory{RunID: 1})
	same := &Report{Window: Window{To: t1.Add(time.Hour)}, Findings: []Finding{loosening("denied → allowed")}}
	next, _ = AdvanceHistory(same, analytics.RunHistory{RunID: 2, PreviousRunID: 1, Known: next})
	assert.False(t, same.Findings[0].History.Changed)
	// A run for the Intercept output adds that output's own widening: no
	// change of the proposal.
	intercept := loosening("denied → allowed")
	intercept.Evidence["changes"] = []string{"denied → allowed", "limit removed: 5/minute per grant (in the intercept output)"}
	withOutput := &Report{Window: Window{To: t1.Add(90 * time.Minute)}, Findings: []Finding{intercept}}
	next, _ = AdvanceHistory(withOutput, analytics.RunHistory{RunID: 3, PreviousRunID: 2, Known: next})
	assert.False(t, withOutput.Findings[0].History.Changed, "another output's own widening")
	other := &Report{Window: Window{To: t1.Add(2 * time.Hour)}, Findings: []Finding{loosening("hidden → allowed")}}
	AdvanceHistory(other, analytics.RunHistory{RunID: 4, PreviousRunID: 3, Known: next})
	assert.True(t, other.Findings[0].History.Changed)
}
