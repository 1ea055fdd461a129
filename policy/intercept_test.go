package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// interceptConfig mirrors Intercept's policy schema (internal/config, snapshot 77f0429).
type interceptConfig struct {
	Version string                   `yaml:"version"`
	Default string                   `yaml:"default"`
	Hide    []string                 `yaml:"hide"`
	Tools   map[string]interceptTool `yaml:"tools"`
}

type interceptTool struct {
	Rules []interceptRule `yaml:"rules"`
}

type interceptRule struct {
	Name       string               `yaml:"name"`
	Action     string               `yaml:"action"`
	RateLimit  string               `yaml:"rate_limit"`
	Conditions []interceptCondition `yaml:"conditions"`
	OnDeny     string               `yaml:"on_deny"`
}

type interceptCondition struct {
	Path  string `yaml:"path"`
	Op    string `yaml:"op"`
	Value any    `yaml:"value"`
}

// checkIntercept applies the rules of Intercept's loader and validator
// (internal/config: Load, applyDefaults, Validate) as SPEC §4 describes them.
func checkIntercept(t *testing.T, out []byte) interceptConfig {
	t.Helper()
	var cfg interceptConfig
	dec := yaml.NewDecoder(bytes.NewReader(out))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&cfg), "%s", out)
	assert.Equal(t, "1", cfg.Version)
	assert.Contains(t, []string{"allow", "deny"}, cfg.Default)
	seen := map[string]bool{}
	for i, h := range cfg.Hide {
		assert.NotEmpty(t, strings.TrimSpace(h), "hide[%d]", i)
		assert.False(t, seen[h], "hide: duplicate %q", h)
		seen[h] = true
	}
	wildcardCounted := slices.ContainsFunc(cfg.Tools["*"].Rules, func(r interceptRule) bool { return r.RateLimit != "" })
	_, global := cfg.Tools["_global"]
	assert.False(t, wildcardCounted && global, "a tool _global would share the wildcard's counters")
	for tool, td := range cfg.Tools {
		windows := map[string]bool{}
		for i, r := range td.Rules {
			where := fmt.Sprintf("tools.%s.rules[%d]", tool, i)
			assert.NotEmpty(t, r.Name, where)
			switch {
			case r.RateLimit != "":
				assert.Empty(t, r.Conditions, where)
				assert.NotEqual(t, "deny", r.Action, where)
				var n int
				var w string
				_, err := fmt.Sscanf(r.RateLimit, "%d/%s", &n, &w)
				require.NoError(t, err, where)
				assert.Positive(t, n, where)
				assert.Contains(t, []string{"minute", "hour", "day"}, w, where)
				assert.False(t, windows[w], "%s: one _rate_%s counter per tool", where, w)
				// The counter's path, state.<tool>._rate_<window>, is read up to its first '.'.
				assert.NotContains(t, strings.TrimPrefix(tool, "*"), ".", "%s: a counter Intercept can address", where)
				windows[w] = true
			case r.Action == "deny":
				assert.Empty(t, r.Conditions, where)
			default:
				assert.Contains(t, []string{"", "evaluate"}, r.Action, where)
				assert.NotEmpty(t, r.Conditions, "%s: evaluate needs conditions", where)
			}
			for j, c := range r.Conditions {
				cw := fmt.Sprintf("%s.conditions[%d]", where, j)
				assert.True(t, strings.HasPrefix(c.Path, "args."), cw)
				assert.Contains(t, Ops, c.Op, cw)
				switch c.Op {
				case "in", "not_in":
					assert.IsType(t, []any{}, c.Value, cw)
				case "lt", "lte", "gt", "gte":
					assert.True(t, isYAMLNumber(c.Value), "%s: numeric value, got %T", cw, c.Value)
				case "exists":
					assert.IsType(t, true, c.Value, cw)
				case "regex":
					s, ok := c.Value.(string)
					require.True(t, ok, cw)
					_, err := regexp.Compile(s)
					assert.NoError(t, err, cw)
				}
			}
		}
	}
	return cfg
}

