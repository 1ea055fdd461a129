package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func mustParse(t testing.TB, doc string) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc), "policy.json")
	require.NoError(t, err)
	return p
}

func TestParseExamples(t *testing.T) {
	t.Run("spec", func(t *testing.T) {
		p, err := Parse(readTestdata(t, "spec.json"), "spec.json")
		require.NoError(t, err)
		assert.Equal(t, "1", p.Version)
		assert.Equal(t, DefaultDeny, p.Default)
		assert.Equal(t, []string{"delete_storage_volume"}, p.Hide)
		require.NotNil(t, p.AllTools)
		assert.Equal(t, []Limit{{Counter: "calls-per-minute", Window: WindowMinute, Max: 240, Scope: ScopeGrant}}, p.AllTools.Limits)
		assert.Equal(t, []string{"delete_vm", "get_vm_status", "vm_agent_exec", "vm_agent_exec_status"}, p.ToolNames())
		assert.Equal(t, &ToolRule{}, p.Tools["get_vm_status"])
		assert.Equal(t, []Limit{{Counter: "vm_agent_exec_status_rate", Window: WindowMinute, Max: 20, Scope: ScopeSession}},
			p.Tools["vm_agent_exec_status"].Limits)
		require.Len(t, p.Tools["delete_vm"].DenyIf, 1)
		d := p.Tools["delete_vm"].DenyIf[0]
		assert.True(t, d.IsApproval())
		assert.Equal(t, "Requires human approval.", d.OnDeny)
		assert.True(t, p.Hidden("delete_storage_volume"))
		assert.False(t, p.Hidden("delete_vm"))
	})
	t.Run("stripe", func(t *testing.T) {
		p, err := Parse(readTestdata(t, "stripe.json"), "stripe.json")
		require.NoError(t, err)
		r := p.Tools["create_refund"]
		require.NotNil(t, r)
		assert.Equal(t, []Condition{{Path: "args.reason", Op: "exists", Value: json.RawMessage("true")}}, r.Require)
		assert.Equal(t, []DenyRule{{
			Conditions: []Condition{{Path: "args.amount", Op: "gt", Value: json.RawMessage("10000")}},
			OnDeny:     "Refunds over $100 need a human.",
		}}, r.DenyIf)
		assert.Equal(t, []Limit{{Counter: "create_refund_rate", Window: WindowHour, Max: 10, Scope: ScopeGrant}}, r.Limits)
	})
	for _, name := range []string{"approval.json", "permissive.json", "lenient.json"} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(readTestdata(t, name), name)
			require.NoError(t, err)
		})
	}
}

