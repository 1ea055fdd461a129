package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// maxDepth bounds nesting so that hostile input cannot exhaust the stack.
const maxDepth = 256

// Parse reads a policy.json document and validates it. name (usually the file
// name) prefixes every problem; an *Error lists all of them, each with the JSON
// pointer of the offending value and what was expected.
//
// Reading is lenient: unknown fields are kept, a `rate_limit: {max, window:
// <seconds>}` block (or Intercept's "N/window" string) is read as a limit, and a
// limit window may be given in seconds (60, 3600, 86400).
func Parse(data []byte, name string) (*Policy, error) {
	p, err := Decode(data, name)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = name
			return nil, e
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// Decode reads a policy.json document without validating its values: it fails
// only on bad JSON, duplicate keys and values of the wrong type. Use it to load
// a document that Validate may reject, e.g. to show what is wrong with it.
func Decode(data []byte, name string) (*Policy, error) {
	var ps problems
	tree, ok := readTree(data, &ps)
	if !ok {
		return nil, ps.err(name)
	}
	p := decodePolicy(tree, &ps)
	if err := ps.err(name); err != nil {
		return nil, err
	}
	return p, nil
}

// UnmarshalJSON decodes a policy embedded in another JSON document (see Decode).
func (p *Policy) UnmarshalJSON(data []byte) error {
	q, err := Decode(data, "")
	if err != nil {
		return err
	}
	*p = *q
	return nil
}

// UnmarshalJSON decodes a tool's rule as policy.json has it under tools (a
// revert's restore read back; see ToolRule.MarshalJSON), without validating
// its values.
func (r *ToolRule) UnmarshalJSON(data []byte) error {
	var ps problems
	tree, ok := readTree(data, &ps)
	if !ok {
		return ps.err("")
	}
	q := decodeToolRule(&ps, "", "", tree)
	if err := ps.err(""); err != nil {
		return err
	}
	if q == nil {
		q = &ToolRule{}
	}
	*r = *q
	return nil
}

// readTree decodes data into maps, slices, strings, json.Numbers, bools and
// nils. Unlike json.Unmarshal it reports duplicate object keys, which
// encoding/json silently resolves by keeping the last one: a tool listed twice
// under "tools" would otherwise lose its first rules without a word.
func readTree(data []byte, ps *problems) (any, bool) {
	t := &treeReader{dec: json.NewDecoder(bytes.NewReader(data)), data: data, ps: ps}
	t.dec.UseNumber()
	v, ok := t.value("", 0)
	if !ok {
		return nil, false
	}
	end := t.dec.InputOffset()
	if _, err := t.dec.Token(); err != io.EOF {
		rest := data[end:]
		end += int64(len(rest) - len(bytes.TrimLeft(rest, " \t\r\n")))
		ps.add("", "unexpected data after the JSON document at %s", t.position(end))
		return nil, false
	}
	return v, true
}

type treeReader struct {
	dec  *json.Decoder
	data []byte
	ps   *problems
}

func (t *treeReader) value(path string, depth int) (any, bool) {
	tok, err := t.dec.Token()
	if err != nil {
		t.syntax(path, err)
		return nil, false
	}
	d, isDelim := tok.(json.Delim)
	if !isDelim {
		return tok, true // string, json.Number, bool or nil
	}
	if depth >= maxDepth {
		t.ps.add(path, "nested deeper than %d levels", maxDepth)
		return nil, false
	}
	if d == '[' {
		a := []any{}
		for i := 0; t.dec.More(); i++ {
			v, ok := t.value(path+"/"+strconv.Itoa(i), depth+1)
			if !ok {
				return nil, false
			}
			a = append(a, v)
		}
		if _, err := t.dec.Token(); err != nil { // ']'
			t.syntax(path, err)
			return nil, false
		}
		return a, true
	}
	m := map[string]any{}
	for t.dec.More() {
		kt, err := t.dec.Token()
		if err != nil {
			t.syntax(path, err)
			return nil, false
		}
		key, _ := kt.(string) // the decoder only yields string keys
		kp := path + "/" + pointerEscape(key)
		if _, dup := m[key]; dup {
			if path == "/tools" {
				t.ps.add(kp, "tool %q is listed twice in tools (JSON keeps only the last)", key)
			} else {
				t.ps.add(kp, "duplicate key %q", key)
			}
		}
		v, ok := t.value(kp, depth+1)
		if !ok {
			return nil, false
		}
		m[key] = v
	}
	if _, err := t.dec.Token(); err != nil { // '}'
		t.syntax(path, err)
		return nil, false
	}
	return m, true
}

func (t *treeReader) syntax(path string, err error) {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		t.ps.add(path, "invalid JSON at %s: %v", t.position(se.Offset), se)
	case errors.Is(err, io.EOF) && t.dec.InputOffset() == 0:
		t.ps.add(path, "empty document (expected a JSON object)")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		t.ps.add(path, "invalid JSON: unexpected end of input")
	default:
		t.ps.add(path, "invalid JSON: %v", err)
	}
}

