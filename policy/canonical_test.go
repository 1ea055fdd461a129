package policy

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./policy/... -update to create it")
	assert.Equal(t, string(want), string(got))
}

func TestCanonicalGolden(t *testing.T) {
	p := mustParse(t, string(readTestdata(t, "spec.json")))
	golden(t, "spec.canonical.json", mustCanonical(t, p))
}

func TestCanonicalStable(t *testing.T) {
	// The same policy written two ways: other key order, other spacing,
	// unsorted and repeated hide (Decode keeps the repeat; Canonical drops it).
	a := `{"version":"1","default":"deny","hide":["b","a"],"x-meta":{"z":1,"a":[3,1]},
	  "tools":{"t2":{"limits":[{"max":5,"window":"minute","counter":"c","scope":"session"}]},"t1":{}}}`
	b := `{
	  "tools": {"t1": {}, "t2": {"limits": [{"scope":"session","counter":"c","window":"minute","max":5.0}]}},
	  "x-meta": {"a": [3, 1], "z": 1},
	  "hide": ["a", "b", "a"],
	  "default": "deny", "version": "1"}`
	pa, err := Decode([]byte(a), "a")
	require.NoError(t, err)
	pb, err := Decode([]byte(b), "b")
	require.NoError(t, err)
	ca, cb := mustCanonical(t, pa), mustCanonical(t, pb)
	assert.Equal(t, string(ca), string(cb))
	assert.Equal(t, `{
  "default": "deny",
  "hide": [
    "a",
    "b"
  ],
  "tools": {
    "t1": {},
    "t2": {
      "limits": [
        {
          "counter": "c",
          "max": 5,
          "scope": "session",
          "window": "minute"
        }
      ]
    }
  },
  "version": "1",
  "x-meta": {
    "a": [
      3,
      1
    ],
    "z": 1
  }
}
`, string(ca))
	// Canonical twice gives the same bytes; hand-built extras are normalised too.
	assert.Equal(t, string(ca), string(mustCanonical(t, pa)))
	pa.Extra["x-meta"] = json.RawMessage(`{ "z" : 1 , "a" : [3,1] }`)
	assert.Equal(t, string(ca), string(mustCanonical(t, pa)))
}

func TestCanonicalEdges(t *testing.T) {
	assert.Equal(t, "{}\n", string(mustCanonical(t, &Policy{})))
	assert.Equal(t, "{}\n", string(mustCanonical(t, nil)))

	// An approval keeps its empty conditions; a nil tool rule is {}.
	p := &Policy{Version: "1", Default: "deny", Tools: map[string]*ToolRule{
		"a": {DenyIf: []DenyRule{{OnDeny: "Requires human approval."}}},
		"b": nil,
	}}
	assert.Equal(t, `{
  "default": "deny",
  "tools": {
    "a": {
      "deny_if": [
        {
          "conditions": [],
          "on_deny": "Requires human approval."
        }
      ]
    },
    "b": {}
  },
  "version": "1"
}
`, string(mustCanonical(t, p)))

	p.Extra = map[string]json.RawMessage{"bad": json.RawMessage(`{`)}
	_, err := p.Canonical()
	assert.ErrorContains(t, err, "policy: /bad: invalid JSON value")
	_, err = Patch(nil, p)
	assert.ErrorContains(t, err, "policy patch: target: policy: /bad")
	assert.Contains(t, UnifiedDiff(nil, p, "a", "b"), "+error: policy: /bad: invalid JSON value")
}

// proposed is spec.json after a typical recommendation: one more tool hidden,
// a limit tightened, a tool put behind approval, an unused tool removed.
const proposed = `{
  "version": "1", "default": "deny",
  "hide": ["delete_storage_volume", "create_snapshot"],
  "all_tools": { "limits": [ { "counter": "calls-per-minute", "window": "minute", "max": 240, "scope": "grant" } ] },
  "tools": {
    "get_vm_status": {},
    "vm_agent_exec": { "deny_if": [ { "conditions": [], "on_deny": "Requires human approval." } ] },
    "vm_agent_exec_status": { "limits": [ { "counter": "vm_agent_exec_status_rate", "window": "minute", "max": 12, "scope": "session" } ] }
  }
}`