func TestParseErrors(t *testing.T) {
	const head = `"version":"1","default":"deny"`
	tests := []struct {
		name string
		doc  string
		want string // the whole error text
	}{
		{"unknown window", `{` + head + `,"tools":{"delete_vm":{"limits":[{"counter":"c","window":"week","max":1}]}}}`,
			`policy.json: /tools/delete_vm/limits/0/window: unknown window "week" (allowed: minute, hour, day)`},
		{"window seconds not allowed", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":120,"max":1}]}}}`,
			`policy.json: /tools/x/limits/0/window: unsupported window of 120 seconds (allowed: 60, 3600, 86400, or minute, hour, day)`},
		{"window missing", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","max":1}]}}}`,
			`policy.json: /tools/x/limits/0/window: missing window (allowed: minute, hour, day)`},
		{"unknown scope", `{` + head + `,"all_tools":{"limits":[{"counter":"c","window":"minute","max":5,"scope":"user"}]}}`,
			`policy.json: /all_tools/limits/0/scope: unknown scope "user" (allowed: grant, session, agent)`},
		{"max zero", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day","max":0}]}}}`,
			`policy.json: /tools/x/limits/0/max: max must be at least 1, got 0`},
		{"max missing", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day"}]}}}`,
			`policy.json: /tools/x/limits/0/max: max must be at least 1, got 0`},
		{"max fraction", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day","max":1.5}]}}}`,
			`policy.json: /tools/x/limits/0/max: expected an integer, got 1.5`},
		{"max string", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day","max":"10"}]}}}`,
			`policy.json: /tools/x/limits/0/max: expected an integer, got string`},
		{"max huge", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day","max":1e40}]}}}`,
			`policy.json: /tools/x/limits/0/max: expected an integer, got 1e40`},
		{"duplicate counter", `{` + head + `,"tools":{"x":{"limits":[{"counter":"c","window":"day","max":1},{"counter":"c","window":"hour","max":1}]}}}`,
			`policy.json: /tools/x/limits/1/counter: counter "c" is used twice in this limits list (first at /tools/x/limits/0)`},
		{"missing counter", `{` + head + `,"tools":{"x":{"limits":[{"window":"day","max":1}]}}}`,
			`policy.json: /tools/x/limits/0/counter: missing counter name`},
		{"version", `{"version":"2","default":"deny"}`,
			`policy.json: /version: unsupported version "2" (expected "1")`},
		{"version number", `{"version":1,"default":"deny"}`,
			`policy.json: /version: expected a string, got number`},
		{"missing version and default", `{}`,
			"policy.json: /version: missing version (expected \"1\")\npolicy.json: /default: missing default (allowed: allow, deny)"},
		{"default", `{"version":"1","default":"maybe"}`,
			`policy.json: /default: unknown default "maybe" (allowed: allow, deny)`},
		{"hide twice", `{` + head + `,"hide":["a","b","a"]}`,
			`policy.json: /hide/2: "a" is listed twice in hide (first at /hide/0)`},
		{"hide empty name", `{` + head + `,"hide":[""]}`,
			`policy.json: /hide/0: empty tool name`},
		{"hide not a list", `{` + head + `,"hide":"a"}`,
			`policy.json: /hide: expected an array, got string`},
		{"hide item not a string", `{` + head + `,"hide":[1]}`,
			`policy.json: /hide/0: expected a string, got number`},
		{"tool listed twice", `{` + head + `,"tools":{"delete_vm":{},"get":{},"delete_vm":{"limits":[]}}}`,
			`policy.json: /tools/delete_vm: tool "delete_vm" is listed twice in tools (JSON keeps only the last)`},
		{"duplicate key", `{` + head + `,"default":"allow"}`,
			`policy.json: /default: duplicate key "default"`},
		{"tools not an object", `{` + head + `,"tools":[]}`,
			`policy.json: /tools: expected an object, got array`},
		{"tool rule not an object", `{` + head + `,"tools":{"x":true}}`,
			`policy.json: /tools/x: expected an object, got boolean`},
		{"on_deny not a string", `{` + head + `,"tools":{"x":{"deny_if":[{"conditions":[],"on_deny":5}]}}}`,
			`policy.json: /tools/x/deny_if/0/on_deny: expected a string, got number`},
		{"unknown op", `{` + head + `,"tools":{"x":{"deny_if":[{"conditions":[{"path":"args.a","op":"like","value":"x"}]}]}}}`,
			`policy.json: /tools/x/deny_if/0/conditions/0/op: unknown op "like" (allowed: eq, neq, in, not_in, lt, lte, gt, gte, regex, contains, exists)`},
		{"path outside args", `{` + head + `,"tools":{"x":{"require":[{"path":"state.x.c","op":"lt","value":3}]}}}`,
			`policy.json: /tools/x/require/0/path: path "state.x.c" must be "args.<name>[.<name>...]"`},
		{"in needs array", `{` + head + `,"tools":{"x":{"require":[{"path":"args.a","op":"in","value":"x"}]}}}`,
			`policy.json: /tools/x/require/0/value: op "in" needs an array value, got string`},
		{"gt needs number", `{` + head + `,"tools":{"x":{"require":[{"path":"args.a","op":"gt","value":"10"}]}}}`,
			`policy.json: /tools/x/require/0/value: op "gt" needs a number value, got string`},
		{"bad regex", `{` + head + `,"tools":{"x":{"require":[{"path":"args.a","op":"regex","value":"("}]}}}`,
			"policy.json: /tools/x/require/0/value: invalid regex \"(\": error parsing regexp: missing closing ): `(`"},
		{"rate_limit alias bad window", `{` + head + `,"tools":{"x":{"rate_limit":{"max":10,"window":120}}}}`,
			`policy.json: /tools/x/rate_limit/window: unsupported window of 120 seconds (allowed: 60, 3600, 86400, or minute, hour, day)`},
		{"rate_limit alias bad string", `{` + head + `,"tools":{"x":{"rate_limit":"10 per minute"}}}`,
			`policy.json: /tools/x/rate_limit: invalid rate_limit "10 per minute" (expected "N/minute", "N/hour" or "N/day", or {max, window})`},
		{"not an object", `[]`, `policy.json: expected an object, got array`},
		{"empty", ``, `policy.json: empty document (expected a JSON object)`},
		{"syntax", "{\n  \"version\": \"1\",\n}", `policy.json: invalid JSON at line 3, column 1: invalid character '}' looking for beginning of object key string`},
		{"syntax inside tools", `{"tools":{"x":{"limits":[{"max":1,}]}}}`, `policy.json: /tools/x/limits/0: invalid JSON at line 1, column 35: invalid character '}' looking for beginning of object key string`},
		{"truncated", `{"tools":{"x":`, `policy.json: /tools/x: invalid JSON: unexpected end of input`},
		{"trailing data", `{` + head + `} {}`, `policy.json: unexpected data after the JSON document at line 1, column 34`},
		{"too deep", `{` + head + `,"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`,
			`policy.json: /x` + strings.Repeat("/0", 255) + `: nested deeper than 256 levels`},
		{"several problems at once", `{"version":"1","default":"deny","hide":["a","a"],"tools":{"x":{"limits":[{"counter":"c","window":"week","max":0,"scope":"user"}]}}}`,
			strings.Join([]string{
				`policy.json: /hide/1: "a" is listed twice in hide (first at /hide/0)`,
				`policy.json: /tools/x/limits/0/window: unknown window "week" (allowed: minute, hour, day)`,
				`policy.json: /tools/x/limits/0/max: max must be at least 1, got 0`,
				`policy.json: /tools/x/limits/0/scope: unknown scope "user" (allowed: grant, session, agent)`,
			}, "\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.doc), "policy.json")
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Equal(t, tt.want, err.Error())
			var e *Error
			require.True(t, errors.As(err, &e), "error is an *Error")
			assert.Equal(t, "policy.json", e.File)
			assert.NotEmpty(t, e.Problems)
		})
	}
}

