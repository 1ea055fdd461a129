package recommend_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

func parsePolicy(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(doc), "p.json")
	require.NoError(t, err)
	return p
}

// Every way a proposal can widen a tool's access is named; tightening and
// unchanged rules are not.
func TestLooseningKinds(t *testing.T) {
	cur := parsePolicy(t, `{"version": "1", "default": "deny", "hide": ["delete_vm", "get_hidden"],
  "all_tools": {"limits": [{"counter": "all", "window": "minute", "max": 60, "scope": "grant"}]},
  "tools": {
    "get_a": {"limits": [{"counter": "a", "window": "minute", "max": 10, "scope": "session"}]},
    "get_b": {"limits": [{"counter": "b", "window": "minute", "max": 10, "scope": "session"}]},
    "get_c": {"limits": [{"counter": "c", "window": "minute", "max": 100, "scope": "grant"}]},
    "get_d": {"limits": [{"counter": "d", "window": "minute", "max": 100, "scope": "grant"}]},
    "get_e": {"deny_if": [{"conditions": [], "on_deny": "Requires human approval."}]},
    "get_f": {"deny_if": [{"conditions": [{"path": "args.x", "op": "eq", "value": 1}], "on_deny": "no"}]}
  }}`)
	prop := parsePolicy(t, `{"version": "1", "default": "deny", "hide": ["get_d"],
  "tools": {
    "delete_vm": {"deny_if": [{"conditions": [], "on_deny": "Requires human approval."}]},
    "get_hidden": {},
    "get_denied": {},
    "get_limited": {"limits": [{"counter": "l", "window": "minute", "max": 5, "scope": "session"}]},
    "get_a": {"limits": [{"counter": "a", "window": "minute", "max": 20, "scope": "session"}]},
    "get_b": {},
    "get_c": {"limits": [{"counter": "c", "window": "day", "max": 56, "scope": "session"}]},
    "get_e": {},
    "get_f": {}
  }}`)
	for tool, want := range map[string][]string{
		"delete_vm":   {"hidden → approval"},
		"get_hidden":  {"hidden → allowed without a limit"},
		"get_denied":  {"denied → allowed without a limit"},
		"get_limited": {"denied → allowed"},
		"get_a":       {"limit removed: all tools 60/minute per grant", "limit raised: 10/minute per session → 20/minute per session"},
		"get_b":       {"limit removed: 10/minute per session", "limit removed: all tools 60/minute per grant"},
		"get_c":       {"limit removed: all tools 60/minute per grant", "scope broadened: 100/minute per grant → 56/day per session"},
		"get_d":       nil, // allowed → hidden narrows
		"get_e":       {"approval → allowed without a limit"},
		"get_f":       {"condition removed: deny_if args.x eq 1", "limit removed: all tools 60/minute per grant"},
	} {
		got := recommend.Loosenings(cur, prop, tool)
		assert.ElementsMatch(t, want, got, tool)
	}
	// The same cap kept, or a stricter one beside it, is no loosening.
	same := cur.Clone()
	same.Tools["get_c"].Limits = append(same.Tools["get_c"].Limits, policy.Limit{Counter: "c2", Window: "day", Max: 56, Scope: "session"})
	assert.Empty(t, recommend.Loosenings(cur, same, "get_c"))
	assert.Equal(t, "allowed, 100/minute per grant; all tools 60/minute per grant", recommend.RuleText(cur, "get_c"))
	assert.Equal(t, "allowed with conditions, all tools 60/minute per grant", recommend.RuleText(cur, "get_f"))
	assert.Equal(t, "hidden", recommend.RuleText(cur, "delete_vm"))
}