func isYAMLNumber(v any) bool {
	switch v.(type) {
	case int, int64, float32, float64:
		return true
	}
	return false
}

// instanceLimits sets the scope of the named counters to ScopeInstance, as
// the recommender does for the limits it computed per gateway instance.
func instanceLimits(p *Policy, counters ...string) {
	set := func(r *ToolRule) {
		if r == nil {
			return
		}
		for i := range r.Limits {
			for _, c := range counters {
				if r.Limits[i].Counter == c {
					r.Limits[i].Scope = ScopeInstance
				}
			}
		}
	}
	set(p.AllTools)
	for _, r := range p.Tools {
		set(r)
	}
}

func TestInterceptGolden(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "intercept.json")))
	instanceLimits(p, "calls-per-minute", "vm_agent_exec_status_rate", "vm_agent_exec_status_burst", "vm_agent_exec_status_hourly")
	out, err := Intercept(p, InterceptOptions{
		Header:     []string{"Limits count per gateway instance."},
		LimitNotes: map[string]string{"/tools/vm_agent_exec_status/limits/vm_agent_exec_status_hourly": "from per-instance peaks"},
	})
	require.NoError(t, err)
	golden(t, "intercept.golden.yaml", out.YAML)
	cfg := checkIntercept(t, out.YAML)
	assert.Equal(t, []string{"delete_storage_volume", "drop_all"}, cfg.Hide)
	assert.Equal(t, "deny", cfg.Default)
	var dropped []string
	for _, d := range out.Dropped {
		dropped = append(dropped, d.Pointer)
	}
	assert.Equal(t, []string{
		"/all_tools/limits/calls-per-day",
		"/tools/create_refund/deny_if/1",
		"/tools/create_refund/limits/create_refund_rate",
	}, dropped, "x- annotations are named, not dropped")
	for _, d := range out.Dropped {
		assert.Contains(t, string(out.YAML), "#   "+d.String()+"\n", "listed in the header")
	}

	again, err := Intercept(p.Clone(), InterceptOptions{
		Header:     []string{"Limits count per gateway instance."},
		LimitNotes: map[string]string{"/tools/vm_agent_exec_status/limits/vm_agent_exec_status_hourly": "from per-instance peaks"},
	})
	require.NoError(t, err)
	assert.Equal(t, string(out.YAML), string(again.YAML), "deterministic")
}

func TestInterceptExamples(t *testing.T) {
	for _, name := range []string{"spec.json", "stripe.json", "approval.json", "permissive.json", "lenient.json"} {
		t.Run(name, func(t *testing.T) {
			out, err := Intercept(mustParse(t, string(readTestdata(t, name))), InterceptOptions{})
			require.NoError(t, err)
			checkIntercept(t, out.YAML)
		})
	}

	p := mustParse(t, string(readTestdata(t, "spec.json")))
	instanceLimits(p, "calls-per-minute")
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	s := string(out.YAML)
	assert.Contains(t, s, "  \"*\":\n    rules:\n      # all_tools: counts every tool's calls together (Intercept's _global counter).\n      - name: calls-per-minute\n        rate_limit: \"240/minute\"\n")
	assert.Contains(t, s, "  get_vm_status:\n    rules: []\n")
	assert.Contains(t, s, "      - name: require approval\n        action: deny\n        on_deny: Requires human approval.\n")
	assert.Contains(t, s, "supports action: require_approval")
	require.Len(t, out.Dropped, 1, "the per-session limit")
	assert.Equal(t, "/tools/vm_agent_exec_status/limits/vm_agent_exec_status_rate", out.Dropped[0].Pointer)
	assert.Contains(t, out.Dropped[0].Why, "20 per minute per session")
	assert.NotContains(t, s, "20/minute", "a dropped limit is not written")

	_, err = Intercept(nil, InterceptOptions{})
	assert.Error(t, err)
}

