package policy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/mcptest"
)

func TestMain(m *testing.M) { mcptest.Main(m) }

// livePolicy exercises what the Intercept output carries over: a tool
// allowed, one hidden, one behind approval, require and deny_if conditions,
// a tool's own limit and one over every tool, and a tool not listed. Hour
// windows, so that a run almost never straddles two.
const livePolicy = `{"version": "1", "default": "deny", "hide": ["create_snapshot"],
  "all_tools": {"limits": [{"counter": "all", "window": "hour", "max": 12, "scope": "grant"}]},
  "tools": {
    "list_vms": {},
    "create_snapshot": {},
    "get_status": {"limits": [{"counter": "status", "window": "hour", "max": 3, "scope": "grant"}]},
    "delete_vm": {"deny_if": [{"conditions": [], "on_deny": "Requires human approval."}]},
    "guest_exec": {"require": [{"path": "args.node", "op": "in", "value": ["pve1", "pve2"]}],
                   "deny_if": [{"conditions": [{"path": "args.command", "op": "eq", "value": "rm -rf /"}], "on_deny": "never"}]}
  }}`

// TestInterceptEnforcesAsEvaluated runs the real Intercept (INTERCEPT_BIN;
// skipped without it) with this package's YAML of livePolicy in front of an
// MCP server, sends it a sequence of calls, and holds each of its
// decisions to the evaluator's, whose replay of past traffic stands for
// what the gateway would do: the limits' counting included (which calls
// consume quota, when a limit starts refusing).
func TestInterceptEnforcesAsEvaluated(t *testing.T) {
	p := mustParse(t, livePolicy)
	instanceLimits(p, "all", "status")
	ctx, session := interceptSession(t, p)

	var listed []string
	for tool, err := range session.Tools(ctx, nil) {
		require.NoError(t, err)
		listed = append(listed, tool.Name)
	}
	assert.NotContains(t, listed, "create_snapshot", "hidden")
	assert.Contains(t, listed, "list_vms")

	ev := NewEvaluator(p)
	type call struct {
		tool string
		args map[string]any
	}
	calls := []call{
		{"list_vms", nil}, {"list_vms", nil},
		{"create_snapshot", nil},
		{"delete_vm", nil},
		{"not_listed", nil},
		{"guest_exec", map[string]any{"node": "pve1", "command": "ls"}},
		{"guest_exec", map[string]any{"node": "pve3", "command": "ls"}},
		{"guest_exec", map[string]any{"node": "pve2", "command": "rm -rf /"}},
		{"guest_exec", map[string]any{"command": "ls"}},
	}
	for range 5 {
		calls = append(calls, call{"get_status", nil})
	}
	for range 10 {
		calls = append(calls, call{"list_vms", nil})
	}
	allowed, refused := 0, 0
	for i, c := range calls {
		v := ev.Evaluate(Call{TS: time.Now(), Tool: c.tool, Grant: "g", Args: c.args})
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		require.NoError(t, err, "call %d (%s)", i, c.tool)
		denied := refusedByIntercept(res)
		assert.Equal(t, v.Decision != Allowed, denied, "call %d: %s %v: evaluator %s (%s), Intercept %s",
			i, c.tool, c.args, v.Decision, v.Reason, contentText(res))
		t.Logf("%s %v: evaluator %s, Intercept %q", c.tool, c.args, v.Decision, contentText(res))
		if denied {
			refused++
		} else {
			allowed++
		}
	}
	// Both sides of every kind of decision were seen: 2 + 1 + 3 + 6 list_vms
	// allowed before all_tools' 12 an hour refuse the rest.
	assert.Equal(t, 12, allowed)
	assert.Equal(t, len(calls)-12, refused)
}

// TestInterceptNegatedConditionRefusesMore holds the Intercept output to
// what SPEC §4 says of a deny_if it writes negated: Intercept allows a call
// only while the negation holds, which fails on a missing argument, so the
// output refuses a call without it that policy.json lets through, and never
// lets through one that policy.json refuses.
func TestInterceptNegatedConditionRefusesMore(t *testing.T) {
	p := mustParse(t, `{"version": "1", "default": "deny",
  "all_tools": {"deny_if": [{"conditions": [{"path": "args.force", "op": "eq", "value": true}], "on_deny": "never force"}]},
  "tools": {"list_vms": {}}}`)
	ctx, session := interceptSession(t, p)
	ev := NewEvaluator(p)
	for _, tt := range []struct {
		args                   map[string]any
		evaluator, intercepted bool // allowed
	}{
		{nil, true, false}, // the narrowing: no args.force
		{map[string]any{"force": false}, true, true},
		{map[string]any{"force": "yes"}, true, true},
		{map[string]any{"force": true}, false, false},
	} {
		v := ev.Evaluate(Call{TS: time.Now(), Tool: "list_vms", Grant: "g", Args: tt.args})
		assert.Equal(t, tt.evaluator, v.Decision == Allowed, "%v: evaluator %s", tt.args, v.Decision)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "list_vms", Arguments: tt.args})
		require.NoError(t, err)
		assert.Equal(t, tt.intercepted, !refusedByIntercept(res), "%v: Intercept %q", tt.args, contentText(res))
	}
}

