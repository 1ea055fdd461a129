package recommend_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// The SQL fast path of the replay must decide exactly as the Go evaluator,
// for every scope and window.
func TestReplayFastPathMatchesEvaluator(t *testing.T) {
	store := loadScenario(t, "proxmox", 2)
	from := now.Add(-14 * 24 * 3600e9)
	for _, scope := range []string{policy.ScopeGrant, policy.ScopeSession, policy.ScopeAgent} {
		for _, window := range []string{policy.WindowMinute, policy.WindowHour, policy.WindowDay} {
			t.Run(scope+"/"+window, func(t *testing.T) {
				max := map[string]int{policy.WindowMinute: 3, policy.WindowHour: 20, policy.WindowDay: 100}[window]
				p := &policy.Policy{Version: "1", Default: policy.DefaultDeny, Hide: []string{"delete_vm"}, Tools: map[string]*policy.ToolRule{
					"get_vm_status":        {Limits: []policy.Limit{{Counter: "a", Window: window, Max: max, Scope: scope}}},
					"vm_agent_exec_status": {Limits: []policy.Limit{{Counter: "b", Window: window, Max: max, Scope: scope}}},
					"get_node_status":      {Limits: []policy.Limit{{Counter: "c", Window: window, Max: max, Scope: scope}}},
					"vm_agent_exec":        {DenyIf: []policy.DenyRule{{OnDeny: "Requires human approval."}}},
					"list_vms":             {},
				}}
				require.NoError(t, p.Validate())
				opts := recommend.ReplayOptions{Server: "proxmox-mcp", From: from, To: now, Policy: p}
				fast, err := recommend.Run(context.Background(), store.DB(), opts)
				require.NoError(t, err)
				opts.Exact = true
				exact, err := recommend.Run(context.Background(), store.DB(), opts)
				require.NoError(t, err)
				assert.Equal(t, exact, fast)
				assert.Positive(t, fast.RateLimited, "the limits bite")
				assert.Positive(t, fast.ApprovalRequired)
				assert.Positive(t, fast.Denied, "unlisted tools are denied by default")
			})
		}
	}
}

// An all_tools limit counts every tool together, so everything goes through
// the evaluator; the totals still add up.
func TestReplayAllToolsLimit(t *testing.T) {
	store := loadScenario(t, "loops", 1)
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow,
		AllTools: &policy.ToolRule{Limits: []policy.Limit{{Counter: "calls-per-minute", Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeSession}}}}
	r, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{
		Server: simulate.LoopsTruth.Server, From: now.Add(-simulate.LoopsTruth.Span), To: now, Policy: p})
	require.NoError(t, err)
	assert.Equal(t, r.Calls, r.Allowed+r.RateLimited+r.Denied+r.Hidden+r.ApprovalRequired)
	assert.Positive(t, r.RateLimited)
	assert.Zero(t, r.Denied)
	require.NotEmpty(t, r.FirstAffected)
	assert.Equal(t, "/all_tools/limits/calls-per-minute", r.FirstAffected[0].Rule)
	for i := 1; i < len(r.FirstAffected); i++ {
		assert.False(t, r.FirstAffected[i].TS.Before(r.FirstAffected[i-1].TS), "first affected calls are in time order")
	}
}