// Scopes that do not order, and a cap shared by every tool, are never
// taken as covered: per agent does not narrow per session (a call without
// a protocol session counts under its grant, so for stateless traffic a
// per-session cap is a per-grant one), per gateway instance does not narrow
// per grant (a grant may reach several instances), and the tools' own
// limits do not cover an all_tools cap (together they let through their
// sum). Each removed condition is named, so that accepting one accepts no
// other.
func TestLooseningScopesAndSharedCaps(t *testing.T) {
	cur := parsePolicy(t, `{"version": "1", "default": "allow",
  "all_tools": {"limits": [{"counter": "all", "window": "minute", "max": 240, "scope": "grant"}]},
  "tools": {
    "poll": {"limits": [{"counter": "poll_rate", "window": "minute", "max": 20, "scope": "session"}]},
    "get_a": {"limits": [{"counter": "a_cap", "window": "minute", "max": 100, "scope": "grant"}]},
    "stop_vm": {"deny_if": [{"conditions": [{"path": "args.env", "op": "eq", "value": "dev"}, {"path": "args.force", "op": "eq", "value": true}], "on_deny": "no"}]}
  }}`)
	prop := cur.Clone()
	prop.AllTools = nil
	prop.Tools["poll"].Limits[0].Scope = policy.ScopeAgent
	prop.Tools["get_a"].Limits = []policy.Limit{{Counter: "a_rate", Window: policy.WindowMinute, Max: 100, Scope: policy.ScopeInstance},
		{Counter: "all_a", Window: policy.WindowMinute, Max: 200, Scope: policy.ScopeGrant}}
	prop.Tools["stop_vm"].DenyIf = nil
	assert.ElementsMatch(t, []string{"limit removed: all tools 240/minute per grant", "scope broadened: 20/minute per session → 20/minute per agent"},
		recommend.Loosenings(cur, prop, "poll"))
	assert.ElementsMatch(t, []string{"limit removed: all tools 240/minute per grant", "limit removed: 100/minute per grant"},
		recommend.Loosenings(cur, prop, "get_a"), "neither a per-instance limit nor a tool's own limit covers these")
	assert.ElementsMatch(t, []string{"limit removed: all tools 240/minute per grant", `condition removed: deny_if args.env eq "dev" and args.force eq true`},
		recommend.Loosenings(cur, prop, "stop_vm"))

	// Per grant still covers any scope, and all_tools a tool's own cap.
	narrower := cur.Clone()
	narrower.Tools["poll"].Limits[0].Scope = policy.ScopeGrant
	narrower.Tools["get_a"].Limits = nil
	narrower.AllTools.Limits = append(narrower.AllTools.Limits, policy.Limit{Counter: "all_a", Window: policy.WindowMinute, Max: 100, Scope: policy.ScopeGrant})
	assert.Empty(t, recommend.Loosenings(cur, narrower, "poll"))
	assert.Empty(t, recommend.Loosenings(cur, narrower, "get_a"))

	// Another condition removed later is another widening.
	other := cur.Clone()
	other.Tools["stop_vm"].DenyIf[0].Conditions[0].Value = []byte(`"prod"`)
	kinds := func(changes []string) []string { return recommend.WideningKinds(map[string]any{"changes": changes}) }
	accepted := kinds(recommend.Loosenings(cur, prop, "stop_vm"))
	assert.False(t, recommend.WideningCovered(kinds(recommend.Loosenings(other, prop, "stop_vm")), accepted))
}