func TestDecodeDoesNotValidate(t *testing.T) {
	p, err := Decode([]byte(`{"version":"2","default":"deny","tools":{"x":{"limits":[{"counter":"c","window":"week","max":1}]}}}`), "p.json")
	require.NoError(t, err)
	assert.Equal(t, "week", p.Tools["x"].Limits[0].Window)
	err = p.Validate()
	require.Error(t, err)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, []Problem{
		{Path: "/version", Message: `unsupported version "2" (expected "1")`},
		{Path: "/tools/x/limits/0/window", Message: `unknown window "week" (allowed: minute, hour, day)`},
	}, e.Problems)
	assert.Empty(t, e.File, "Validate knows no file name")
}

func TestValidateBuiltPolicy(t *testing.T) {
	p := &Policy{Version: "1", Default: DefaultDeny, Hide: []string{"a"},
		Tools: map[string]*ToolRule{"a": {DenyIf: []DenyRule{{OnDeny: "x"}}}, "b": nil, "c/d": {Limits: []Limit{{Counter: "c", Window: "minute", Max: 0}}}}}
	err := p.Validate()
	require.Error(t, err)
	// A hidden tool that is also listed is fine; a "/" in a tool name is escaped.
	assert.Equal(t, "/tools/c~1d/limits/0/max: max must be at least 1, got 0", err.Error())
	assert.EqualError(t, (*Policy)(nil).Validate(), "no policy")
}