// interceptAllows decides a call the way Intercept's engine does
// (internal/engine: Evaluate, evalOp, ResolveArgs; snapshot 77f0429), for the
// argument rules: hidden, default deny, then every rule of the tool and of
// "*" must pass. Rate limits are left to the real binary's test.
func interceptAllows(cfg interceptConfig, tool string, args map[string]any) bool {
	for _, h := range cfg.Hide {
		if h == tool || h == "*" {
			return false
		}
	}
	if _, listed := cfg.Tools[tool]; !listed && cfg.Default == "deny" {
		return false
	}
	rules := append([]interceptRule{}, cfg.Tools[tool].Rules...)
	rules = append(rules, cfg.Tools["*"].Rules...)
	for _, r := range rules {
		if r.Action == "deny" {
			return false
		}
		for _, c := range r.Conditions {
			v, found := lookup(args, strings.Split(strings.TrimPrefix(c.Path, "args."), "."))
			if c.Op == "exists" {
				if (found && v != nil) != c.Value.(bool) {
					return false
				}
				continue
			}
			if !found || !interceptOp(c.Op, v, c.Value) {
				return false
			}
		}
	}
	return true
}

func interceptOp(op string, actual, expected any) bool {
	num := func(v any) (float64, bool) {
		switch n := v.(type) {
		case float64:
			return n, true
		case int:
			return float64(n), true
		}
		return 0, false
	}
	eq := func(a, b any) bool {
		x, ok1 := num(a)
		y, ok2 := num(b)
		if ok1 && ok2 {
			return x == y
		}
		return fmt.Sprintf("%v", a) == fmt.Sprintf("%v", b)
	}
	in := func() bool {
		for _, e := range expected.([]any) {
			if eq(actual, e) {
				return true
			}
		}
		return false
	}
	switch op {
	case "eq":
		return eq(actual, expected)
	case "neq":
		return !eq(actual, expected)
	case "in":
		return in()
	case "not_in":
		return !in()
	case "lt", "lte", "gt", "gte":
		a, ok1 := num(actual)
		b, ok2 := num(expected)
		return ok1 && ok2 && map[string]bool{"lt": a < b, "lte": a <= b, "gt": a > b, "gte": a >= b}[op]
	case "regex":
		s, ok := actual.(string)
		return ok && regexp.MustCompile(expected.(string)).MatchString(s)
	case "contains":
		s, ok := actual.(string)
		if ok {
			e, ok := expected.(string)
			return ok && strings.Contains(s, e)
		}
		if list, ok := actual.([]any); ok {
			for _, e := range list {
				if eq(e, expected) {
					return true
				}
			}
		}
	}
	return false
}

// conditionsPolicy holds one tool per deny_if or require shape that maps.
const conditionsPolicy = `{
  "version": "1", "default": "deny",
  "tools": {
    "vm_agent_exec": { "deny_if": [ { "conditions": [ { "path": "args.command", "op": "contains", "value": "rm -rf" } ], "on_deny": "Destructive shell commands are not allowed." } ] },
    "shell": { "deny_if": [ { "conditions": [ { "path": "args.cmd", "op": "regex", "value": "(?i)(mkfs|dd if=)" } ] } ] },
    "refund": {
      "require": [ { "path": "args.reason", "op": "exists" }, { "path": "args.currency", "op": "in", "value": ["usd", "eur"] } ],
      "deny_if": [ { "conditions": [ { "path": "args.amount", "op": "gt", "value": 10000 } ] } ] },
    "eq": { "deny_if": [ { "conditions": [ { "path": "args.env", "op": "eq", "value": "prod" } ] } ] },
    "neq": { "deny_if": [ { "conditions": [ { "path": "args.env", "op": "neq", "value": "dev" } ] } ] },
    "in": { "deny_if": [ { "conditions": [ { "path": "args.node", "op": "in", "value": ["pve1", "pve2"] } ] } ] },
    "not_in": { "deny_if": [ { "conditions": [ { "path": "args.node", "op": "not_in", "value": ["pve3"] } ] } ] },
    "lt": { "deny_if": [ { "conditions": [ { "path": "args.n", "op": "lt", "value": 3 } ] } ] },
    "lte": { "deny_if": [ { "conditions": [ { "path": "args.n", "op": "lte", "value": 3 } ] } ] },
    "gte": { "deny_if": [ { "conditions": [ { "path": "args.n", "op": "gte", "value": 3.5 } ] } ] },
    "exists": { "deny_if": [ { "conditions": [ { "path": "args.force", "op": "exists", "value": true } ] } ] },
    "absent": { "deny_if": [ { "conditions": [ { "path": "args.dry_run", "op": "exists", "value": false } ] } ] },
    "nested": { "deny_if": [ { "conditions": [ { "path": "args.target.kind", "op": "eq", "value": "cluster" } ] } ] },
    "nested_exists": { "deny_if": [ { "conditions": [ { "path": "args.target.force", "op": "exists", "value": true } ] } ] },
    "eq_number": { "deny_if": [ { "conditions": [ { "path": "args.v", "op": "eq", "value": 5 } ] } ] },
    "in_numbers": { "deny_if": [ { "conditions": [ { "path": "args.v", "op": "in", "value": [3, 1000000] } ] } ] },
    "eq_object": { "deny_if": [ { "conditions": [ { "path": "args.v", "op": "eq", "value": {"n": 1000000, "tags": [2, "x"]} } ] } ] },
    "require_number": { "require": [ { "path": "args.v", "op": "lte", "value": 100 } ] }
  }
}`

