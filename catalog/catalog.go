package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Catalog is one MCP server's tools/list result.
type Catalog struct {
	// Server is the document's "server" field; empty when the document has
	// none (a bare tools/list result), so the caller's --server applies.
	Server string `json:"server,omitempty"`
	Tools  []Tool `json:"tools"`
}

// Tool is one entry of a tools/list result.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// InputSchema is kept verbatim: the classifier reads what it needs and
	// storage keeps the rest for users.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Annotations *Annotations    `json:"annotations,omitempty"`
}

// Annotations are MCP tool annotations. A nil hint is absent: MCP gives absent
// hints worst-case defaults, but the classifier deliberately does not, so that
// an unannotated tool is judged by its name, description and schema.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Tool returns the tool called name.
func (c *Catalog) Tool(name string) (Tool, bool) {
	for _, t := range c.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Classify classifies every tool, in catalog order.
func (c *Catalog) Classify(overrides Overrides) []Classification {
	out := make([]Classification, len(c.Tools))
	for i, t := range c.Tools {
		out[i] = Classify(t, overrides)
	}
	return out
}

// ParseError is a catalog or override document that is not what we expect.
// Path is a JSON Pointer (RFC 6901) to the offending value, "" for the whole
// document, or a "line L, column C" position for a syntax error.
type ParseError struct {
	File string
	Path string
	Msg  string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads an MCP tools/list document. It accepts {"tools": [...]} with or
// without a "server" field, and a whole JSON-RPC response whose "result" is
// such an object. name (usually the file name) prefixes every error, which
// also gives the JSON path and what was expected there.
func Parse(data []byte, name string) (*Catalog, error) {
	p := parser{file: name}
	top, err := p.document(data)
	if err != nil {
		return nil, err
	}
	obj, err := p.object(top, "")
	if err != nil {
		return nil, err
	}

	c := &Catalog{}
	if c.Server, err = p.optString(obj, "", "server"); err != nil {
		return nil, err
	}
	base := ""
	if _, ok := obj["tools"]; !ok {
		// A JSON-RPC response: the tools/list result sits under "result".
		res, hasResult := obj["result"]
		if !hasResult {
			if e, ok := obj["error"]; ok {
				return nil, p.fail("/error", "JSON-RPC error response instead of a tools/list result: "+compact(e, 200))
			}
			return nil, p.fail("", `expected an object with "tools" (a tools/list result) or "result" (a JSON-RPC response)`)
		}
		base = "/result"
		if obj, err = p.object(res, base); err != nil {
			return nil, err
		}
		if c.Server == "" {
			if c.Server, err = p.optString(obj, base, "server"); err != nil {
				return nil, err
			}
		}
	}

	toolsPath := base + "/tools"
	rawTools, ok := obj["tools"]
	if !ok || kindOf(rawTools) != "array" {
		return nil, p.fail(toolsPath, "expected an array of tools")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(rawTools, &items); err != nil {
		return nil, p.fail(toolsPath, "expected an array of tools: "+err.Error())
	}

	c.Tools = make([]Tool, 0, len(items))
	seen := make(map[string]int, len(items))
	for i, item := range items {
		path := toolsPath + "/" + strconv.Itoa(i)
		t, err := p.tool(item, path)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[t.Name]; dup {
			return nil, p.fail(path+"/name", fmt.Sprintf("duplicate tool name %q (first at %s/%d)", t.Name, toolsPath, first))
		}
		seen[t.Name] = i
		c.Tools = append(c.Tools, t)
	}
	return c, nil
}

type parser struct{ file string }

func (p parser) fail(path, msg string) error { return &ParseError{File: p.file, Path: path, Msg: msg} }

// document checks that data is one JSON value and turns a syntax error into a
// line and column, which is what a user can act on.
func (p parser) document(data []byte) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line, col := lineCol(data, syn.Offset)
			return nil, p.fail(fmt.Sprintf("line %d, column %d", line, col), "invalid JSON: "+syn.Error())
		}
		return nil, p.fail("", "invalid JSON: "+err.Error())
	}
	return raw, nil
}