func TestParseLenient(t *testing.T) {
	p, err := Parse(readTestdata(t, "lenient.json"), "lenient.json")
	require.NoError(t, err)

	assert.JSONEq(t, `"Proxmox grant <prod> & friends"`, string(p.Extra["description"]))
	assert.Equal(t, `{"big":12345678901234567890,"since":2026,"tags":["b","a"],"team":"platform"}`, string(p.Extra["x-owner"]),
		"unknown fields are kept with sorted keys and exact numbers")
	assert.Equal(t, "true", string(p.AllTools.Extra["x-all"]))
	assert.Equal(t, "10", string(p.AllTools.Limits[0].Extra["x-burst"]))
	assert.Equal(t, `"read only"`, string(p.Tools["list_vms"].Extra["x-tool-note"]))
	assert.Equal(t, `"reason-required"`, string(p.Tools["create_refund"].Require[0].Extra["x-id"]))
	assert.Equal(t, `"high"`, string(p.Tools["create_refund"].DenyIf[0].Extra["x-severity"]))

	// rate_limit aliases: seconds → window name, session scope ("tracked per
	// agent session"; Intercept's "N/window" grant), counter "<tool>_rate"
	// unless taken.
	assert.Equal(t, []Limit{{Counter: "list_vms_rate", Window: WindowMinute, Max: 10, Scope: ScopeSession}}, p.Tools["list_vms"].Limits)
	assert.Equal(t, []Limit{
		{Counter: "get_vm_status_rate", Window: WindowHour, Max: 100},
		{Counter: "get_vm_status_rate_minute", Window: WindowMinute, Max: 5, Scope: ScopeGrant},
	}, p.Tools["get_vm_status"].Limits)

	// Round trip: the canonical form parses back to the same policy, unknown fields included.
	c1, err := p.Canonical()
	require.NoError(t, err)
	q, err := Parse(c1, "canonical.json")
	require.NoError(t, err)
	c2, err := q.Canonical()
	require.NoError(t, err)
	assert.Equal(t, string(c1), string(c2))
	p.Hide = canonicalHide(p.Hide) // the one normalisation Canonical applies to the model
	assert.Equal(t, p, q)
	assert.Contains(t, string(c1), `"description": "Proxmox grant <prod> & friends"`, "no HTML escaping")
	assert.Contains(t, string(c1), `"big": 12345678901234567890`)
	assert.NotContains(t, string(c1), "rate_limit", "aliases are written as limits")
}

func TestRoundTripExamples(t *testing.T) {
	for _, name := range []string{"spec.json", "stripe.json", "approval.json", "permissive.json", "lenient.json"} {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(readTestdata(t, name), name)
			require.NoError(t, err)
			c, err := p.Canonical()
			require.NoError(t, err)
			q, err := Parse(c, name)
			require.NoError(t, err)
			r, err := Parse(mustCanonical(t, q), name)
			require.NoError(t, err)
			assert.Equal(t, q, r, "parse(canonical(p)) == p")
			assert.Equal(t, c, mustCanonical(t, q))
		})
	}
}

func TestRateLimitAliases(t *testing.T) {
	tests := []struct {
		name string
		rule string
		want []Limit
	}{
		{"seconds", `{"rate_limit":{"max":10,"window":60}}`, []Limit{{Counter: "x_rate", Window: "minute", Max: 10, Scope: "session"}}},
		{"hour seconds as string", `{"rate_limit":{"max":3,"window":"3600"}}`, []Limit{{Counter: "x_rate", Window: "hour", Max: 3, Scope: "session"}}},
		{"day with scope and counter", `{"rate_limit":{"max":3,"window":86400,"scope":"grant","counter":"daily"}}`, []Limit{{Counter: "daily", Window: "day", Max: 3, Scope: "grant"}}},
		{"intercept shorthand: one counter, not one a session", `{"rate_limit":"5/hour"}`, []Limit{{Counter: "x_rate", Window: "hour", Max: 5, Scope: "grant"}}},
		{"name clash", `{"limits":[{"counter":"x_rate","window":"minute","max":1},{"counter":"x_rate_minute","window":"minute","max":2}],"rate_limit":"5/minute"}`,
			[]Limit{{Counter: "x_rate", Window: "minute", Max: 1}, {Counter: "x_rate_minute", Window: "minute", Max: 2}, {Counter: "x_rate_2", Window: "minute", Max: 5, Scope: "grant"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, `{"version":"1","default":"deny","tools":{"x":`+tt.rule+`}}`)
			assert.Equal(t, tt.want, p.Tools["x"].Limits)
		})
	}
	p := mustParse(t, `{"version":"1","default":"deny","all_tools":{"rate_limit":{"max":100,"window":60}}}`)
	assert.Equal(t, []Limit{{Counter: "all_tools_rate", Window: "minute", Max: 100, Scope: "session"}}, p.AllTools.Limits)
}

