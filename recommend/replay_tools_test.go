package recommend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/policy"
)

// TestReplayTakesItsToolCountsFromTheUsage: a recommendation hands its
// replay each tool's calls and allowed calls from its tool usage
// (toolsFromUsage), and the replay is the one that counts them from the
// calls. The replay uses what it is handed (counts made up change it),
// unless a rule depends on a call's arguments: then it counts them itself,
// with the calls that carry arguments.
func TestReplayTakesItsToolCountsFromTheUsage(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	store := trafficStore(t, 5, 3000, 48*time.Hour, end, func(i int, e *audit.Event) {
		if i%4 == 1 {
			e.Decision = audit.Denied
		}
	})
	db := store.DB()
	for _, grant := range []string{"", "ops-bot"} {
		q := query{db: db, server: "proxmox-mcp", grant: grant, from: end.Add(-48 * time.Hour), to: end}
		usage, err := q.toolUsage(ctx, 48*time.Hour)
		require.NoError(t, err)
		var used []string
		for _, tool := range sortedKeys(usage) {
			if usage[tool].Calls > 0 {
				used = append(used, tool)
			}
		}
		require.GreaterOrEqual(t, len(used), 3, grant)
		p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
			used[0]: {Limits: []policy.Limit{{Counter: "c", Window: policy.WindowMinute, Max: 1, Scope: policy.ScopeSession}}},
			used[1]: {DenyIf: []policy.DenyRule{{OnDeny: "approval"}}},
		}}
		p.Default = policy.DefaultDeny
		p.Tools[used[2]] = &policy.ToolRule{}
		require.NoError(t, p.Validate())
		o := ReplayOptions{Server: q.server, Grant: grant, From: q.from, To: q.to, Policy: p}
		want, err := Run(ctx, db, o)
		require.NoError(t, err)
		o.tools = toolsFromUsage(usage)
		got, err := Run(ctx, db, o)
		require.NoError(t, err)
		assert.Equal(t, want, got, grant)

		madeUp := toolsFromUsage(usage)
		for _, ti := range madeUp {
			ti.calls *= 2
		}
		o.tools = madeUp
		got, err = Run(ctx, db, o)
		require.NoError(t, err)
		assert.NotEqual(t, want, got, "%s: the counts handed over are used", grant)

		p.Tools[used[2]] = &policy.ToolRule{Require: []policy.Condition{{Path: "args.node", Op: "eq", Value: []byte(`"pve1"`)}}}
		require.NoError(t, p.Validate())
		o.tools = nil
		want, err = Run(ctx, db, o)
		require.NoError(t, err)
		o.tools = madeUp
		got, err = Run(ctx, db, o)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s: a rule on arguments: the replay counts the calls itself", grant)
	}
}
