package catalog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadOverrides(t *testing.T) {
	tests := []struct {
		name string
		file string
		in   string
		want Overrides
	}{
		{"flat json", "o.json", `{"delete_vm":"write","run_x":"Exec"}`,
			Overrides{"delete_vm": {Category: Write}, "run_x": {Category: Exec}}},
		{"risk-hints json", "o.json", `{"delete_vm":{"category":"destructive","why":" reviewed "}}`,
			Overrides{"delete_vm": {Category: Destructive, Why: "reviewed"}}},
		{"mixed json", "o.json", "{\n\t\"a\": \"read\",\n\t\"b\": {\"category\": \"admin\"}\n}",
			Overrides{"a": {Category: Read}, "b": {Category: Admin}}},
		{"flat yaml", "o.yaml", "# reviewed 2025-01\ndelete_vm: write\nrun_x: exec\n",
			Overrides{"delete_vm": {Category: Write}, "run_x": {Category: Exec}}},
		{"risk-hints yaml", "o.yaml", "delete_vm:\n  category: destructive\n  why: loses the VM\n",
			Overrides{"delete_vm": {Category: Destructive, Why: "loses the VM"}}},
		{"yaml flow mapping", "o.yaml", `{delete_vm: write}`, Overrides{"delete_vm": {Category: Write}}},
		{"json without a .json name", "-", `{"delete_vm":"write"}`, Overrides{"delete_vm": {Category: Write}}},
		{"empty file", "o.yaml", "  \n", Overrides{}},
		{"comments only", "o.yaml", "# nothing yet\n", Overrides{}},
		{"yaml null document", "o.yaml", "~\n", Overrides{}},
		{"empty json object", "o.json", `{}`, Overrides{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadOverrides([]byte(tt.in), tt.file)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestLoadOverridesErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		in   string
		want string
	}{
		{"unknown category json", "o.json", `{"delete_vm":"nuke"}`,
			`o.json: /delete_vm: tool "delete_vm": unknown category "nuke" (allowed: read, write, destructive, exec, admin)`},
		{"unknown category in hints json", "o.json", `{"a/b":{"category":"danger","why":"x"}}`,
			`o.json: /a~1b: tool "a/b": unknown category "danger" (allowed: read, write, destructive, exec, admin)`},
		{"unknown category yaml", "o.yaml", "ok_tool: read\ndelete_vm: nuke\n",
			`o.yaml: line 2: tool "delete_vm": unknown category "nuke" (allowed: read, write, destructive, exec, admin)`},
		{"unknown category in hints yaml", "o.yaml", "delete_vm:\n  category: danger\n",
			`o.yaml: line 2: tool "delete_vm": unknown category "danger" (allowed: read, write, destructive, exec, admin)`},
		{"duplicate json", "o.json", `{"a":"read","a":"write"}`, `o.json: /a: tool "a" is listed twice`},
		{"duplicate yaml", "o.yaml", "a: read\na: write\n", `o.yaml: line 2: tool "a" is listed twice`},
		{"field twice json", "o.json", `{"delete_vm":{"category":"admin","category":"read"}}`, `o.json: /delete_vm: tool "delete_vm": field "category" given twice`},
		{"field twice yaml", "o.yaml", "delete_vm:\n  category: admin\n  category: read\n", `o.yaml: line 2: tool "delete_vm": field "category" given twice`},
		{"unexpected field json", "o.json", `{"a":{"catgory":"read"}}`, `o.json: /a: tool "a": unexpected field "catgory"`},
		{"unexpected field yaml", "o.yaml", "a:\n  category: read\n  reason: x\n", `o.yaml: line 2: tool "a": unexpected field "reason"`},
		{"missing category json", "o.json", `{"a":{"why":"x"}}`, `o.json: /a: tool "a": missing "category"`},
		{"missing category yaml", "o.yaml", "a:\n  why: x\n", `o.yaml: line 2: tool "a": missing "category"`},
		{"number value json", "o.json", `{"a":3}`, `o.json: /a: tool "a": expected a category string or an object`},
		{"category not a string json", "o.json", `{"a":{"category":1}}`, `o.json: /a: tool "a": "category": expected a string, found number`},
		{"null value yaml", "o.yaml", "a:\n", `o.yaml: line 1: tool "a": expected a category or a mapping`},
		{"list value yaml", "o.yaml", "a: [read]\n", `o.yaml: line 1: tool "a": expected a category or a mapping`},
		{"top-level array json", "o.json", `["a"]`, `o.json: expected an object mapping tool names to categories, found array`},
		{"top-level list yaml", "o.yaml", "- a\n", `o.yaml: line 1: expected a mapping of tool names to categories`},
		{"empty tool name", "o.json", `{"":"read"}`, `o.json: /: empty tool name`},
		{"bad yaml", "o.yaml", "a: [\n", `o.yaml: invalid YAML`},
		{"two yaml documents", "o.yaml", "a: read\n---\nb: read\n", `o.yaml: expected one YAML document`},
		{"broken json file", "o.json", `{"a": "read",}`, `o.json: line 1, column 14: invalid JSON`},
		{"yaml in a json file", "o.json", "a: read\n", `o.json: line 1, column 1: invalid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadOverrides([]byte(tt.in), tt.file)
			require.Error(t, err)
			assert.Nil(t, got)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoadOverridesRiskHintsFile(t *testing.T) {
	path := filepath.Join("..", "testdata", "proxmox-mcp.risk-hints.json")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	o, err := LoadOverrides(data, path)
	require.NoError(t, err)
	require.Len(t, o, 286)
	assert.Equal(t, Exec, o["vm_agent_exec"].Category)
	assert.NotEmpty(t, o["vm_agent_exec"].Why)
}

func TestUnknownTools(t *testing.T) {
	c := &Catalog{Tools: []Tool{{Name: "a"}, {Name: "b"}}}
	o := Overrides{"b": {Category: Read}, "zz": {Category: Read}, "c": {Category: Write}}
	assert.Equal(t, []string{"c", "zz"}, o.UnknownTools(c))
	assert.Empty(t, Overrides(nil).UnknownTools(c))
}