// position turns a byte offset into "line L, column C" (both from 1).
func (t *treeReader) position(off int64) string {
	if off < 0 {
		off = 0
	}
	if off > int64(len(t.data)) {
		off = int64(len(t.data))
	}
	before := t.data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

func decodePolicy(tree any, ps *problems) *Policy {
	p := &Policy{}
	m, ok := asObject(ps, "", tree)
	if !ok {
		return p
	}
	for _, k := range sortedKeys(m) {
		v, path := m[k], "/"+pointerEscape(k)
		switch k {
		case "version":
			p.Version = asString(ps, path, v)
		case "default":
			p.Default = asString(ps, path, v)
		case "hide":
			for i, item := range asArray(ps, path, v) {
				p.Hide = append(p.Hide, asString(ps, path+"/"+strconv.Itoa(i), item))
			}
		case "all_tools":
			p.AllTools = decodeToolRule(ps, path, "all_tools", v)
		case "tools":
			tools, ok := asObject(ps, path, v)
			if !ok {
				continue
			}
			for _, name := range sortedKeys(tools) {
				if p.Tools == nil {
					p.Tools = make(map[string]*ToolRule, len(tools))
				}
				p.Tools[name] = decodeToolRule(ps, path+"/"+pointerEscape(name), name, tools[name])
			}
		default:
			p.Extra = addExtra(ps, path, p.Extra, k, v)
		}
	}
	return p
}

func decodeToolRule(ps *problems, path, tool string, v any) *ToolRule {
	r := &ToolRule{}
	if v == nil {
		return r // lenient: "tool": null reads as {}
	}
	m, ok := asObject(ps, path, v)
	if !ok {
		return r
	}
	for _, k := range sortedKeys(m) {
		v, kp := m[k], path+"/"+pointerEscape(k)
		switch k {
		case "require":
			for i, item := range asArray(ps, kp, v) {
				r.Require = append(r.Require, decodeCondition(ps, kp+"/"+strconv.Itoa(i), item))
			}
		case "deny_if":
			for i, item := range asArray(ps, kp, v) {
				r.DenyIf = append(r.DenyIf, decodeDenyRule(ps, kp+"/"+strconv.Itoa(i), item))
			}
		case "limits":
			for i, item := range asArray(ps, kp, v) {
				r.Limits = append(r.Limits, decodeLimit(ps, kp+"/"+strconv.Itoa(i), item))
			}
		case "rate_limit":
			// handled below, once limits are known, so that its counter name is unique
		default:
			r.Extra = addExtra(ps, kp, r.Extra, k, v)
		}
	}
	if v, ok := m["rate_limit"]; ok {
		if l, ok := decodeRateLimitAlias(ps, path+"/rate_limit", v); ok {
			l.Counter = uniqueCounter(r.Limits, l.Counter, tool+"_rate", l.Window)
			r.Limits = append(r.Limits, l)
		}
	}
	return r
}

func decodeCondition(ps *problems, path string, v any) Condition {
	var c Condition
	m, ok := asObject(ps, path, v)
	if !ok {
		return c
	}
	for _, k := range sortedKeys(m) {
		v, kp := m[k], path+"/"+pointerEscape(k)
		switch k {
		case "path":
			c.Path = asString(ps, kp, v)
		case "op":
			c.Op = asString(ps, kp, v)
		case "value":
			c.Value = rawOf(ps, kp, v)
		default:
			c.Extra = addExtra(ps, kp, c.Extra, k, v)
		}
	}
	return c
}

func decodeDenyRule(ps *problems, path string, v any) DenyRule {
	var d DenyRule
	m, ok := asObject(ps, path, v)
	if !ok {
		return d
	}
	for _, k := range sortedKeys(m) {
		v, kp := m[k], path+"/"+pointerEscape(k)
		switch k {
		case "conditions":
			for i, item := range asArray(ps, kp, v) {
				d.Conditions = append(d.Conditions, decodeCondition(ps, kp+"/"+strconv.Itoa(i), item))
			}
		case "on_deny":
			d.OnDeny = asString(ps, kp, v)
		default:
			d.Extra = addExtra(ps, kp, d.Extra, k, v)
		}
	}
	return d
}

func decodeLimit(ps *problems, path string, v any) Limit {
	var l Limit
	m, ok := asObject(ps, path, v)
	if !ok {
		return l
	}
	for _, k := range sortedKeys(m) {
		v, kp := m[k], path+"/"+pointerEscape(k)
		switch k {
		case "counter":
			l.Counter = asString(ps, kp, v)
		case "window":
			l.Window = asWindow(ps, kp, v)
		case "max":
			l.Max = asInt(ps, kp, v)
		case "scope":
			l.Scope = asString(ps, kp, v)
		default:
			l.Extra = addExtra(ps, kp, l.Extra, k, v)
		}
	}
	return l
}

// decodeRateLimitAlias reads the lenient alias of a limit: the catalogue's
// `rate_limit: {max: 10, window: 60}` (seconds; "tracked per agent session", so
// the scope defaults to session) or Intercept's shorthand "10/minute", which
// Intercept counts once for every call through its store: read as the
// broadest scope policy.json has, grant, never as per session (which would
// let each session make what the writer meant for all).
func decodeRateLimitAlias(ps *problems, path string, v any) (Limit, bool) {
	l := Limit{Scope: ScopeSession}
	if s, ok := v.(string); ok {
		l.Scope = ScopeGrant
		n, w, found := strings.Cut(s, "/")
		max, err := strconv.Atoi(strings.TrimSpace(n))
		w = strings.TrimSpace(w)
		if !found || err != nil || !slices.Contains(Windows, w) {
			ps.add(path, "invalid rate_limit %q (expected \"N/minute\", \"N/hour\" or \"N/day\", or {max, window})", s)
			return l, false
		}
		l.Max, l.Window = max, w
		return l, true
	}
	m, ok := asObject(ps, path, v)
	if !ok {
		return l, false
	}
	before := len(*ps)
	for _, k := range sortedKeys(m) {
		v, kp := m[k], path+"/"+pointerEscape(k)
		switch k {
		case "max":
			l.Max = asInt(ps, kp, v)
		case "window":
			l.Window = asWindow(ps, kp, v)
		case "scope":
			l.Scope = asString(ps, kp, v)
		case "counter":
			l.Counter = asString(ps, kp, v)
		default:
			l.Extra = addExtra(ps, kp, l.Extra, k, v)
		}
	}
	if _, ok := m["window"]; !ok {
		ps.add(path+"/window", "missing window (expected seconds: 60, 3600 or 86400)")
	}
	return l, len(*ps) == before
}

// uniqueCounter names an alias limit "<tool>_rate", avoiding names in use.
func uniqueCounter(limits []Limit, given, base, window string) string {
	taken := func(s string) bool {
		return slices.ContainsFunc(limits, func(l Limit) bool { return l.Counter == s })
	}
	if given != "" {
		return given // a clash is the author's to fix; Validate reports it
	}
	for _, c := range []string{base, base + "_" + window} {
		if !taken(c) {
			return c
		}
	}
	for i := 2; ; i++ {
		if c := base + "_" + strconv.Itoa(i); !taken(c) {
			return c
		}
	}
}

// windowSeconds maps the alias's seconds to named windows.
var windowSeconds = map[string]string{"60": WindowMinute, "3600": WindowHour, "86400": WindowDay}

// asWindow accepts a window name, or a number of seconds that is one of them.
func asWindow(ps *problems, path string, v any) string {
	switch w := v.(type) {
	case string:
		if name, ok := windowSeconds[w]; ok {
			return name
		}
		return w // an unknown name is reported by Validate
	case json.Number:
		if name, ok := windowSeconds[w.String()]; ok {
			return name
		}
		ps.add(path, "unsupported window of %s seconds (allowed: 60, 3600, 86400, or minute, hour, day)", w)
		return ""
	}
	ps.add(path, "expected a window name (minute, hour, day), got %s", typeName(v))
	return ""
}

func asObject(ps *problems, path string, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		ps.add(path, "expected an object, got %s", typeName(v))
	}
	return m, ok
}

