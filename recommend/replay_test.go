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
	"github.com/mcptrail/mcptrail/ingest"
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
				fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "proxmox-mcp", From: from, To: now, Policy: p})
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

// The replay is two-sided: next to the calls the gateway allowed that the
// policy refuses (changed), it counts the calls the gateway refused that the
// policy lets through (newly_allowed), on every path of the replay.
func TestReplayCountsNewlyAllowed(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("get_a", audit.Denied, 3)
		add("get_a", audit.Hidden, 2)
		add("get_b", audit.RateLimited, 4)
		add("get_b", audit.Allowed, 2)
		add("get_c", audit.Allowed, 5)
		add("get_d", audit.ApprovalRequired, 1)
	})
	p := &policy.Policy{Version: "1", Default: policy.DefaultDeny, Hide: []string{"get_c"}, Tools: map[string]*policy.ToolRule{
		"get_a": {},
		"get_b": {Limits: []policy.Limit{{Counter: "b", Window: policy.WindowMinute, Max: 100}}},
		"get_d": {DenyIf: []policy.DenyRule{{OnDeny: "Requires human approval."}}},
	}}
	fast, exact := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-24 * time.Hour), To: now, Policy: p})
	for _, r := range []*recommend.Replay{fast, exact} {
		assert.Equal(t, int64(5), r.ByTool["get_a"].NewlyAllowed, "denied and hidden calls now allowed")
		assert.Equal(t, int64(4), r.ByTool["get_b"].NewlyAllowed, "rate-limited calls under a higher limit")
		assert.Zero(t, r.ByTool["get_c"].NewlyAllowed)
		assert.Equal(t, int64(5), r.ByTool["get_c"].Changed)
		assert.Zero(t, r.ByTool["get_d"].NewlyAllowed, "still held for approval")
		assert.Equal(t, int64(9), r.NewlyAllowed)
		assert.Equal(t, int64(5), r.Changed)
		require.Len(t, r.FirstNewlyAllowed, 6, "at most 3 per tool")
		for _, c := range r.FirstNewlyAllowed {
			assert.Equal(t, "allowed", c.Replayed)
			assert.NotEqual(t, "allowed", c.Recorded)
		}
	}
}

// Tools the proposal refuses outright are read together: their sessions,
// agents and earliest calls are those of each tool, whatever the order of
// their calls in time.
func TestReplayRefusedToolsTogether(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		add("get_e", audit.Allowed, 1)
		add("get_c", audit.Allowed, 2)
		add("get_f", audit.Denied, 1)
		add("get_e", audit.Allowed, 3)
		add("get_f", audit.Allowed, 2)
		add("get_c", audit.Allowed, 1)
	})
	p := &policy.Policy{Version: "1", Default: policy.DefaultDeny, Hide: []string{"get_c", "get_e"}}
	fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-24 * time.Hour), To: now, Policy: p, FirstN: 3})
	assert.Equal(t, int64(9), fast.Changed, "every allowed call is refused now")
	assert.Equal(t, int64(9), fast.SessionsAffected, "one session per call")
	assert.Equal(t, int64(1), fast.AgentsAffected)
	for tool, n := range map[string]int64{"get_c": 3, "get_e": 4, "get_f": 2} {
		assert.Equal(t, n, fast.ByTool[tool].Changed, tool)
		assert.Equal(t, n, fast.ByTool[tool].SessionsAffected, tool)
	}
	var got []string
	for _, c := range fast.FirstAffected {
		got = append(got, c.Tool+"/"+c.ID)
		assert.Equal(t, "allowed", c.Recorded)
	}
	assert.Equal(t, []string{"get_e/e000", "get_c/e001", "get_c/e002"}, got, "the earliest three, in time order")
	assert.Equal(t, "hidden", fast.FirstAffected[0].Replayed)
}

// storeEvents stores calls made by add: n calls of a tool with a decision,
// one second apart, in sessions of their own.
func storeEvents(t *testing.T, fill func(add func(tool string, d audit.Decision, n int))) *analytics.Store {
	t.Helper()
	return storeCalls(t, func(add func(e audit.Event, n int)) {
		fill(func(tool string, d audit.Decision, n int) { add(audit.Event{Tool: tool, Decision: d}, n) })
	})
}