func TestPatch(t *testing.T) {
	spec := mustParse(t, string(readTestdata(t, "spec.json")))
	lenient := mustParse(t, string(readTestdata(t, "lenient.json")))
	lenient2 := lenient.Clone()
	lenient2.Extra["x-owner"] = json.RawMessage(`{"big":12345678901234567891}`)
	lenient2.Tools["list_vms"].Extra = nil
	tests := []struct {
		name     string
		from, to *Policy
	}{
		{"from nothing", nil, spec},
		{"unchanged", spec, spec},
		{"recommendation", spec, mustParse(t, proposed)},
		{"back again", mustParse(t, proposed), spec},
		{"unknown fields", lenient, lenient2},
		{"to another document", spec, lenient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := Patch(tt.from, tt.to)
			require.NoError(t, err)
			ops, err := jsonpatch.DecodePatch(patch)
			require.NoError(t, err, "valid RFC 6902: %s", patch)
			src := []byte("{}")
			if tt.from != nil {
				src = mustCanonical(t, tt.from)
			}
			got, err := ops.Apply(src)
			require.NoError(t, err)
			want := mustCanonical(t, tt.to)
			assert.True(t, jsonpatch.Equal(want, got), "apply(from, patch) == to\npatch: %s\ngot: %s", patch, got)
			// and it still reads as the same policy
			back, err := Decode(got, "patched")
			require.NoError(t, err)
			assert.Equal(t, string(want), string(mustCanonical(t, back)))
		})
	}

	patch, err := Patch(spec, spec)
	require.NoError(t, err)
	assert.Equal(t, "[]", string(patch))

	patch, err = Patch(spec, mustParse(t, proposed))
	require.NoError(t, err)
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(patch, &ops))
	assert.Contains(t, ops, map[string]any{"op": "add", "path": "/hide/0", "value": "create_snapshot"}, "LCS: one add for one more hidden tool")
	assert.Contains(t, ops, map[string]any{"op": "remove", "path": "/tools/delete_vm"})
	assert.Contains(t, ops, map[string]any{"op": "replace", "path": "/tools/vm_agent_exec_status/limits/0/max", "value": float64(12)})

	patch, err = Patch(lenient, lenient2)
	require.NoError(t, err)
	assert.Contains(t, string(patch), "12345678901234567891", "large numbers are exact")
}

func TestUnifiedDiff(t *testing.T) {
	spec := mustParse(t, string(readTestdata(t, "spec.json")))
	d := UnifiedDiff(spec, mustParse(t, proposed), "current/policy.json", "proposed/policy.json")
	assert.True(t, strings.HasPrefix(d, "--- current/policy.json\n+++ proposed/policy.json\n@@ "), d)
	for _, line := range []string{
		`+    "create_snapshot",`,
		`-    "delete_vm": {`,
		`+    "vm_agent_exec": {`,
		`-    "vm_agent_exec": {},`,
		`-          "max": 20,`,
		`+          "max": 12,`,
		`     "delete_storage_volume"`, // context
	} {
		assert.Contains(t, d, "\n"+line+"\n")
	}
	golden(t, "spec-to-proposed.diff", []byte(d))

	assert.Equal(t, "", UnifiedDiff(spec, spec.Clone(), "a", "b"))

	fromNothing := UnifiedDiff(nil, spec, "/dev/null", "policy.json")
	assert.Contains(t, fromNothing, "--- /dev/null\n+++ policy.json\n@@ -0,0 +1,")
	assert.Contains(t, fromNothing, "\n+  \"version\": \"1\"\n")
}

// Holding reads the pointers Dropped and LimitPointer write: a limit by its
// counter, or by its index when it has none.
func TestHolding(t *testing.T) {
	p := mustParse(t, `{ "version": "1", "default": "deny", "surprise": 1,
  "all_tools": { "limits": [ { "counter": "all", "window": "minute", "max": 9, "note": "x" } ] },
  "tools": { "*": {}, "a/b": { "extra": true },
    "c": { "deny_if": [ { "conditions": [ { "path": "args.x", "op": "eq", "value": 1, "why": "y" } ] } ] } } }`)
	held, err := p.Holding([]string{"/surprise", "/tools/*", "/tools/a~1b/extra", "/all_tools/limits/all/note",
		"/tools/c/deny_if/0/conditions/0/why", "/missing", "/tools/a", "/all_tools/limits/0", "/tools/c/deny_if/1", "tools"})
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true, true, true, false, false, false, false, false}, held)
}