func TestParseNullsAreLenient(t *testing.T) {
	p := mustParse(t, `{"version":"1","default":"deny","hide":null,"tools":{"x":null,"y":{"deny_if":[{"conditions":null,"on_deny":"ask"}],"limits":null}}}`)
	assert.Equal(t, &ToolRule{}, p.Tools["x"])
	assert.True(t, p.Tools["y"].DenyIf[0].IsApproval())
	assert.Nil(t, p.Hide)
}

func TestPolicyJSONMarshalling(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "spec.json")))
	out, err := json.Marshal(struct {
		Policy  *Policy `json:"policy"`
		Current *Policy `json:"current"`
	}{Policy: p})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), `{"policy":{"all_tools":{"limits":[{"counter":"calls-per-minute"`), string(out))
	assert.True(t, strings.HasSuffix(string(out), `,"current":null}`))

	var back struct {
		Policy *Policy `json:"policy"`
	}
	require.NoError(t, json.Unmarshal(out, &back))
	assert.Equal(t, p, back.Policy)

	var bad struct{ Policy *Policy }
	err = json.Unmarshal([]byte(`{"Policy":{"tools":[]}}`), &bad)
	assert.ErrorContains(t, err, "/tools: expected an object, got array")
}

func TestClone(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "lenient.json")))
	q := p.Clone()
	require.Equal(t, p, q)
	q.Tools["create_refund"].DenyIf[0].Conditions[0].Value[0] = '9'
	q.Tools["list_vms"].Limits[0].Max = 99
	q.Extra["x-owner"][0] = '['
	q.Hide[0] = "changed"
	q.AllTools.Limits = nil
	assert.Equal(t, "10000", string(p.Tools["create_refund"].DenyIf[0].Conditions[0].Value))
	assert.Equal(t, 10, p.Tools["list_vms"].Limits[0].Max)
	assert.Equal(t, byte('{'), p.Extra["x-owner"][0])
	assert.Equal(t, "zeta_tool", p.Hide[0])
	assert.Len(t, p.AllTools.Limits, 1)
	assert.Nil(t, (*Policy)(nil).Clone())
}

func mustCanonical(t testing.TB, p *Policy) []byte {
	t.Helper()
	b, err := p.Canonical()
	require.NoError(t, err)
	return b
}

// A tool's rule quoted in another document (a revert's restore) reads as
// policy.json has it under tools, not as the Go struct: it can be pasted
// into a policy.
func TestToolRuleJSONMarshalling(t *testing.T) {
	p := mustParse(t, `{"version":"1","default":"deny","tools":{"x":{"deny_if":[{"conditions":[],"on_deny":"ask"}],
		"limits":[{"counter":"x_rate","window":"minute","max":5,"scope":"session"}]}}}`)
	out, err := json.Marshal(struct {
		Restore *ToolRule `json:"restore"`
	}{p.Tools["x"]})
	require.NoError(t, err)
	assert.JSONEq(t, `{"restore":{"deny_if":[{"conditions":[],"on_deny":"ask"}],"limits":[{"counter":"x_rate","window":"minute","max":5,"scope":"session"}]}}`, string(out))

	// And reads back as it was (a finding's recorded action is decoded to
	// tell whether the current policy holds it).
	var back struct {
		Restore *ToolRule `json:"restore"`
	}
	require.NoError(t, json.Unmarshal(out, &back))
	assert.Equal(t, p.Tools["x"], back.Restore)
}