// storeCalls stores n calls like e for each add, a second apart in the hour
// before now, each of server srv, grant g, agent a and a session of its own.
func storeCalls(t *testing.T, fill func(add func(e audit.Event, n int))) *analytics.Store {
	t.Helper()
	store := openStore(t)
	var evs []audit.Event
	fill(func(e audit.Event, n int) {
		for range n {
			k := len(evs)
			e.ID, e.TS, e.Session = fmt.Sprintf("e%03d", k), now.Add(-time.Hour+time.Duration(k)*time.Second), fmt.Sprintf("s%d", k)
			e.Server, e.Method, e.Grant, e.Agent = "srv", "tools/call", "g", "a"
			evs = append(evs, e)
		}
	})
	_, err := store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	return store
}

// openStore opens an empty store in the test's temporary folder, closed
// when the test ends.
func openStore(t *testing.T) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "calls.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// fastAndExact replays twice, with the SQL fast path and through the
// evaluator only, and holds the two equal.
func fastAndExact(t *testing.T, store *analytics.Store, opts recommend.ReplayOptions) (fast, exact *recommend.Replay) {
	t.Helper()
	fast, err := recommend.Run(context.Background(), store.DB(), opts)
	require.NoError(t, err)
	opts.Exact = true
	exact, err = recommend.Run(context.Background(), store.DB(), opts)
	require.NoError(t, err)
	assert.Equal(t, exact, fast)
	return fast, exact
}

// The replay splits each tool's changed calls by the rule that refuses them,
// and counts the calls inside runaway loops that the limits refuse, the same
// on the SQL fast path and through the evaluator.
func TestReplayCausesAndRunawayCut(t *testing.T) {
	store := loadScenario(t, "loops", 1)
	ctx := context.Background()
	rep, err := recommend.Recommend(ctx, store.DB(), recommend.Options{Server: simulate.LoopsTruth.Server, Now: now, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	require.NotEmpty(t, rep.Runaway, "the scenario plants runaway loops")
	var polls int64
	for _, l := range rep.Runaway {
		polls += l.Polls
	}
	fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: rep.Server, From: rep.Window.From, To: rep.Window.To,
		Policy: rep.Policy, Loops: rep.Runaway})
	assert.Positive(t, fast.RunawayPollsCut)
	assert.LessOrEqual(t, fast.RunawayPollsCut, polls)
	for tool, tr := range fast.ByTool {
		var sum int64
		for c, n := range tr.ChangedBy {
			assert.NotEmpty(t, c.Decision, tool)
			assert.NotEmpty(t, c.Rule, tool)
			sum += n
		}
		assert.Equal(t, tr.Changed, sum, tool)
		assert.LessOrEqual(t, tr.Loop.Changed, tr.Loop.Allowed, tool)
		assert.LessOrEqual(t, tr.Loop.Changed, tr.Changed, tool)
	}
	loops := fast.ByTool["vm_agent_exec_status"].Loop
	assert.Equal(t, polls, loops.Calls, "every poll of the loops is counted inside them")
	assert.Positive(t, loops.Changed)
}

// The evaluator streams the window a day at a time: a call on a slice's
// last instant and one a microsecond later are each read once, in order,
// and a limit's count carries from one slice into the next.
func TestReplayStreamAcrossDays(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "s.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	from := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	to := from.Add(72 * time.Hour)
	var evs []audit.Event
	add := func(id string, ts time.Time) {
		evs = append(evs, audit.Event{ID: id, TS: ts, Server: "srv", Tool: "get_a", Method: "tools/call", Decision: audit.Allowed,
			Grant: "g", Agent: "a", Session: "s"})
	}
	add("at-from", from) // outside the window (from, to]
	add("first", from.Add(time.Microsecond))
	add("slice-end", from.Add(24*time.Hour))                   // 2 Nov 12:00, the first day's last instant
	add("next-slice", from.Add(24*time.Hour+time.Microsecond)) // the same UTC day, the next slice
	add("at-to", to)
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow,
		AllTools: &policy.ToolRule{Limits: []policy.Limit{{Counter: "per-day", Window: policy.WindowDay, Max: 1, Scope: policy.ScopeGrant}}}}
	require.NoError(t, p.Validate())
	r, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{Server: "srv", From: from, To: to, Policy: p})
	require.NoError(t, err)
	assert.Equal(t, int64(4), r.Calls, "every call of the window once, the one at its start left out")
	assert.Equal(t, int64(1), r.RateLimited, "the second call of 2 November is over the day's limit, across the slices")
	require.Len(t, r.FirstAffected, 1)
	assert.Equal(t, "next-slice", r.FirstAffected[0].ID)
}

