package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 5, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one call and the decision expected for it.
type step struct {
	call Call
	want string
}

func runSteps(t *testing.T, e *Evaluator, steps []step) {
	t.Helper()
	for i, s := range steps {
		v := e.Evaluate(s.call)
		assert.Equal(t, s.want, v.Decision, "step %d: %+v → %+v", i, s.call, v)
	}
}

func limitPolicy(t *testing.T, scope, window string, max int) *Policy {
	t.Helper()
	return mustParse(t, fmt.Sprintf(`{"version":"1","default":"deny","tools":{"x":{"limits":[
		{"counter":"x_rate","window":%q,"max":%d,"scope":%q}]}}}`, window, max, scope))
}

func TestEvaluateWindowBoundaries(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name   string
		window string
		steps  []step
	}{
		{"minute", WindowMinute, []step{
			{Call{TS: at(0), Tool: "x"}, Allowed},
			{Call{TS: at(30 * time.Second), Tool: "x"}, Allowed},
			{Call{TS: at(59*time.Second + 999*ms), Tool: "x"}, RateLimited},
			{Call{TS: at(60 * time.Second), Tool: "x"}, Allowed}, // a new calendar minute
			{Call{TS: at(61 * time.Second), Tool: "x"}, Allowed},
			{Call{TS: at(119 * time.Second), Tool: "x"}, RateLimited},
		}},
		{"minute is calendar-aligned, not sliding", WindowMinute, []step{
			{Call{TS: at(50 * time.Second), Tool: "x"}, Allowed},
			{Call{TS: at(59 * time.Second), Tool: "x"}, Allowed},
			{Call{TS: at(61 * time.Second), Tool: "x"}, Allowed}, // 11 s later, but another minute
			{Call{TS: at(62 * time.Second), Tool: "x"}, Allowed},
		}},
		{"hour", WindowHour, []step{
			{Call{TS: at(0), Tool: "x"}, Allowed},
			{Call{TS: at(30 * time.Minute), Tool: "x"}, Allowed},
			{Call{TS: at(59*time.Minute + 59*time.Second + 999*ms), Tool: "x"}, RateLimited},
			{Call{TS: at(time.Hour), Tool: "x"}, Allowed},
		}},
		{"day", WindowDay, []step{
			{Call{TS: at(-10 * time.Hour), Tool: "x"}, Allowed}, // 00:00 UTC
			{Call{TS: at(0), Tool: "x"}, Allowed},
			{Call{TS: at(13*time.Hour + 59*time.Minute + 59*time.Second + 999*ms), Tool: "x"}, RateLimited}, // 23:59:59.999
			{Call{TS: at(14 * time.Hour), Tool: "x"}, Allowed},                                              // next day 00:00 UTC
		}},
		{"day boundary is UTC whatever the zone", WindowDay, []step{
			// 01:30 at +02:00 is 23:30 UTC the day before
			{Call{TS: time.Date(2026, 3, 6, 1, 30, 0, 0, time.FixedZone("CEST", 2*3600)), Tool: "x"}, Allowed},
			{Call{TS: time.Date(2026, 3, 6, 1, 40, 0, 0, time.FixedZone("CEST", 2*3600)), Tool: "x"}, Allowed},
			{Call{TS: time.Date(2026, 3, 6, 1, 50, 0, 0, time.FixedZone("CEST", 2*3600)), Tool: "x"}, RateLimited},
			// 02:10 at +02:00 is 00:10 UTC: a new UTC day
			{Call{TS: time.Date(2026, 3, 6, 2, 10, 0, 0, time.FixedZone("CEST", 2*3600)), Tool: "x"}, Allowed},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewEvaluator(limitPolicy(t, "grant", tt.window, 2)), tt.steps)
		})
	}
}