// A proposal that widens access says so: a loosening finding with the rule
// before and after and the calls that would newly pass, counted by the
// replay, and a row in the rule changes.
func TestLooseningFindings(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("get_a", audit.Allowed, 3)
		add("get_a", audit.Denied, 2)
		add("list_vms", audit.Allowed, 4)
	})
	ctx := context.Background()
	t.Run("no current policy: from the window's decisions", func(t *testing.T) {
		r, err := recommend.Recommend(ctx, store.DB(), recommend.Options{Server: "srv", Now: now, Params: recommend.DefaultParams(),
			Catalog: classes("get_a", "list_vms")})
		require.NoError(t, err)
		f, ok := findings(r, recommend.KindLoosening)["get_a"]
		require.True(t, ok, "refused calls that would pass are a loosening")
		assert.Equal(t, recommend.OpWiden, f.Action.Op)
		assert.Equal(t, "medium", f.Severity)
		assert.Equal(t, int64(2), f.Evidence["newly_allowed"])
		assert.Equal(t, []string{"denied → allowed"}, f.Evidence["changes"])
		assert.Equal(t, "observed: allowed 3, denied 2", f.Evidence["before"])
		assert.Len(t, f.Evidence["first_newly_allowed"], 2)
		assert.Equal(t, int64(2), r.Replay.NewlyAllowed)
		assert.NotContains(t, findings(r, recommend.KindLoosening), "list_vms")
		md := recommend.Markdown(r)
		assert.Contains(t, md, "Access widened for 1 tool")
		assert.Contains(t, md, "| `get_a` | observed: allowed 3, denied 2 | → allowed, 5/minute per session | ⚠️ yes |")
	})
	t.Run("current policy: hidden → allowed", func(t *testing.T) {
		cur := parsePolicy(t, `{"version": "1", "default": "deny", "hide": ["list_vms"], "tools": {"get_a": {}}}`)
		r, err := recommend.Recommend(ctx, store.DB(), recommend.Options{Server: "srv", Now: now, Params: recommend.DefaultParams(),
			Catalog: classes("get_a", "list_vms"), Current: cur})
		require.NoError(t, err)
		f, ok := findings(r, recommend.KindLoosening)["list_vms"]
		require.True(t, ok)
		assert.Equal(t, "hidden", f.Evidence["before"])
		assert.Contains(t, f.Evidence["changes"], "hidden → allowed")
		assert.Contains(t, r.RuleChanges, recommend.RuleChange{Tool: "list_vms", Current: "hidden", Proposed: "allowed, 5/minute per session", Widens: true})
	})
}

// A tool the grant was refused (denied or hidden) and never allowed in the
// window is not allowed by the proposal, even when the current policy lists
// it and no hide is proposed (here: the tool is in its grace period).
func TestRefusedOnlyToolIsNotAllowed(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("list_vms", audit.Allowed, 4)
		add("vm_agent_exec", audit.Denied, 3)
		add("get_secret", audit.Hidden, 2)
	})
	cur := parsePolicy(t, `{"version": "1", "default": "deny", "tools": {"list_vms": {}, "vm_agent_exec": {}, "get_secret": {}}}`)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Grant: "g", Now: now,
		Params: recommend.DefaultParams(), Current: cur, Catalog: classes("list_vms", "vm_agent_exec", "get_secret"),
		ToolAdded: map[string]time.Time{"vm_agent_exec": now.Add(-time.Hour), "get_secret": now.Add(-time.Hour)}})
	require.NoError(t, err)
	ev := policy.NewEvaluator(r.Policy)
	for _, tool := range []string{"vm_agent_exec", "get_secret"} {
		assert.NotEqual(t, policy.Allowed, ev.Evaluate(policy.Call{Tool: tool, Grant: "g"}).Decision, tool)
		assert.Zero(t, r.Replay.ByTool[tool].NewlyAllowed, tool)
	}
	assert.Contains(t, r.Policy.Tools, "list_vms")
	assert.Empty(t, findings(r, recommend.KindLoosening))
}