// Every mapped condition decides like policy.json wherever the argument is
// present with a value it can compare, and never allows what policy.json
// denies: checked against a model of Intercept's engine over many calls.
func TestInterceptConditionsRoundTrip(t *testing.T) {
	p := mustParse(t, conditionsPolicy)
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	require.Empty(t, out.Dropped, "%s", out.YAML)
	cfg := checkIntercept(t, out.YAML)

	// nil leaves the argument out; jsonNull sends it as null.
	values := []any{nil, jsonNull{}, "prod", "dev", "pve1", "pve3", "rm -rf /", "ls -l; RM -RF /", "ls /tmp", "MKFS.ext4 /dev/sda",
		"echo dd if=/dev/zero", "usd", "chf", 2.0, 3.0, 3.5, 10000.0, 10001.0, true, false, []any{"rm -rf"}, "cluster",
		5.0, "5", "5.0", " 5", "3.0", "1e6", 1000000.0, "50", "10001", map[string]any{"n": 1000000.0, "tags": []any{2.0, "x"}}}
	keys := map[string][]string{
		"vm_agent_exec": {"command"}, "shell": {"cmd"}, "refund": {"reason", "currency", "amount"},
		"eq": {"env"}, "neq": {"env"}, "in": {"node"}, "not_in": {"node"}, "lt": {"n"}, "lte": {"n"},
		"gte": {"n"}, "exists": {"force"}, "absent": {"dry_run"}, "nested": {"target.kind"},
		"nested_exists": {"target.force"}, "eq_number": {"v"}, "in_numbers": {"v"}, "eq_object": {"v"}, "require_number": {"v"},
	}
	e := NewEvaluator(p)
	checked := 0
	for tool, ks := range keys {
		var each func(i int, args map[string]any)
		each = func(i int, args map[string]any) {
			if i == len(ks) {
				want := e.Evaluate(Call{Tool: tool, Args: args}).Decision == Allowed
				got := interceptAllows(cfg, tool, args)
				raw, _ := json.Marshal(args)
				if want {
					// policy.json allows: so does Intercept, unless an argument a
					// condition reads is missing or of another type.
					if !got {
						assert.True(t, incomparable(tool, args), "%s %s: Intercept denies a comparable call", tool, raw)
					}
				} else {
					assert.False(t, got, "%s %s: Intercept allows what policy.json denies", tool, raw)
				}
				checked++
				return
			}
			for _, v := range values {
				a := map[string]any{}
				for k, x := range args {
					a[k] = x
				}
				if _, null := v.(jsonNull); null {
					v = any(nil)
					if path := strings.Split(ks[i], "."); len(path) == 2 {
						a[path[0]] = map[string]any{path[1]: nil}
					} else {
						a[ks[i]] = nil
					}
				} else if v != nil {
					if path := strings.Split(ks[i], "."); len(path) == 2 {
						a[path[0]] = map[string]any{path[1]: v}
					} else {
						a[ks[i]] = v
					}
				}
				each(i+1, a)
			}
		}
		each(0, map[string]any{})
	}
	assert.Greater(t, checked, 25000)

	// The finding that started this: Intercept must refuse rm -rf.
	assert.False(t, interceptAllows(cfg, "vm_agent_exec", map[string]any{"command": "cd /; rm -rf --no-preserve-root /"}))
	assert.True(t, interceptAllows(cfg, "vm_agent_exec", map[string]any{"command": "rm -r /tmp/x"}))
	assert.False(t, interceptAllows(cfg, "shell", map[string]any{"cmd": "sudo MkFs /dev/sdb"}))
}