func TestEvaluateScopes(t *testing.T) {
	c := func(grant, session, agent string) Call {
		return Call{TS: t0, Tool: "x", Grant: grant, Session: session, Agent: agent}
	}
	tests := []struct {
		name  string
		scope string
		steps []step
	}{
		{"grant: sessions of one grant share", "grant", []step{
			{c("g1", "s1", "a1"), Allowed},
			{c("g1", "s2", "a2"), RateLimited},
			{c("g2", "s1", "a1"), Allowed},
			{c("", "s3", ""), Allowed}, // the empty grant is a grant too
			{c("", "s4", ""), RateLimited},
		}},
		{"empty scope means grant", "", []step{
			{c("g1", "s1", ""), Allowed},
			{c("g1", "s2", ""), RateLimited},
		}},
		{"session", "session", []step{
			{c("g1", "s1", ""), Allowed},
			{c("g1", "s2", ""), Allowed},
			{c("g1", "s1", ""), RateLimited},
			{c("g2", "s1", ""), Allowed}, // each grant counts its own sessions: a policy is attached to a grant
		}},
		{"session missing falls back to the grant", "session", []step{
			{c("g1", "", ""), Allowed},
			{c("g1", "", ""), RateLimited},
			{c("g2", "", ""), Allowed},
			{c("g1", "g1", ""), Allowed}, // a session named like a grant has its own counter
			{c("", "", ""), Allowed},     // no session, no grant: the empty grant
			{c("", "", ""), RateLimited},
		}},
		{"agent", "agent", []step{
			{c("g1", "s1", "a1"), Allowed},
			{c("g1", "s2", "a1"), RateLimited},
			{c("g1", "s1", "a2"), Allowed},
			{c("g2", "s3", "a1"), Allowed}, // and its own agents
		}},
		{"agent missing falls back to the grant", "agent", []step{
			{c("g1", "s1", ""), Allowed},
			{c("g1", "s2", ""), RateLimited},
			{c("g1", "s2", "a1"), Allowed},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, NewEvaluator(limitPolicy(t, tt.scope, "minute", 1)), tt.steps)
		})
	}
}

func TestEvaluateAllToolsAndConsumption(t *testing.T) {
	p := mustParse(t, `{"version":"1","default":"allow","hide":["h"],
		"all_tools":{"limits":[{"counter":"calls-per-minute","window":"minute","max":3}]},
		"tools":{"x":{"limits":[{"counter":"x_rate","window":"minute","max":2}]},
		         "ask":{"deny_if":[{"conditions":[],"on_deny":"ask first"}]}}}`)
	e := NewEvaluator(p)
	call := func(tool string, s time.Duration) Call { return Call{TS: at(s * time.Second), Tool: tool, Grant: "g"} }

	assert.Equal(t, Verdict{Decision: Allowed}, e.Evaluate(call("x", 1)))
	assert.Equal(t, Verdict{Decision: Allowed}, e.Evaluate(call("x", 2)))
	// refused by the tool's limit: consumes nothing, not even in all_tools
	assert.Equal(t, Verdict{Decision: RateLimited, Rule: "/tools/x/limits/x_rate",
		Reason: "Rate limit of 2 per minute reached (counter x_rate)."}, e.Evaluate(call("x", 3)))
	// hidden and approval-required calls are not let through either
	assert.Equal(t, Hidden, e.Evaluate(call("h", 4)).Decision)
	assert.Equal(t, ApprovalRequired, e.Evaluate(call("ask", 5)).Decision)
	// so all_tools has exactly one call of room left, for any tool (listed or not)
	assert.Equal(t, Verdict{Decision: Allowed}, e.Evaluate(call("unlisted", 6)))
	assert.Equal(t, Verdict{Decision: RateLimited, Rule: "/all_tools/limits/calls-per-minute",
		Reason: "Rate limit of 3 per minute reached (counter calls-per-minute)."}, e.Evaluate(call("y", 7)))
	assert.Equal(t, RateLimited, e.Evaluate(call("x", 8)).Decision)
	// next minute: fresh counters everywhere
	for _, tool := range []string{"x", "x", "y"} {
		assert.Equal(t, Allowed, e.Evaluate(call(tool, 61)).Decision)
	}
	assert.Equal(t, RateLimited, e.Evaluate(call("z", 62)).Decision)
}