// A current cap that agents hit is kept: a limit sized on traffic it capped
// says its peaks are censored, and goes beside the cap instead of replacing
// it with a per-session one (which would widen access).
func TestHitCapIsKept(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("get_a", audit.Allowed, 3)
		add("get_a", audit.RateLimited, 2)
	})
	cur := parsePolicy(t, `{"version": "1", "default": "deny",
  "tools": {"get_a": {"limits": [{"counter": "get_a_rate", "window": "minute", "max": 3, "scope": "grant"}]}}}`)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Grant: "g", Now: now,
		Params: recommend.DefaultParams(), Current: cur, Catalog: classes("get_a")})
	require.NoError(t, err)
	f, ok := findings(r, recommend.KindRateLimit)["get_a"]
	require.True(t, ok)
	assert.Equal(t, true, f.Evidence["censored"])
	assert.Equal(t, int64(2), f.Evidence["rate_limited_calls"])
	assert.Equal(t, "3/minute per grant", f.Evidence["kept_current_cap"])
	assert.Contains(t, f.Summary, "censored")
	limits := r.Policy.Tools["get_a"].Limits
	require.Len(t, limits, 2)
	assert.Equal(t, policy.Limit{Counter: "get_a_rate", Window: "minute", Max: 3, Scope: "grant"}, limits[0], "the cap agents hit stays")
	assert.Equal(t, "get_a_rate_session_minute", limits[1].Counter)
	assert.Empty(t, recommend.Loosenings(cur, r.Policy, "get_a"))
}

// A loosening's kinds leave its figures aside, keep the output a change is
// in, and cover a later loosening only when it widens in no other way.
func TestWideningKinds(t *testing.T) {
	accepted := recommend.WideningKinds(map[string]any{"changes": []any{"denied → allowed", "calls refused then pass",
		"limit raised: 5/minute per grant → 9/minute per grant (in the intercept output)"}})
	assert.Equal(t, []string{"calls refused then pass", "denied → allowed", "limit raised: 5/minute per grant (in the intercept output)"}, accepted)
	for _, tt := range []struct {
		changes []string
		covered bool
	}{
		{[]string{"denied → allowed"}, true},
		{[]string{"denied → allowed", "calls refused then pass"}, true},
		{[]string{"limit raised: 5/minute per grant → 12/minute per grant (in the intercept output)"}, true},
		{[]string{"limit raised: 5/minute per grant → 12/minute per grant"}, false},
		{[]string{"limit raised: all tools 600/minute per grant → 900/minute per grant (in the intercept output)"}, false},
		{[]string{"denied → allowed", "scope broadened: 2/minute per grant → 6/minute per session"}, false},
		// An allowance under a limit accepted does not accept one that
		// lets every call through.
		{[]string{"denied → allowed without a limit"}, false},
	} {
		kinds := recommend.WideningKinds(map[string]any{"changes": tt.changes})
		assert.Equal(t, tt.covered, recommend.WideningCovered(kinds, accepted), "%v", tt.changes)
	}
	// The reverse holds: an allowance without a limit accepted covers
	// one under a limit.
	unlimited := recommend.WideningKinds(map[string]any{"changes": []string{"hidden → allowed without a limit"}})
	assert.True(t, recommend.WideningCovered([]string{"hidden → allowed"}, unlimited))
	assert.False(t, recommend.WideningCovered([]string{"denied → allowed"}, unlimited))
	// A removed rule is named by its text: another rule removed is news.
	accepted = recommend.WideningKinds(map[string]any{"changes": []string{
		`condition removed: deny_if args.node eq "pve1" and args.vmid lt 100 (in the intercept output)`,
		"limit removed: all tools 600/minute per grant",
		"field removed: /tools/get_a/max_payload (in the intercept output)"}})
	for _, tt := range []struct {
		changes []string
		covered bool
	}{
		{[]string{`condition removed: deny_if args.node eq "pve1" and args.vmid lt 100 (in the intercept output)`}, true},
		{[]string{"limit removed: all tools 600/minute per grant"}, true},
		{[]string{`condition removed: deny_if args.node eq "pve2" and args.vmid lt 100 (in the intercept output)`}, false},
		{[]string{"limit removed: 100/minute per grant"}, false},
		{[]string{"field removed: /tools/get_a/max_payload (in the intercept output)"}, true},
		{[]string{"field removed: /tools/get_a/max_burst (in the intercept output)"}, false},
	} {
		kinds := recommend.WideningKinds(map[string]any{"changes": tt.changes})
		assert.Equal(t, tt.covered, recommend.WideningCovered(kinds, accepted), "%v", tt.changes)
	}
	// A broadened scope keeps the scope it is counted over instead, its
	// figures aside: per session accepted does not accept per agent.
	accepted = recommend.WideningKinds(map[string]any{"changes": []string{
		"scope broadened: 10/minute per grant → 15/minute per session (in the intercept output)"}})
	assert.Equal(t, []string{"scope broadened: 10/minute per grant → per session (in the intercept output)"}, accepted)
	for _, tt := range []struct {
		changes []string
		covered bool
	}{
		{[]string{"scope broadened: 10/minute per grant → 900/day per session (in the intercept output)"}, true},
		{[]string{"scope broadened: 10/minute per grant → 100000/day per agent (in the intercept output)"}, false},
		{[]string{"scope broadened: 10/minute per grant → 15/minute per session"}, false},
	} {
		kinds := recommend.WideningKinds(map[string]any{"changes": tt.changes})
		assert.Equal(t, tt.covered, recommend.WideningCovered(kinds, accepted), "%v", tt.changes)
	}
}