// asArray accepts null as an empty list (lenient).
func asArray(ps *problems, path string, v any) []any {
	if v == nil {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		ps.add(path, "expected an array, got %s", typeName(v))
	}
	return a
}

func asString(ps *problems, path string, v any) string {
	s, ok := v.(string)
	if !ok {
		ps.add(path, "expected a string, got %s", typeName(v))
	}
	return s
}

func asInt(ps *problems, path string, v any) int {
	n, ok := v.(json.Number)
	if !ok {
		ps.add(path, "expected an integer, got %s", typeName(v))
		return 0
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil && i >= math.MinInt32 && i <= math.MaxInt32 {
		return int(i)
	}
	// 10.0 and 1e3 are integers too
	if f, err := n.Float64(); err == nil && f == math.Trunc(f) && f >= math.MinInt32 && f <= math.MaxInt32 {
		return int(f)
	}
	ps.add(path, "expected an integer, got %s", n)
	return 0
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

func addExtra(ps *problems, path string, extra map[string]json.RawMessage, k string, v any) map[string]json.RawMessage {
	raw := rawOf(ps, path, v)
	if raw == nil {
		return extra
	}
	if extra == nil {
		extra = map[string]json.RawMessage{}
	}
	extra[k] = raw
	return extra
}

// rawOf encodes a decoded value back to compact JSON with sorted keys: the
// normalised form in which unknown fields and condition values are kept, so
// that parse(canonical(p)) equals p.
func rawOf(ps *problems, path string, v any) json.RawMessage {
	b, err := marshalCompact(v)
	if err != nil {
		ps.add(path, "cannot keep value: %v", err)
		return nil
	}
	return b
}

// marshalCompact is json.Marshal without HTML escaping (policies hold "&" and
// "<" in messages; \u0026 would only make diffs harder to read).
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