func TestEvaluateAllLimitsCheckedBeforeConsuming(t *testing.T) {
	// Two limits on one tool: the hourly one refuses, so the minute one must not count.
	p := mustParse(t, `{"version":"1","default":"deny","tools":{"x":{"limits":[
		{"counter":"per-minute","window":"minute","max":2},
		{"counter":"per-hour","window":"hour","max":1,"scope":"session"}]}}}`)
	e := NewEvaluator(p)
	runSteps(t, e, []step{
		{Call{TS: at(0), Tool: "x", Session: "s1"}, Allowed},
		{Call{TS: at(time.Second), Tool: "x", Session: "s1"}, RateLimited}, // per-hour full
		{Call{TS: at(2 * time.Second), Tool: "x", Session: "s2"}, Allowed}, // per-minute still has room
		{Call{TS: at(3 * time.Second), Tool: "x", Session: "s3"}, RateLimited},
	})
	v := e.Evaluate(Call{TS: at(4 * time.Second), Tool: "x", Session: "s1"})
	assert.Equal(t, "/tools/x/limits/per-minute", v.Rule, "the first limit without room decides")
	v = e.Evaluate(Call{TS: at(time.Minute), Tool: "x", Session: "s1"})
	assert.Equal(t, Verdict{Decision: RateLimited, Rule: "/tools/x/limits/per-hour",
		Reason: "Rate limit of 1 per hour reached (counter per-hour, per session)."}, v)
}

func TestEvaluateDecisions(t *testing.T) {
	spec := mustParse(t, string(readTestdata(t, "spec.json")))
	tests := []struct {
		name   string
		policy *Policy
		tool   string
		want   Verdict
	}{
		{"hidden", spec, "delete_storage_volume", Verdict{Hidden, RuleHidden, `tool "delete_storage_volume" is hidden by the policy`}},
		{"default deny", spec, "create_vm", Verdict{Denied, RuleDefaultDeny, `tool "create_vm" is not listed and the policy denies by default`}},
		{"approval", spec, "delete_vm", Verdict{ApprovalRequired, "/tools/delete_vm/deny_if/0", "Requires human approval."}},
		{"listed with {}", spec, "get_vm_status", Verdict{Decision: Allowed}},
		{"default allow", mustParse(t, `{"version":"1","default":"allow"}`), "anything", Verdict{Decision: Allowed}},
		{"hidden wins over listed", mustParse(t, `{"version":"1","default":"allow","hide":["x"],"tools":{"x":{}}}`), "x",
			Verdict{Hidden, RuleHidden, `tool "x" is hidden by the policy`}},
		{"hide *", mustParse(t, `{"version":"1","default":"allow","hide":["*"],"tools":{"x":{}}}`), "x",
			Verdict{Hidden, RuleHidden, `tool "x" is hidden by the policy`}},
		{"approval without message", mustParse(t, `{"version":"1","default":"deny","tools":{"x":{"deny_if":[{"conditions":[]}]}}}`), "x",
			Verdict{ApprovalRequired, "/tools/x/deny_if/0", "Requires human approval."}},
		{"approval in all_tools", mustParse(t, `{"version":"1","default":"allow","all_tools":{"deny_if":[{"conditions":[],"on_deny":"everything needs a human"}]}}`), "x",
			Verdict{ApprovalRequired, "/all_tools/deny_if/0", "everything needs a human"}},
		{"nil policy denies everything", nil, "x", Verdict{Denied, RuleDefaultDeny, `tool "x" is not listed and the policy denies by default`}},
		{"tool name escaped in pointer", mustParse(t, `{"version":"1","default":"deny","tools":{"a/b":{"deny_if":[{"conditions":[],"on_deny":"ask"}]}}}`), "a/b",
			Verdict{ApprovalRequired, "/tools/a~1b/deny_if/0", "ask"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, NewEvaluator(tt.policy).Evaluate(Call{TS: t0, Tool: tt.tool}))
		})
	}
}

func TestEvaluateArgs(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "stripe.json")))
	tests := []struct {
		name string
		args map[string]any
		want Verdict
	}{
		// Argument values are usually not stored: conditions cannot be evaluated and do not deny.
		{"args unknown", nil, Verdict{Decision: Allowed}},
		{"deny_if matches", map[string]any{"reason": "dup", "amount": 20000.0},
			Verdict{Denied, "/tools/create_refund/deny_if/0", "Refunds over $100 need a human."}},
		{"deny_if does not match", map[string]any{"reason": "dup", "amount": 500.0}, Verdict{Decision: Allowed}},
		{"deny_if on a missing argument does not match", map[string]any{"reason": "dup"}, Verdict{Decision: Allowed}},
		{"require fails", map[string]any{"amount": 50.0},
			Verdict{Denied, "/tools/create_refund/require/0", "required condition not met: args.reason exists true"}},
		{"known empty args fail require", map[string]any{},
			Verdict{Denied, "/tools/create_refund/require/0", "required condition not met: args.reason exists true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEvaluator(p)
			assert.Equal(t, tt.want, e.Evaluate(Call{TS: t0, Tool: "create_refund", Args: tt.args}))
		})
	}
}