// A deny_if value respelled from an integer to a float (1000000 → 1e6)
// lets the argument "1000000" through (compared as text, 1e6 is 1e+06): a
// loosening, and a call refused by it is no longer refused in the replay.
func TestRespelledNumberIsALoosening(t *testing.T) {
	cur := parsePolicy(t, `{"version":"1","default":"deny","tools":{"pay":{"deny_if":[{"conditions":[{"path":"args.amount","op":"eq","value":1000000}],"on_deny":"too much"}]}}}`)
	for _, v := range []string{`1e6`, `1000000.0`} {
		prop := parsePolicy(t, `{"version":"1","default":"deny","tools":{"pay":{"deny_if":[{"conditions":[{"path":"args.amount","op":"eq","value":`+v+`}],"on_deny":"too much"}]}}}`)
		call := policy.Call{TS: time.Unix(0, 0), Tool: "pay", Grant: "g", Args: map[string]any{"amount": "1000000"}}
		require.Equal(t, policy.Denied, policy.NewEvaluator(cur).Evaluate(call).Decision)
		require.Equal(t, policy.Allowed, policy.NewEvaluator(prop).Evaluate(call).Decision)
		assert.NotEmpty(t, recommend.Loosenings(cur, prop, "pay"), v)
		refused := call
		refused.Args = nil
		refused.Refused = policy.Refusals(cur)["/tools/pay/deny_if/0"]
		assert.Equal(t, policy.Allowed, policy.NewEvaluator(prop).Evaluate(refused).Decision, "%s: the replay lets the refused call through", v)
	}
}

// An approval entry decides every call that reaches it (the evaluator checks
// a tool's own rule, then all_tools', each require first, then deny_if in
// order): a condition behind it refuses nothing. Approval put ahead of an
// all_tools condition, or ahead of a later deny_if entry, turns calls that
// were denied into calls a person may approve: a condition removed.
func TestLooseningApprovalAheadOfConditions(t *testing.T) {
	cur := parsePolicy(t, `{"version": "1", "default": "deny",
  "all_tools": {"require": [{"path": "args.env", "op": "eq", "value": "dev"}],
                "deny_if": [{"conditions": [{"path": "args.force", "op": "eq", "value": true}], "on_deny": "never force"}]},
  "tools": {
    "delete_vm": {},
    "stop_vm": {"deny_if": [{"conditions": [{"path": "args.vmid", "op": "lt", "value": 100}], "on_deny": "system VMs"},
                           {"conditions": [], "on_deny": "Requires human approval."}]}
  }}`)
	prop := cur.Clone()
	prop.Tools["delete_vm"] = &policy.ToolRule{DenyIf: []policy.DenyRule{{OnDeny: "Requires human approval."}}}
	prop.Tools["stop_vm"].DenyIf = []policy.DenyRule{cur.Tools["stop_vm"].DenyIf[1], cur.Tools["stop_vm"].DenyIf[0]}

	assert.ElementsMatch(t, []string{"condition removed: deny_if args.force eq true", "condition removed: require args.env eq \"dev\""},
		recommend.Loosenings(cur, prop, "delete_vm"))
	assert.Equal(t, []string{"condition removed: deny_if args.vmid lt 100"}, recommend.Loosenings(cur, prop, "stop_vm"))
	assert.Equal(t, "approval", recommend.RuleText(prop, "delete_vm"))

	// The evaluator agrees: what was denied now waits for approval.
	for tool, args := range map[string]map[string]any{
		"delete_vm": {"env": "dev", "force": true},
		"stop_vm":   {"env": "dev", "vmid": 7},
	} {
		c := policy.Call{TS: now, Tool: tool, Grant: "g", Args: args}
		assert.Equal(t, policy.Denied, policy.NewEvaluator(cur).Peek(c).Decision, tool)
		assert.Equal(t, policy.ApprovalRequired, policy.NewEvaluator(prop).Peek(c).Decision, tool)
	}
}