// TestReplayNewlyAllowedBeyondTheFirstDays: a tool's earliest calls the
// proposal newly allows are looked for first up to the day by which each
// tool had three refused calls; a tool whose refused calls of that day lie
// before the window's start (the day counted whole) gets its calls from
// the rest of the window all the same.
func TestReplayNewlyAllowedBeyondTheFirstDays(t *testing.T) {
	ctx := context.Background()
	day0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var evs []audit.Event
	add := func(tool string, at time.Time) {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("n%02d", len(evs)), TS: at, Server: "srv", Tool: tool, Method: "tools/call",
			Decision: audit.Denied, Grant: "g", Agent: "a", Session: fmt.Sprintf("s%d", len(evs))})
	}
	for i := range 3 {
		add("get_a", day0.Add(6*time.Hour+time.Duration(i)*time.Minute))  // before the window
		add("get_a", day0.Add(50*time.Hour+time.Duration(i)*time.Minute)) // its third day
	}
	for i := range 5 {
		add("get_b", day0.Add(13*time.Hour+time.Duration(i)*time.Minute))
	}
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "n.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow}
	r, err := recommend.Run(ctx, store.DB(), recommend.ReplayOptions{Server: "srv", Grant: "g", From: day0.Add(12 * time.Hour), To: day0.Add(71 * time.Hour), Policy: p})
	require.NoError(t, err)
	var got []string
	for _, c := range r.FirstNewlyAllowed {
		got = append(got, c.Tool+"@"+c.TS.Format("02T15:04"))
	}
	assert.ElementsMatch(t, []string{"get_a@22T02:00", "get_a@22T02:01", "get_a@22T02:02", "get_b@20T13:00", "get_b@20T13:01", "get_b@20T13:02"}, got)
}

// Without stored arguments a conditional rule cannot be evaluated; a call
// the gateway refused by one is refused again when the proposal keeps the
// rule's conditions (ReplayOptions.Current tells which), and counts as
// newly allowed when the proposal changed them or the current policy is
// unknown: never a widening where there is none, never none where there is one.
func TestReplayCarriesConditionalRefusals(t *testing.T) {
	store := storeCalls(t, func(add func(e audit.Event, n int)) {
		add(audit.Event{Tool: "refund", Decision: audit.Denied, Rule: "/tools/refund/deny_if/0"}, 3)
		add(audit.Event{Tool: "refund", Decision: audit.Allowed}, 4)
		add(audit.Event{Tool: "pay", Decision: audit.Denied, Rule: "/tools/pay/require/0"}, 2)
		add(audit.Event{Tool: "pay", Decision: audit.Allowed}, 1)
		add(audit.Event{Tool: "move", Decision: audit.Denied, Rule: "/tools/move/deny_if/0"}, 1)
	})

	const refundDeny = `{"conditions":[{"path":"args.amount","op":"gte","value":500}],"on_deny":"no"}`
	const payRequire = `[{"path":"args.reason","op":"exists","value":true}]`
	parse := func(moveDeny string) *policy.Policy {
		p, err := policy.Parse([]byte(`{"version":"1","default":"deny","tools":{
			"refund":{"deny_if":[`+refundDeny+`],"limits":[{"counter":"r","window":"minute","max":100}]},
			"pay":{"require":`+payRequire+`},
			"move":{"deny_if":[`+moveDeny+`]}}}`), "p.json")
		require.NoError(t, err)
		return p
	}
	current := parse(`{"conditions":[{"path":"args.node","op":"eq","value":"pve1"}]}`)
	changed := parse(`{"conditions":[{"path":"args.node","op":"eq","value":"pve2"}]}`)
	replay := func(p, cur *policy.Policy) *recommend.Replay {
		fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p, Current: cur})
		return fast
	}

	kept := replay(current, current)
	assert.Zero(t, kept.NewlyAllowed, "the same conditions refuse the same calls")
	assert.Equal(t, int64(6), kept.Denied)
	assert.Equal(t, int64(3), kept.ByTool["refund"].Denied)
	assert.Equal(t, int64(2), kept.ByTool["pay"].Denied)
	assert.Empty(t, kept.FirstNewlyAllowed)

	moved := replay(changed, current)
	assert.Equal(t, int64(1), moved.NewlyAllowed, "move's condition changed: its refused call may pass now")
	assert.Equal(t, int64(1), moved.ByTool["move"].NewlyAllowed)

	unknown := replay(current, nil)
	assert.Equal(t, int64(6), unknown.NewlyAllowed, "with the current policy unknown the replay cannot tell")
}