func TestConditionOps(t *testing.T) {
	args := map[string]any{
		"n":      10.0,
		"s":      "hello world",
		"numstr": "10",
		"digits": "1000000",
		"expstr": "1e+06",
		"list":   []any{"a", 2.0},
		"flag":   true,
		"deep":   map[string]any{"er": map[string]any{"v": "x"}},
		"null":   nil,
		"inner":  map[string]any{"null": nil},
	}
	tests := []struct {
		path, op, value string
		want            bool
	}{
		{"args.n", "eq", `10`, true},
		{"args.n", "eq", `"10"`, true}, // a number and a string compare as text, as in Intercept
		{"args.numstr", "eq", `10.0`, true},
		{"args.numstr", "eq", `"10.0"`, false},
		// as text, an integer value is its digits (Intercept holds it as an
		// int), any other number Go's shortest float
		{"args.digits", "eq", `1000000`, true},
		{"args.expstr", "eq", `1000000`, false},
		{"args.digits", "neq", `1000000`, false},
		{"args.digits", "eq", `1e6`, false},
		{"args.expstr", "eq", `1e6`, true},
		{"args.digits", "in", `[1000000]`, false}, // inside a list, a float (2.0), as it is written for Intercept
		{"args.n", "eq", `10.0`, true},            // numbers are compared numerically when both sides are numbers
		{"args.s", "eq", `"hello world"`, true},
		{"args.flag", "eq", `true`, true},
		{"args.n", "neq", `11`, true},
		{"args.n", "neq", `10`, false},
		{"args.missing", "neq", `1`, false}, // a missing argument fails every op but exists
		{"args.s", "in", `["x","hello world"]`, true},
		{"args.n", "in", `[1,10]`, true},
		{"args.n", "not_in", `[1,10]`, false},
		{"args.n", "not_in", `[1,2]`, true},
		{"args.missing", "not_in", `[1]`, false},
		{"args.n", "lt", `11`, true},
		{"args.n", "lt", `10`, false},
		{"args.n", "lte", `10`, true},
		{"args.n", "gt", `9.5`, true},
		{"args.n", "gte", `10`, true},
		{"args.n", "gte", `10.5`, false},
		{"args.s", "gt", `1`, false},      // not a number
		{"args.numstr", "gt", `9`, false}, // a string is never read as a number, as in Intercept
		{"args.s", "regex", `"^hello"`, true},
		{"args.s", "regex", `"^world"`, false},
		{"args.n", "regex", `"1"`, false}, // regex applies to strings only
		{"args.s", "contains", `"lo wo"`, true},
		{"args.s", "contains", `"xyz"`, false},
		{"args.list", "contains", `2`, true},
		{"args.list", "contains", `"b"`, false},
		{"args.s", "exists", `true`, true},
		{"args.s", "exists", ``, true},
		{"args.missing", "exists", `true`, false},
		{"args.missing", "exists", `false`, true},
		{"args.deep.er.v", "eq", `"x"`, true},
		{"args.deep.er.missing", "exists", `true`, false},
		{"args.s.sub", "exists", `true`, false}, // descending into a string
		{"args.null", "exists", `true`, false},  // null is absent, as in Intercept
		{"args.null", "exists", `false`, true},
		{"args.inner.null", "exists", `true`, false},
		{"args.null", "eq", `null`, true},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.op+" "+tt.value, func(t *testing.T) {
			c := Condition{Path: tt.path, Op: tt.op}
			if tt.value != "" {
				c.Value = []byte(tt.value)
			}
			assert.Equal(t, tt.want, compileCond("/c", c).holds(args))
		})
	}
	// invalid conditions (rejected by Validate) never match rather than panic
	for _, c := range []Condition{{Path: "state.x", Op: "eq"}, {Path: "args.s", Op: "like"}, {Path: "args.s", Op: "regex", Value: []byte(`"("`)}, {Path: "args.s", Op: "eq", Value: []byte(`{`)}} {
		assert.False(t, compileCond("/c", c).holds(args), "%+v", c)
	}
}