// The recommender's own approval keeps every all_tools condition: a rarely
// used risky tool goes behind approval with all_tools' require and deny_if
// copied ahead of it, so a call they deny is still denied, and the proposal
// widens nothing.
func TestApprovalKeepsAllToolsConditions(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("list_vms", audit.Allowed, 150)
		add("delete_vm", audit.Allowed, 1)
	})
	cur := parsePolicy(t, `{"version": "1", "default": "deny",
  "all_tools": {"require": [{"path": "args.env", "op": "eq", "value": "dev"}],
                "deny_if": [{"conditions": [{"path": "args.force", "op": "eq", "value": true}], "on_deny": "never force"},
                            {"conditions": [], "on_deny": "everything waits"},
                            {"conditions": [{"path": "args.node", "op": "eq", "value": "pve9"}], "on_deny": "behind the approval"}]},
  "tools": {"list_vms": {}, "delete_vm": {}}}`)
	// all_tools' own approval puts every tool behind it: the recommender's
	// proposal is judged against the same policy without it too.
	noApproval := cur.Clone()
	noApproval.AllTools.DenyIf = noApproval.AllTools.DenyIf[:1]
	for name, cur := range map[string]*policy.Policy{"all_tools with an approval": cur, "all_tools without": noApproval} {
		t.Run(name, func(t *testing.T) {
			r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Grant: "g", Now: now,
				Params: recommend.DefaultParams(), Current: cur, Catalog: classes("list_vms", "delete_vm")})
			require.NoError(t, err)
			require.Equal(t, recommend.OpRequireApproval, findings(r, recommend.KindRiskyTool)["delete_vm"].Action.Op)
			rule := r.Policy.Tools["delete_vm"]
			require.NotNil(t, rule)
			assert.Len(t, rule.Require, 1)
			require.Len(t, rule.DenyIf, 2, "the force entry, then the approval; nothing behind all_tools' approval")
			assert.Equal(t, "never force", rule.DenyIf[0].OnDeny)
			assert.True(t, rule.DenyIf[1].IsApproval())
			assert.Empty(t, findings(r, recommend.KindLoosening))
			for _, args := range []map[string]any{{"env": "dev", "force": true}, {"env": "prod"}} {
				c := policy.Call{TS: now, Tool: "delete_vm", Grant: "g", Args: args}
				assert.Equal(t, policy.Denied, policy.NewEvaluator(r.Policy).Peek(c).Decision, args)
			}
			ok := policy.Call{TS: now, Tool: "delete_vm", Grant: "g", Args: map[string]any{"env": "dev"}}
			assert.Equal(t, policy.ApprovalRequired, policy.NewEvaluator(r.Policy).Peek(ok).Decision)
		})
	}
}