// incomparable tells the calls where Intercept may be stricter than
// policy.json: a deny_if's argument missing, or not what its op compares.
func incomparable(tool string, args map[string]any) bool {
	check := map[string]func(any) bool{
		"vm_agent_exec": isString, "shell": isString, "eq": any2, "neq": any2, "in": any2, "not_in": any2,
		"lt": isNumber, "lte": isNumber, "gte": isNumber, "nested": any2, "refund": isNumber,
		"eq_number": any2, "in_numbers": any2, "eq_object": any2, "require_number": isNumber,
	}
	key := map[string]string{"vm_agent_exec": "command", "shell": "cmd", "refund": "amount", "eq": "env", "neq": "env",
		"in": "node", "not_in": "node", "lt": "n", "lte": "n", "gte": "n", "nested": "target",
		"eq_number": "v", "in_numbers": "v", "eq_object": "v", "require_number": "v"}[tool]
	if tool == "exists" || tool == "absent" || tool == "nested_exists" {
		return false
	}
	v, ok := args[key]
	return !ok || !check[tool](v)
}

// jsonNull stands for an argument sent as JSON null.
type jsonNull struct{}

func isString(v any) bool { _, ok := v.(string); return ok }
func isNumber(v any) bool { _, ok := v.(float64); return ok }
func any2(any) bool       { return true }

// The writer lists what it cannot express and leaves it out.
func TestInterceptDropsWhatItCannotExpress(t *testing.T) {
	p := mustParse(t, `{
  "version": "1", "default": "deny", "surprise": 1,
  "tools": {
    "a": { "deny_if": [ { "conditions": [ { "path": "args.x", "op": "regex", "value": "^rm.*-rf" } ] } ] },
    "b": { "deny_if": [ { "conditions": [ { "path": "args.tags", "op": "contains", "value": 7 } ] } ] },
    "c": { "deny_if": [ { "conditions": [ { "path": "args.x", "op": "eq", "value": 1 }, { "path": "args.y", "op": "eq", "value": 2 } ] } ] },
    "d": { "limits": [ { "counter": "d_rate", "window": "minute", "max": 5, "scope": "session" } ] },
    "*": {}
  }
}`)
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	var got []string
	for _, d := range out.Dropped {
		got = append(got, d.Pointer)
	}
	assert.Equal(t, []string{"/surprise", "/tools/*", "/tools/a/deny_if/0", "/tools/b/deny_if/0", "/tools/c/deny_if/0", "/tools/d/limits/d_rate"}, got)
	cfg := checkIntercept(t, out.YAML)
	for _, tool := range []string{"a", "b", "c", "d"} {
		assert.Empty(t, cfg.Tools[tool].Rules, tool)
	}
	assert.Contains(t, string(out.YAML), "# NOT CARRIED OVER: 6 rule(s)")
}