func TestEvaluateMultiConditionDeny(t *testing.T) {
	p := mustParse(t, `{"version":"1","default":"deny","tools":{"refund":{"deny_if":[
		{"conditions":[{"path":"args.amount","op":"gte","value":500},{"path":"args.tier","op":"eq","value":"trial"}],"on_deny":"no"}]}}}`)
	e := NewEvaluator(p)
	deny := Verdict{Denied, "/tools/refund/deny_if/0", "no"}
	assert.Equal(t, deny, e.Evaluate(Call{Tool: "refund", Args: map[string]any{"amount": 600, "tier": "trial"}}))
	assert.Equal(t, Allowed, e.Evaluate(Call{Tool: "refund", Args: map[string]any{"amount": 600, "tier": "pro"}}).Decision)
	assert.Equal(t, Allowed, e.Evaluate(Call{Tool: "refund", Args: map[string]any{"amount": 100, "tier": "trial"}}).Decision)
}

func TestEvaluatorMemoryIsBounded(t *testing.T) {
	e := NewEvaluator(limitPolicy(t, "session", "minute", 5))
	for i := range 1000 {
		e.Evaluate(Call{TS: at(time.Duration(i) * time.Millisecond), Tool: "x", Session: fmt.Sprint("s", i)})
	}
	require.Len(t, e.windows[0].counts, 1000)
	e.Evaluate(Call{TS: at(time.Minute), Tool: "x", Session: "late"})
	assert.Len(t, e.windows[0].counts, 1, "past windows are dropped")

	// A call older than the current window (out of order) counts in the current one.
	assert.Equal(t, Allowed, e.Evaluate(Call{TS: at(0), Tool: "x", Session: "late"}).Decision)
	assert.Equal(t, 2, e.windows[0].counts["/tools/x/limits/x_rate\x00s:\x00late"])
}

func TestTally(t *testing.T) {
	e := NewEvaluator(mustParse(t, string(readTestdata(t, "spec.json"))))
	var tally Tally
	calls := []Call{
		{TS: t0, Tool: "get_vm_status", Session: "s1"},
		{TS: t0, Tool: "get_vm_status", Session: "s2"},
		{TS: t0, Tool: "delete_vm", Session: "s1"},
		{TS: t0, Tool: "delete_storage_volume", Session: "s1"},
		{TS: t0, Tool: "unknown", Session: "s3"},
		{TS: t0, Tool: "unknown"},
	}
	for i := range 21 {
		calls = append(calls, Call{TS: at(time.Duration(i) * time.Second), Tool: "vm_agent_exec_status", Session: "s4"})
	}
	for _, c := range calls {
		tally.Add(c, e.Evaluate(c))
	}
	assert.Equal(t, Counts{Calls: 27, Allowed: 22, Denied: 2, Hidden: 1, RateLimited: 1, ApprovalRequired: 1}, tally.Counts)
	assert.Equal(t, 3, tally.SessionsAffected, "s1, s3 and s4; calls without a session are not sessions")
	assert.Equal(t, &Counts{Calls: 21, Allowed: 20, RateLimited: 1}, tally.ByTool["vm_agent_exec_status"])
	assert.Equal(t, &Counts{Calls: 2, Denied: 2}, tally.ByTool["unknown"])
}

// SQL buckets a call as epoch_ms(ts) // WindowLength's milliseconds: those
// buckets are the evaluator's windows, at their edges too.
func TestWindowLengthBucketsAsTheEvaluator(t *testing.T) {
	day := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for w, window := range Windows {
		ms := WindowLength(window).Milliseconds()
		for _, ts := range []time.Time{day, day.Add(-time.Millisecond), day.Add(59 * time.Second), day.Add(61 * time.Minute),
			day.Add(23*time.Hour + 59*time.Minute + 59*time.Second), day.Add(25 * time.Hour)} {
			assert.Equal(t, windowStart(ts, w).UnixMilli(), ts.UnixMilli()/ms*ms, "%s at %s", window, ts)
		}
	}
}

// Peek decides as Evaluate does and leaves the quota untouched.
func TestPeekSpendsNoQuota(t *testing.T) {
	e := NewEvaluator(limitPolicy(t, ScopeGrant, WindowMinute, 1))
	call := Call{TS: t0, Tool: "x", Grant: "g"}
	for range 3 {
		assert.Equal(t, Allowed, e.Peek(call).Decision)
	}
	assert.Equal(t, Allowed, e.Evaluate(call).Decision)
	assert.Equal(t, RateLimited, e.Peek(call).Decision)
	assert.Equal(t, RateLimited, e.Evaluate(call).Decision)
}