// Deciding which tools the replay can count at once must not spend the
// policy's quota: with a shared all_tools limit smaller than the number of
// tools, the tools checked last were counted as rate limited whole.
func TestReplayToolChecksSpendNoQuota(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) {
		for _, tool := range []string{"d", "c", "b", "a"} {
			add(tool, audit.Allowed, 1) // one call a second, "a" last
		}
	})
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow,
		AllTools: &policy.ToolRule{Limits: []policy.Limit{{Counter: "all", Window: policy.WindowHour, Max: 3, Scope: policy.ScopeGrant}}}}
	r, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p})
	require.NoError(t, err)
	assert.Equal(t, int64(3), r.Allowed, "the first three calls of the hour pass")
	assert.Equal(t, int64(1), r.RateLimited)
	assert.Equal(t, int64(1), r.ByTool["a"].RateLimited, "the fourth call in time order is refused")
	assert.Zero(t, r.ByTool["d"].RateLimited)
}

// A refusal is carried over only from calls decided under the policy
// version in force at the window's end, which the current policy is taken
// to be: an earlier version's rule at the same pointer may have other
// conditions.
func TestReplayCarriesRefusalsOfTheCurrentVersionOnly(t *testing.T) {
	store := storeCalls(t, func(add func(e audit.Event, n int)) {
		add(audit.Event{Tool: "refund", Decision: audit.Denied, Rule: "/tools/refund/deny_if/0", PolicyVersion: "v1"}, 3)
		add(audit.Event{Tool: "refund", Decision: audit.Denied, Rule: "/tools/refund/deny_if/0", PolicyVersion: "v2"}, 2)
		add(audit.Event{Tool: "refund", Decision: audit.Allowed, PolicyVersion: "v2"}, 1)
	})
	p, err := policy.Parse([]byte(`{"version":"1","default":"deny","tools":{"refund":{
		"deny_if":[{"conditions":[{"path":"args.tier","op":"eq","value":"trial"}]}]}}}`), "p.json")
	require.NoError(t, err)
	r, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p, Current: p})
	require.NoError(t, err)
	assert.Equal(t, int64(2), r.Denied, "v2's refusals, by the current rule")
	assert.Equal(t, int64(3), r.NewlyAllowed, "v1's: its rule at that pointer may have been another")
}

// A conditional rule of all_tools decides call by call as a tool's own
// does: it refuses the calls whose stored arguments match it, and the
// gateway's refusals by it of calls without arguments carry over. The
// replay took such a policy for one without the rule.
func TestReplayAllToolsConditions(t *testing.T) {
	store := storeCalls(t, func(add func(e audit.Event, n int)) {
		add(audit.Event{Tool: "stop_vm", Decision: audit.Allowed, Args: []byte(`{"force":true}`)}, 3)
		add(audit.Event{Tool: "stop_vm", Decision: audit.Allowed, Args: []byte(`{"vmid":1}`)}, 2)
		add(audit.Event{Tool: "stop_vm", Decision: audit.Denied, Rule: "/all_tools/deny_if/0"}, 2)
	})
	p, err := policy.Parse([]byte(`{"version":"1","default":"allow",
		"all_tools":{"deny_if":[{"conditions":[{"path":"args.force","op":"exists","value":true}],"on_deny":"no"}]}}`), "p.json")
	require.NoError(t, err)
	r, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p, Current: p})
	assert.Equal(t, int64(5), r.Denied, "the three calls with force, and the two the gateway refused by the same rule")
	assert.Equal(t, int64(3), r.Changed)
	assert.Zero(t, r.NewlyAllowed)
	assert.Equal(t, int64(2), r.Allowed)
}

