package catalog

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func boolp(b bool) *bool { return &b }

func TestParseShapes(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantServer string
		wantTools  []string
	}{
		{"with server", `{"server":"s1","tools":[{"name":"a"},{"name":"b"}]}`, "s1", []string{"a", "b"}},
		{"without server", `{"tools":[{"name":"a"}]}`, "", []string{"a"}},
		{"empty list", `{"tools":[]}`, "", []string{}},
		{"json-rpc response", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a"}],"nextCursor":"x"}}`, "", []string{"a"}},
		{"json-rpc with server beside", `{"server":"s2","result":{"tools":[{"name":"a"}]}}`, "s2", []string{"a"}},
		{"nulls are absent", `{"server":null,"tools":[{"name":"a","description":null,"inputSchema":null,"annotations":null}]}`, "", []string{"a"}},
		{"unknown fields ignored", `{"tools":[{"name":"a","outputSchema":{},"_meta":{}}],"source":"x"}`, "", []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), "tools.json")
			require.NoError(t, err)
			assert.Equal(t, tt.wantServer, c.Server)
			names := []string{}
			for _, tool := range c.Tools {
				names = append(names, tool.Name)
			}
			assert.Equal(t, tt.wantTools, names)
		})
	}
}

func TestParseFields(t *testing.T) {
	in := `{"tools":[{"name":"get_x","description":"Get x.","inputSchema":{"type":"object","properties":{"id":{"type":"string"}}},
		"annotations":{"title":"Get X","readOnlyHint":true,"destructiveHint":false,"openWorldHint":null}}]}`
	c, err := Parse([]byte(in), "tools.json")
	require.NoError(t, err)
	require.Len(t, c.Tools, 1)
	tool := c.Tools[0]
	assert.Equal(t, "Get x.", tool.Description)
	assert.JSONEq(t, `{"type":"object","properties":{"id":{"type":"string"}}}`, string(tool.InputSchema))
	assert.Equal(t, &Annotations{Title: "Get X", ReadOnlyHint: boolp(true), DestructiveHint: boolp(false)}, tool.Annotations)

	got, ok := c.Tool("get_x")
	assert.True(t, ok)
	assert.Equal(t, tool, got)
	_, ok = c.Tool("nope")
	assert.False(t, ok)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"empty input", ``, `tools.json: line 1, column 1: invalid JSON: unexpected end of JSON input`},
		{"syntax error", `{"tools": [}`, `tools.json: line 1, column 12: invalid JSON: invalid character '}' looking for beginning of value`},
		{"syntax error line", "{\n  \"tools\": [\n    {\"name\": \"a\",}\n  ]\n}", `tools.json: line 3, column 18: invalid JSON`},
		{"trailing garbage", `{"tools":[]} x`, `tools.json: line 1, column 14: invalid JSON`},
		{"not an object", `[]`, `tools.json: expected an object, found array`},
		{"no tools", `{"server":"s"}`, `tools.json: expected an object with "tools" (a tools/list result) or "result" (a JSON-RPC response)`},
		{"json-rpc error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`, `tools.json: /error: JSON-RPC error response instead of a tools/list result: {"code":-32601,"message":"Method not found"}`},
		{"server not a string", `{"server":1,"tools":[]}`, `tools.json: /server: expected a string, found number`},
		{"tools not an array", `{"tools":{}}`, `tools.json: /tools: expected an array of tools`},
		{"tools null", `{"tools":null}`, `tools.json: /tools: expected an array of tools`},
		{"tool not an object", `{"tools":[1]}`, `tools.json: /tools/0: expected an object, found number`},
		{"name missing", `{"tools":[{"name":"a"},{"name":"b"},{"name":"c"},{"description":"x"}]}`, `tools.json: /tools/3/name: expected a non-empty string`},
		{"name empty", `{"tools":[{"name":""}]}`, `tools.json: /tools/0/name: expected a non-empty string`},
		{"name blank", `{"tools":[{"name":"  "}]}`, `tools.json: /tools/0/name: expected a non-empty string`},
		{"name a number", `{"tools":[{"name":7}]}`, `tools.json: /tools/0/name: expected a non-empty string`},
		{"name every tool's", `{"tools":[{"name":"a"},{"name":"*"}]}`, `tools.json: /tools/1/name: a tool named "*" cannot be told apart from every tool in a policy (hide: ["*"] hides them all)`},
		{"description not a string", `{"tools":[{"name":"a","description":["x"]}]}`, `tools.json: /tools/0/description: expected a string, found array`},
		{"schema not an object", `{"tools":[{"name":"a","inputSchema":"object"}]}`, `tools.json: /tools/0/inputSchema: expected a JSON Schema object, found string`},
		{"annotations not an object", `{"tools":[{"name":"a","annotations":[]}]}`, `tools.json: /tools/0/annotations: expected an object, found array`},
		{"hint not a boolean", `{"tools":[{"name":"a","annotations":{"readOnlyHint":"yes"}}]}`, `tools.json: /tools/0/annotations/readOnlyHint: expected true or false, found string`},
		{"title not a string", `{"tools":[{"name":"a","annotations":{"title":false}}]}`, `tools.json: /tools/0/annotations/title: expected a string, found boolean`},
		{"duplicate name", `{"tools":[{"name":"a"},{"name":"b"},{"name":"a"}]}`, `tools.json: /tools/2/name: duplicate tool name "a" (first at /tools/0)`},
		{"result not an object", `{"result":[]}`, `tools.json: /result: expected an object, found array`},
		{"result without tools", `{"result":{}}`, `tools.json: /result/tools: expected an array of tools`},
		{"result tool name", `{"result":{"tools":[{"name":1}]}}`, `tools.json: /result/tools/0/name: expected a non-empty string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in), "tools.json")
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tt.want)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "tools.json", pe.File)
		})
	}
}

func TestParseErrorWithoutFileName(t *testing.T) {
	_, err := Parse([]byte(`{"tools":[{}]}`), "")
	require.EqualError(t, err, "/tools/0/name: expected a non-empty string")
}

func TestParseEmbeddedProxmox(t *testing.T) {
	c, err := Parse(ProxmoxToolsJSON(), "proxmox-mcp.tools.json")
	require.NoError(t, err)
	assert.Equal(t, ProxmoxServer, c.Server)
	assert.Len(t, c.Tools, 286)
}

// A parsed catalog written back as JSON parses to the same catalog.
func TestParseRoundTrip(t *testing.T) {
	c, err := Parse(ProxmoxToolsJSON(), "proxmox-mcp.tools.json")
	require.NoError(t, err)
	out, err := json.Marshal(c)
	require.NoError(t, err)
	again, err := Parse(out, "roundtrip.json")
	require.NoError(t, err)
	require.Len(t, again.Tools, len(c.Tools))
	assert.Equal(t, c.Server, again.Server)
	for i := range c.Tools {
		assert.Equal(t, c.Tools[i].Name, again.Tools[i].Name)
		assert.Equal(t, c.Tools[i].Description, again.Tools[i].Description)
		assert.JSONEq(t, string(c.Tools[i].InputSchema), string(again.Tools[i].InputSchema))
		assert.Equal(t, c.Tools[i].Annotations, again.Tools[i].Annotations)
	}
}