func (p parser) object(raw json.RawMessage, path string) (map[string]json.RawMessage, error) {
	if kindOf(raw) != "object" {
		return nil, p.fail(path, "expected an object, found "+kindOf(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, p.fail(path, "expected an object: "+err.Error())
	}
	return m, nil
}

// optString reads obj[key] as a string; absent or null gives "".
func (p parser) optString(obj map[string]json.RawMessage, path, key string) (string, error) {
	raw, ok := obj[key]
	if !ok || kindOf(raw) == "null" {
		return "", nil
	}
	var s string
	if kindOf(raw) != "string" || json.Unmarshal(raw, &s) != nil {
		return "", p.fail(path+"/"+key, "expected a string, found "+kindOf(raw))
	}
	return s, nil
}

// optBool reads obj[key] as a boolean; absent or null gives nil.
func (p parser) optBool(obj map[string]json.RawMessage, path, key string) (*bool, error) {
	raw, ok := obj[key]
	if !ok || kindOf(raw) == "null" {
		return nil, nil
	}
	var b bool
	if kindOf(raw) != "boolean" || json.Unmarshal(raw, &b) != nil {
		return nil, p.fail(path+"/"+key, "expected true or false, found "+kindOf(raw))
	}
	return &b, nil
}

func (p parser) tool(raw json.RawMessage, path string) (Tool, error) {
	obj, err := p.object(raw, path)
	if err != nil {
		return Tool{}, err
	}
	var t Tool
	nameRaw, ok := obj["name"]
	if !ok || kindOf(nameRaw) != "string" || json.Unmarshal(nameRaw, &t.Name) != nil || strings.TrimSpace(t.Name) == "" {
		return Tool{}, p.fail(path+"/name", "expected a non-empty string")
	}
	if t.Name == "*" {
		// In a policy "*" is every tool: hiding or listing a tool of
		// that name would hide or list them all.
		return Tool{}, p.fail(path+"/name", `a tool named "*" cannot be told apart from every tool in a policy (hide: ["*"] hides them all)`)
	}
	if t.Description, err = p.optString(obj, path, "description"); err != nil {
		return Tool{}, err
	}
	if s, ok := obj["inputSchema"]; ok && kindOf(s) != "null" {
		if kindOf(s) != "object" {
			return Tool{}, p.fail(path+"/inputSchema", "expected a JSON Schema object, found "+kindOf(s))
		}
		t.InputSchema = s
	}
	if a, ok := obj["annotations"]; ok && kindOf(a) != "null" {
		apath := path + "/annotations"
		aobj, err := p.object(a, apath)
		if err != nil {
			return Tool{}, err
		}
		ann := &Annotations{}
		if ann.Title, err = p.optString(aobj, apath, "title"); err != nil {
			return Tool{}, err
		}
		// A slice, not a map, so that the first bad hint reported is stable.
		for _, h := range []struct {
			key string
			dst **bool
		}{
			{"readOnlyHint", &ann.ReadOnlyHint},
			{"destructiveHint", &ann.DestructiveHint},
			{"idempotentHint", &ann.IdempotentHint},
			{"openWorldHint", &ann.OpenWorldHint},
		} {
			if *h.dst, err = p.optBool(aobj, apath, h.key); err != nil {
				return Tool{}, err
			}
		}
		t.Annotations = ann
	}
	return t, nil
}

// kindOf names the JSON type of a syntactically valid value.
func kindOf(raw json.RawMessage) string {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	if col < 1 {
		col = 1
	}
	return line, col
}

// compact shortens a JSON value for an error message.
func compact(raw json.RawMessage, limit int) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	r := []rune(b.String())
	if len(r) > limit {
		return string(r[:limit]) + "…"
	}
	return string(r)
}