// The earliest affected calls are the first by time, then id, however
// many calls share an instant and whichever path decided them: the
// statically refused tools' calls filled the list, and a call of the same
// instant with a smaller id was dropped.
func TestReplayFirstAffectedTiesByID(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	at := now.Add(-time.Hour)
	var evs []audit.Event
	add := func(id, tool string) {
		evs = append(evs, audit.Event{ID: id, TS: at, Server: "srv", Tool: tool, Method: "tools/call", Decision: audit.Allowed, Grant: "g", Session: id})
	}
	add("a0", "lim")
	add("a1", "lim")
	for i := range 4 {
		add(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i))
	}
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Hide: []string{"h0", "h1", "h2", "h3"}, Tools: map[string]*policy.ToolRule{
		"lim": {Limits: []policy.Limit{{Counter: "lim", Window: policy.WindowHour, Max: 1}}},
	}}
	fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p, FirstN: 1})
	require.Len(t, fast.FirstAffected, 1)
	assert.Equal(t, "a1", fast.FirstAffected[0].ID, "a1 comes before b0 at the same instant")
}

// A limit is named by its counter escaped as a JSON pointer token, on the
// SQL path as by the evaluator.
func TestReplayLimitRuleEscapesItsCounter(t *testing.T) {
	store := storeEvents(t, func(add func(tool string, d audit.Decision, n int)) { add("get_a", audit.Allowed, 3) })
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
		"get_a": {Limits: []policy.Limit{{Counter: "per/min", Window: policy.WindowHour, Max: 1}}},
	}}
	fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-2 * time.Hour), To: now, Policy: p})
	require.NotEmpty(t, fast.FirstAffected)
	assert.Equal(t, "/tools/get_a/limits/per~1min", fast.FirstAffected[0].Rule)
}

// A refused tool's earliest affected calls are the first by time and id:
// of several calls at the instant of the last one listed, those with the
// least ids, on the SQL fast path as through the evaluator.
func TestReplayEarliestAffectedAtOneInstant(t *testing.T) {
	store := openStore(t)
	base := now.Add(-time.Hour)
	var evs []audit.Event
	add := func(id, tool string, at time.Duration, d audit.Decision) {
		evs = append(evs, audit.Event{ID: id, TS: base.Add(at), Server: "srv", Method: "tools/call", Grant: "g", Agent: "a",
			Session: "s-" + id, Tool: tool, Decision: d})
	}
	add("k9", "get_c", 0, audit.Allowed)
	add("k2", "get_c", time.Second, audit.Allowed)
	add("k4", "get_c", 1500*time.Millisecond, audit.Denied) // refused already: not affected
	for _, id := range []string{"m5", "m1", "m7", "m3"} {
		add(id, "get_c", 2*time.Second, audit.Allowed) // four at one instant
	}
	add("a0", "get_c", 3*time.Second, audit.Allowed)
	add("z1", "get_e", 5*time.Second, audit.Allowed)
	_, err := store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	p := &policy.Policy{Version: "1", Default: policy.DefaultDeny, Hide: []string{"get_c", "get_e"}}
	fast, _ := fastAndExact(t, store, recommend.ReplayOptions{Server: "srv", From: now.Add(-24 * time.Hour), To: now, Policy: p, FirstN: 3})
	var got []string
	for _, c := range fast.FirstAffected {
		got = append(got, c.Tool+"/"+c.ID)
	}
	assert.Equal(t, []string{"get_c/k9", "get_c/k2", "get_c/m1"}, got, "the earliest three, the instant's by id")
	assert.Equal(t, int64(8), fast.Changed)
}