// A rate limit of a tool whose name holds a '.' is left out: Intercept
// would name its counter state.github.create_issue._rate_minute, which it
// reads as the counter create_issue._rate_minute of a tool "github", and
// refuse the whole file.
func TestInterceptDropsLimitsOfDottedTools(t *testing.T) {
	p := mustParse(t, `{
  "version": "1", "default": "deny",
  "all_tools": { "limits": [ { "counter": "all", "window": "minute", "max": 100 } ] },
  "tools": {
    "github.create_issue": { "limits": [
      { "counter": "burst", "window": "minute", "max": 5 }, { "counter": "steady", "window": "minute", "max": 3 },
      { "counter": "daily", "window": "day", "max": 50 } ] },
    "create_issue": { "limits": [ { "counter": "plain", "window": "minute", "max": 5 } ] }
  }
}`)
	instanceLimits(p, "all", "burst", "steady", "daily", "plain")
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	var got []string
	for _, d := range out.Dropped {
		got = append(got, d.Pointer)
		assert.Contains(t, d.Why, "Intercept cannot address the counter of a tool whose name contains '.'", d.Pointer)
	}
	assert.Equal(t, []string{"/tools/github.create_issue/limits/burst", "/tools/github.create_issue/limits/steady",
		"/tools/github.create_issue/limits/daily"}, got)
	cfg := checkIntercept(t, out.YAML)
	require.Contains(t, cfg.Tools, "github.create_issue", "the tool stays listed (allowed)")
	assert.Empty(t, cfg.Tools["github.create_issue"].Rules)
	assert.Equal(t, "5/minute", cfg.Tools["create_issue"].Rules[0].RateLimit)
	assert.Equal(t, "100/minute", cfg.Tools["*"].Rules[0].RateLimit, "all_tools is counted as _global")
}

// Intercept's default deny looks a call's tool up by its exact name, so a
// "*" listed with no rules would let a tool named * through: all_tools is
// written only when some of its rules are carried over.
func TestInterceptListsTheWildcardOnlyWithRules(t *testing.T) {
	for name, allTools := range map[string]string{
		"empty":         `{}`,
		"every dropped": `{ "limits": [ { "counter": "all", "window": "minute", "max": 100, "scope": "grant" } ] }`,
	} {
		p := mustParse(t, `{ "version": "1", "default": "deny", "all_tools": `+allTools+`, "tools": { "a": {} } }`)
		out, err := Intercept(p, InterceptOptions{})
		require.NoError(t, err, name)
		cfg := checkIntercept(t, out.YAML)
		assert.NotContains(t, cfg.Tools, "*", "%s: a call to a tool named * stays default-denied", name)
		assert.Contains(t, cfg.Tools, "a", name)
	}
}

// A tool named "<<" is written quoted: bare, YAML reads it as a merge key
// and splices its body into tools.
func TestInterceptQuotesAMergeKeyToolName(t *testing.T) {
	p := mustParse(t, `{ "version": "1", "default": "deny", "tools": {
  "<<": { "deny_if": [ { "conditions": [], "on_deny": "ask first" } ] }, "a": {} } }`)
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	assert.Contains(t, string(out.YAML), "\n  \"<<\":\n")
	cfg := checkIntercept(t, out.YAML)
	assert.Len(t, cfg.Tools, 2)
	require.Contains(t, cfg.Tools, "<<")
	require.Len(t, cfg.Tools["<<"].Rules, 1)
	assert.Equal(t, "ask first", cfg.Tools["<<"].Rules[0].OnDeny)
}

// Intercept counts all_tools' rate limits as a tool named _global: a tool
// of that name is left out while the wildcard has one, and written as any
// other when it has none (its counters are then its own).
func TestInterceptDropsAToolNamedGlobalBesideWildcardLimits(t *testing.T) {
	const tools = `"tools": {
    "_global": { "deny_if": [ { "conditions": [ { "path": "args.x", "op": "eq", "value": 1 } ] } ],
      "limits": [ { "counter": "own", "window": "hour", "max": 5 } ] },
    "a": {} }`
	p := mustParse(t, `{ "version": "1", "default": "deny",
  "all_tools": { "limits": [ { "counter": "all", "window": "minute", "max": 100 } ] }, `+tools+` }`)
	instanceLimits(p, "all", "own")
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	require.Len(t, out.Dropped, 1)
	assert.Equal(t, "/tools/_global", out.Dropped[0].Pointer)
	assert.Contains(t, out.Dropped[0].Why, "_global._rate_<window>")
	cfg := checkIntercept(t, out.YAML)
	assert.NotContains(t, cfg.Tools, "_global")
	assert.Equal(t, "100/minute", cfg.Tools["*"].Rules[0].RateLimit)

	p = mustParse(t, `{ "version": "1", "default": "deny", `+tools+` }`)
	instanceLimits(p, "own")
	out, err = Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	assert.Empty(t, out.Dropped)
	cfg = checkIntercept(t, out.YAML)
	require.Len(t, cfg.Tools["_global"].Rules, 2)
	assert.Equal(t, "5/hour", cfg.Tools["_global"].Rules[1].RateLimit)
}

