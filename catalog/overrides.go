package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Override is a user's reviewed category for one tool.
type Override struct {
	Category Category `json:"category" yaml:"category"`
	Why      string   `json:"why,omitempty" yaml:"why,omitempty"`
}

// Overrides maps a tool name to its override. A nil map has no overrides.
type Overrides map[string]Override

// UnknownTools lists, sorted, the overridden tools that c does not have: most
// often a typo, which would otherwise silently leave the tool unreviewed.
func (o Overrides) UnknownTools(c *Catalog) []string {
	have := make(map[string]bool, len(c.Tools))
	for _, t := range c.Tools {
		have[t.Name] = true
	}
	var out []string
	for name := range o {
		if !have[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// LoadOverrides reads an override file, JSON or YAML, in either of two shapes:
//
//	{"delete_vm": "destructive"}                                   (flat)
//	{"delete_vm": {"category": "destructive", "why": "reviewed"}}  (risk hints)
//
// The shapes can be mixed. An unknown category, an unexpected field or a tool
// listed twice is an error naming the tool; an empty file has no overrides.
// name (usually the file name) prefixes every error.
func LoadOverrides(data []byte, name string) (Overrides, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return Overrides{}, nil
	}
	// JSON goes through encoding/json for exact JSON semantics and JSON
	// paths; everything else is YAML. A .json file is JSON even when broken,
	// so that its syntax error is reported as one.
	if strings.HasSuffix(strings.ToLower(name), ".json") {
		return loadJSONOverrides(data, name)
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		if o, err := loadJSONOverrides(data, name); err == nil || json.Valid(data) {
			return o, err
		}
	}
	return loadYAMLOverrides(data, name)
}

func loadJSONOverrides(data []byte, name string) (Overrides, error) {
	p := parser{file: name}
	raw, err := p.document(data)
	if err != nil {
		return nil, err
	}
	if kindOf(raw) != "object" {
		return nil, p.fail("", "expected an object mapping tool names to categories, found "+kindOf(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // the opening brace
		return nil, p.fail("", "invalid JSON: "+err.Error())
	}
	out := Overrides{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, p.fail("", "invalid JSON: "+err.Error())
		}
		tool, _ := tok.(string)
		path := "/" + pointerEscape(tool)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, p.fail(path, "invalid JSON: "+err.Error())
		}
		if _, dup := out[tool]; dup {
			return nil, p.fail(path, fmt.Sprintf("tool %q is listed twice", tool))
		}
		o, err := jsonOverride(tool, val)
		if err != nil {
			return nil, p.fail(path, err.Error())
		}
		out[tool] = o
	}
	return out, nil
}

func jsonOverride(tool string, val json.RawMessage) (Override, error) {
	switch kindOf(val) {
	case "string":
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return Override{}, err
		}
		return newOverride(tool, s, "")
	case "object":
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(val, &fields); err != nil {
			return Override{}, err
		}
		if k, ok := repeatedKey(val); ok {
			// Read as a map, the last would win without a word: a
			// reviewed "admin" silently weakened by a later "read".
			return Override{}, fmt.Errorf("tool %q: field %q given twice", tool, k)
		}
		var cat, why string
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys) // a stable first error
		for _, k := range keys {
			v := fields[k]
			var dst *string
			switch k {
			case "category":
				dst = &cat
			case "why":
				dst = &why
			default:
				return Override{}, fmt.Errorf("tool %q: unexpected field %q (expected \"category\" and an optional \"why\")", tool, k)
			}
			if kindOf(v) != "string" || json.Unmarshal(v, dst) != nil {
				return Override{}, fmt.Errorf("tool %q: %q: expected a string, found %s", tool, k, kindOf(v))
			}
		}
		if _, ok := fields["category"]; !ok {
			return Override{}, fmt.Errorf("tool %q: missing \"category\"", tool)
		}
		return newOverride(tool, cat, why)
	}
	return Override{}, fmt.Errorf("tool %q: expected a category string or an object with \"category\" and \"why\", found %s", tool, kindOf(val))
}

func loadYAMLOverrides(data []byte, name string) (Overrides, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Overrides{}, nil // only comments
		}
		return nil, fmt.Errorf("%s: invalid YAML: %w", name, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: expected one YAML document", name)
	}
	fail := func(n *yaml.Node, msg string) error {
		return fmt.Errorf("%s: line %d: %s", name, n.Line, msg)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return Overrides{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root, "expected a mapping of tool names to categories")
	}
	out := Overrides{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fail(k, "expected a tool name")
		}
		tool := k.Value
		if _, dup := out[tool]; dup {
			return nil, fail(k, fmt.Sprintf("tool %q is listed twice", tool))
		}
		o, err := yamlOverride(tool, v)
		if err != nil {
			return nil, fail(v, err.Error())
		}
		out[tool] = o
	}
	return out, nil
}

func yamlOverride(tool string, v *yaml.Node) (Override, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
		return newOverride(tool, v.Value, "")
	case v.Kind == yaml.MappingNode:
		var cat, why string
		hasCat := false
		seen := map[string]bool{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], v.Content[i+1]
			if val.Kind != yaml.ScalarNode {
				return Override{}, fmt.Errorf("tool %q: %q: expected a string", tool, k.Value)
			}
			if seen[k.Value] {
				return Override{}, fmt.Errorf("tool %q: field %q given twice", tool, k.Value)
			}
			seen[k.Value] = true
			switch k.Value {
			case "category":
				cat, hasCat = val.Value, true
			case "why":
				why = val.Value
			default:
				return Override{}, fmt.Errorf("tool %q: unexpected field %q (expected \"category\" and an optional \"why\")", tool, k.Value)
			}
		}
		if !hasCat {
			return Override{}, fmt.Errorf("tool %q: missing \"category\"", tool)
		}
		return newOverride(tool, cat, why)
	}
	return Override{}, fmt.Errorf("tool %q: expected a category or a mapping with \"category\" and \"why\"", tool)
}

// repeatedKey finds a key given twice in the JSON object obj (valid JSON).
func repeatedKey(obj json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := t.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

func newOverride(tool, category, why string) (Override, error) {
	if strings.TrimSpace(tool) == "" {
		return Override{}, errors.New("empty tool name")
	}
	c, err := ParseCategory(category)
	if err != nil {
		return Override{}, fmt.Errorf("tool %q: %w", tool, err)
	}
	return Override{Category: c, Why: strings.TrimSpace(why)}, nil
}

// pointerEscape escapes a key for a JSON Pointer (RFC 6901).
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