// TestInterceptGivesBackQuota holds the Intercept output's limits to what
// SPEC §4 says of Intercept's counting: a call its upstream answers with a
// JSON-RPC error gives its quota back, a result marked isError does not. The
// recommender's replay takes no quota for the first (here: Peek).
func TestInterceptGivesBackQuota(t *testing.T) {
	p := mustParse(t, `{"version": "1", "default": "deny",
  "tools": {"get_status": {"limits": [{"counter": "status", "window": "hour", "max": 2, "scope": "grant"}]}}}`)
	instanceLimits(p, "status")
	ctx, session := interceptSession(t, p)
	ev := NewEvaluator(p)
	for i, tt := range []struct {
		fail    string
		allowed bool
	}{
		{"protocol", true}, {"protocol", true}, {"protocol", true},
		{"result", true}, {"", true}, {"", false}, {"protocol", false},
	} {
		args := map[string]any{"fail": tt.fail}
		c := Call{TS: time.Now(), Tool: "get_status", Grant: "g", Args: args}
		v := ev.Peek(c)
		if tt.fail != "protocol" {
			v = ev.Evaluate(c)
		}
		assert.Equal(t, tt.allowed, v.Decision == Allowed, "call %d (%s): evaluator %s", i, tt.fail, v.Decision)
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "get_status", Arguments: args})
		switch {
		case tt.fail == "protocol" && tt.allowed:
			require.Error(t, err, "call %d: the server's JSON-RPC error comes through", i)
		default:
			require.NoError(t, err, "call %d", i)
			assert.Equal(t, tt.allowed, !refusedByIntercept(res), "call %d (%s): Intercept %q", i, tt.fail, contentText(res))
		}
	}
}

// TestInterceptKeepsBreaksAndSignsLive is TestInterceptKeepsBreaksAndSigns
// in the real Intercept: a value with a leading line break, a hide entry
// with one, and -0.0 mean there what they mean to the evaluator.
func TestInterceptKeepsBreaksAndSignsLive(t *testing.T) {
	p := mustParse(t, `{"version": "1", "default": "allow", "hide": ["\ndelete_vm"],
  "tools": {
    "guest_exec": {"deny_if": [{"conditions": [{"path": "args.command", "op": "eq", "value": "\nrm -rf /"}], "on_deny": "no"}]},
    "list_vms": {"deny_if": [{"conditions": [{"path": "args.n", "op": "eq", "value": -0.0}], "on_deny": "no"}]}
  }}`)
	ctx, session := interceptSession(t, p)
	ev := NewEvaluator(p)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"delete_vm", nil},
		{"guest_exec", map[string]any{"command": "\nrm -rf /"}},
		{"guest_exec", map[string]any{"command": "rm -rf /"}},
		{"list_vms", map[string]any{"n": "-0"}},
		{"list_vms", map[string]any{"n": "0"}},
	} {
		v := ev.Evaluate(Call{TS: time.Now(), Tool: c.tool, Grant: "g", Args: c.args})
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		require.NoError(t, err)
		assert.Equal(t, v.Decision != Allowed, refusedByIntercept(res), "%s %q: evaluator %s, Intercept %q", c.tool, c.args, v.Decision, contentText(res))
	}
}

// interceptSession starts Intercept (the binary INTERCEPT_BIN names; the
// test is skipped without one) enforcing p's Intercept YAML (every rule
// carried over) in front of mcptest's server, this test binary run again,
// and connects to it; ctx bounds the test's calls.
func interceptSession(t *testing.T, p *Policy) (ctx context.Context, session *mcp.ClientSession) {
	t.Helper()
	bin := os.Getenv("INTERCEPT_BIN")
	if bin == "" {
		t.Skip("INTERCEPT_BIN is not set: no Intercept binary to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	require.Empty(t, out.Dropped, "every rule is carried over")
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	require.NoError(t, os.WriteFile(file, out.YAML, 0o600))
	// Intercept starts the server with its own environment, and keeps its
	// counters under HOME.
	cmd := exec.Command(bin, "-c", file, "--", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOME="+dir, mcptest.EnvServe+"=stdio")
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "mcptrail-test", Version: "1"}, nil)
	session, err = client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = session.Close() })
	return ctx, session
}

// refusedByIntercept tells a result Intercept's policy refused.
func refusedByIntercept(res *mcp.CallToolResult) bool {
	return res.IsError && len(res.Content) > 0 && strings.HasPrefix(textOf(res.Content[0]), "[INTERCEPT POLICY DENIED]")
}

func textOf(c mcp.Content) string {
	if t, ok := c.(*mcp.TextContent); ok {
		return t.Text
	}
	return ""
}

func contentText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, textOf(c))
	}
	return strings.Join(slices.Clip(parts), " ")
}
