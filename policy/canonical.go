package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/wI2L/jsondiff"
)

// Canonical returns p in its stable canonical form: keys sorted (unknown fields
// included), two-space indent, no HTML escaping, a trailing newline, hide
// sorted and de-duplicated, empty lists and objects left out (except a deny_if
// entry's "conditions", which is always written: empty means unconditional).
// Equal policies give identical bytes, so diffs between versions stay minimal.
func (p *Policy) Canonical() ([]byte, error) {
	tree, err := p.tree()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tree); err != nil {
		return nil, fmt.Errorf("policy: encoding canonical JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// MarshalJSON writes the canonical form, so that a Policy embedded in another
// document (the recommender's JSON output) looks the same as policy.json.
func (p Policy) MarshalJSON() ([]byte, error) {
	b, err := p.Canonical()
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(b, "\n"), nil
}

// object is a JSON object under construction; encoding/json sorts its keys.
type object map[string]any

func (p *Policy) tree() (object, error) {
	o := object{}
	if p == nil {
		return o, nil
	}
	if err := o.extra("", p.Extra); err != nil {
		return nil, err
	}
	if p.Version != "" {
		o["version"] = p.Version
	}
	if p.Default != "" {
		o["default"] = p.Default
	}
	if hide := canonicalHide(p.Hide); len(hide) > 0 {
		o["hide"] = hide
	}
	if p.AllTools != nil {
		r, err := p.AllTools.tree("/all_tools")
		if err != nil {
			return nil, err
		}
		o["all_tools"] = r
	}
	if len(p.Tools) > 0 {
		tools := object{}
		for name, r := range p.Tools {
			t, err := r.tree(ToolPointer(name))
			if err != nil {
				return nil, err
			}
			tools[name] = t
		}
		o["tools"] = tools
	}
	return o, nil
}

func canonicalHide(hide []string) []string {
	if len(hide) == 0 {
		return nil
	}
	out := slices.Clone(hide)
	slices.Sort(out)
	return slices.Compact(out)
}

func (r *ToolRule) tree(path string) (object, error) {
	o := object{}
	if r == nil {
		return o, nil
	}
	if err := o.extra(path, r.Extra); err != nil {
		return nil, err
	}
	if len(r.Require) > 0 {
		req := make([]object, len(r.Require))
		for i, c := range r.Require {
			t, err := c.tree(fmt.Sprintf("%s/require/%d", path, i))
			if err != nil {
				return nil, err
			}
			req[i] = t
		}
		o["require"] = req
	}
	if len(r.DenyIf) > 0 {
		deny := make([]object, len(r.DenyIf))
		for i, d := range r.DenyIf {
			dp := fmt.Sprintf("%s/deny_if/%d", path, i)
			t := object{}
			if err := t.extra(dp, d.Extra); err != nil {
				return nil, err
			}
			conds := make([]object, len(d.Conditions))
			for j, c := range d.Conditions {
				ct, err := c.tree(fmt.Sprintf("%s/conditions/%d", dp, j))
				if err != nil {
					return nil, err
				}
				conds[j] = ct
			}
			t["conditions"] = conds
			if d.OnDeny != "" {
				t["on_deny"] = d.OnDeny
			}
			deny[i] = t
		}
		o["deny_if"] = deny
	}
	if len(r.Limits) > 0 {
		limits := make([]object, len(r.Limits))
		for i, l := range r.Limits {
			t, err := l.tree(fmt.Sprintf("%s/limits/%d", path, i))
			if err != nil {
				return nil, err
			}
			limits[i] = t
		}
		o["limits"] = limits
	}
	return o, nil
}

func (l Limit) tree(path string) (object, error) {
	t := object{}
	if err := t.extra(path, l.Extra); err != nil {
		return nil, err
	}
	t["counter"] = l.Counter
	t["window"] = l.Window
	t["max"] = l.Max
	if l.Scope != "" {
		t["scope"] = l.Scope
	}
	return t, nil
}

// MarshalJSON writes a limit as policy.json has it, so that a limit quoted in
// other documents (a finding's action) reads the same.
func (l Limit) MarshalJSON() ([]byte, error) {
	t, err := l.tree("")
	if err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// MarshalJSON writes a tool's rule as policy.json has it under tools, so
// that a rule quoted in other documents (a revert's restore) reads the
// same and can be pasted into a policy.
func (r ToolRule) MarshalJSON() ([]byte, error) {
	t, err := r.tree("")
	if err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

func (c Condition) tree(path string) (object, error) {
	o := object{}
	if err := o.extra(path, c.Extra); err != nil {
		return nil, err
	}
	o["path"] = c.Path
	o["op"] = c.Op
	if c.Value != nil {
		v, err := normalizeRaw(c.Value)
		if err != nil {
			return nil, fmt.Errorf("policy: %s/value: %w", path, err)
		}
		o["value"] = v
	}
	return o, nil
}

// extra copies unknown fields in, normalised (sorted keys, compact) so that a
// hand-built Extra still gives canonical output.
func (o object) extra(path string, extra map[string]json.RawMessage) error {
	for k, raw := range extra {
		v, err := normalizeRaw(raw)
		if err != nil {
			return fmt.Errorf("policy: %s/%s: %w", path, pointerEscape(k), err)
		}
		o[k] = v
	}
	return nil
}

func normalizeRaw(raw json.RawMessage) (json.RawMessage, error) {
	var ps problems
	v, ok := readTree(raw, &ps)
	if !ok {
		return nil, fmt.Errorf("invalid JSON value: %w", ps.err(""))
	}
	return marshalCompact(v)
}

// Patch returns the RFC 6902 JSON Patch that turns the canonical form of from
// into that of to; a nil from stands for the empty document {}. The result is
// a JSON array ("[]" when nothing changed). Arrays are compared by longest
// common subsequence so that adding one name to hide is one "add".
func Patch(from, to *Policy) ([]byte, error) {
	src := []byte("{}")
	if from != nil {
		b, err := from.Canonical()
		if err != nil {
			return nil, fmt.Errorf("policy patch: source: %w", err)
		}
		src = b
	}
	tgt, err := to.Canonical()
	if err != nil {
		return nil, fmt.Errorf("policy patch: target: %w", err)
	}
	patch, err := jsondiff.CompareJSON(src, tgt, jsondiff.LCS(), jsondiff.UnmarshalFunc(unmarshalNumbers))
	if err != nil {
		return nil, fmt.Errorf("policy patch: %w", err)
	}
	if len(patch) == 0 {
		return []byte("[]"), nil
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("policy patch: encoding: %w", err)
	}
	return b, nil
}

// unmarshalNumbers keeps numbers as json.Number, so that large integers in
// unknown fields survive the patch exactly.
func unmarshalNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// UnifiedDiff returns the unified diff of the canonical forms of from and to
// (a nil policy is an empty file), labelled fromName and toName; "" when they
// are equal. A policy that cannot be written (a hand-built Extra holding
// invalid JSON) shows as a one-line error in its place.
func UnifiedDiff(from, to *Policy, fromName, toName string) string {
	text := func(p *Policy) string {
		if p == nil {
			return ""
		}
		b, err := p.Canonical()
		if err != nil {
			return "error: " + strings.ReplaceAll(err.Error(), "\n", "; ") + "\n"
		}
		return string(b)
	}
	old, new := text(from), text(to)
	d, err := udiff.ToUnified(fromName, toName, old, udiff.Lines(old, new), udiff.DefaultContextLines)
	if err != nil {
		// cannot happen: the edits were computed from old itself
		return fmt.Sprintf("--- %s\n+++ %s\n@@ diff failed: %v @@\n", fromName, toName, err)
	}
	return d
}