// TestInterceptBinary loads the YAML with the real Intercept (`intercept
// validate`) when INTERCEPT_BIN names its binary; skipped otherwise.
func TestInterceptBinary(t *testing.T) {
	bin := os.Getenv("INTERCEPT_BIN")
	if bin == "" {
		t.Skip("INTERCEPT_BIN is not set: no Intercept binary to validate against")
	}
	full := mustParse(t, string(readTestdata(t, "intercept.json")))
	instanceLimits(full, "calls-per-minute", "vm_agent_exec_status_rate", "vm_agent_exec_status_burst", "vm_agent_exec_status_hourly")
	for name, p := range map[string]*Policy{"conditions": mustParse(t, conditionsPolicy), "intercept.json": full} {
		out, err := Intercept(p, InterceptOptions{})
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "policy.yaml")
		require.NoError(t, os.WriteFile(file, out.YAML, 0o600))
		cmd := exec.Command(bin, "validate", "-c", file)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		msg, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s\n%s", name, msg, out.YAML)
		assert.Contains(t, string(msg), "Policy file is valid.", name)
	}
}

// Names and values with line breaks or other control characters come back
// from the YAML as they were: YAML would write them as literal blocks,
// which drop a leading line break (a condition on another value, a hide or
// a tool of another name: wider at the gateway) and, with a tab, make a
// file Intercept refuses. And a float's sign survives: -0.0 read back as
// the int 0 compares as the text "0" where the evaluator's is "-0".
func TestInterceptKeepsBreaksAndSigns(t *testing.T) {
	p := mustParse(t, `{"version": "1", "default": "deny", "hide": ["\ndelete_vm", "\t\nx", "a\u2028b"],
  "tools": {
    "\nlist_vms": {"deny_if": [{"conditions": [{"path": "args.command", "op": "eq", "value": "\nrm -rf /"}], "on_deny": "no\nnever"}]},
    "get_status": {"require": [{"path": "args.node", "op": "in", "value": ["\npve1", "pve2\r", {"k": "\u0085v"}, "5", "true", "null", "~", "0x1", "1e6", "", 7, 7.5, true, null]}]},
    "zero": {"deny_if": [{"conditions": [{"path": "args.n", "op": "eq", "value": -0.0}]}]}
  }}`)
	out, err := Intercept(p, InterceptOptions{})
	require.NoError(t, err)
	require.Empty(t, out.Dropped)
	cfg := checkIntercept(t, out.YAML)
	assert.ElementsMatch(t, p.Hide, cfg.Hide)
	assert.Contains(t, cfg.Tools, "\nlist_vms")
	assert.NotContains(t, cfg.Tools, "list_vms")
	rule := cfg.Tools["\nlist_vms"].Rules[0]
	assert.Equal(t, "\nrm -rf /", rule.Conditions[0].Value)
	assert.Equal(t, "no\nnever", rule.OnDeny)
	assert.Equal(t, []any{"\npve1", "pve2\r", map[string]any{"k": "\u0085v"}, "5", "true", "null", "~", "0x1", "1e6", "", 7.0, 7.5, true, nil},
		cfg.Tools["get_status"].Rules[0].Conditions[0].Value)
	zero := cfg.Tools["zero"].Rules[0].Conditions[0].Value
	require.IsType(t, float64(0), zero, "%s", out.YAML)
	assert.Equal(t, "-0", fmt.Sprint(zero), "Intercept's text of it")
}
