package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Values of Policy.Default.
const (
	DefaultAllow = "allow"
	DefaultDeny  = "deny"
)

// Values of Limit.Window: fixed, calendar-aligned UTC windows.
const (
	WindowMinute = "minute"
	WindowHour   = "hour"
	WindowDay    = "day"
)

// WindowLength is the length of a limit window (Limit.Window); a minute
// for any other value, which Validate refuses. SQL buckets a call's window
// as epoch_ms(ts) // its milliseconds: calendar-aligned in UTC like the
// evaluator's windows, in integer arithmetic instead of a time-zone-aware
// date_trunc over every row.
func WindowLength(window string) time.Duration {
	switch window {
	case WindowHour:
		return time.Hour
	case WindowDay:
		return 24 * time.Hour
	}
	return time.Minute
}

// Values of Limit.Scope. An empty scope means ScopeGrant (PolicyLayer's default).
const (
	ScopeGrant   = "grant"
	ScopeSession = "session"
	ScopeAgent   = "agent"
)

// Version is the only policy.json version PolicyLayer recognises.
const Version = "1"

// HideAll in Policy.Hide hides every tool.
const HideAll = "*"

// Policy is one PolicyLayer policy.json document. Fields this package does not
// know are kept in Extra (at every level) and written back, so that mcptrail
// never drops what a newer gateway understands.
type Policy struct {
	Version  string               // "1"
	Default  string               // DefaultAllow or DefaultDeny: for tools not listed in Tools
	Hide     []string             // removed from tools/list and denied; "*" hides every tool
	AllTools *ToolRule            // rules counting every tool's calls together (usually only Limits)
	Tools    map[string]*ToolRule // per-tool rules; under default deny, {} allows the tool
	Extra    map[string]json.RawMessage
}

// ToolRule holds the rules of one tool (or of all_tools). A nil *ToolRule in
// Policy.Tools is the same as {}: the tool is listed and allowed.
type ToolRule struct {
	Require []Condition // all must hold for the call to be allowed
	DenyIf  []DenyRule  // the first matching entry denies the call
	Limits  []Limit     // quotas; every applicable one must have room
	Extra   map[string]json.RawMessage
}

// DenyRule denies a call when all its Conditions hold. With no conditions it
// denies unconditionally, which is how "require approval" is written.
type DenyRule struct {
	Conditions []Condition
	OnDeny     string // message shown to the agent
	Extra      map[string]json.RawMessage
}

// Condition is one predicate over the call's arguments, as in Intercept:
// Path is "args.<key>[.<key>...]", Op one of Ops, Value raw JSON (nil when absent).
type Condition struct {
	Path  string
	Op    string
	Value json.RawMessage
	Extra map[string]json.RawMessage
}

// Limit is a quota: at most Max calls per Window, counted per Scope.
type Limit struct {
	Counter string // counter id, unique within its limits list
	Window  string // WindowMinute, WindowHour or WindowDay
	Max     int    // calls allowed per window, at least 1
	Scope   string // ScopeGrant (or empty), ScopeSession or ScopeAgent
	Extra   map[string]json.RawMessage
}

// Ops lists the condition operators, in Intercept's order.
var Ops = []string{"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte", "regex", "contains", "exists"}

// Windows lists the limit windows; Scopes the limit scopes.
var (
	Windows = []string{WindowMinute, WindowHour, WindowDay}
	Scopes  = []string{ScopeGrant, ScopeSession, ScopeAgent}
)

// Conditional reports whether r decides by a call's arguments: it holds a
// require condition or a deny_if entry with conditions. False for nil.
func (r *ToolRule) Conditional() bool {
	if r == nil {
		return false
	}
	if len(r.Require) > 0 {
		return true
	}
	for _, d := range r.DenyIf {
		if !d.IsApproval() {
			return true
		}
	}
	return false
}

// IsApproval reports whether d is a "require approval" entry: a deny with no conditions.
func (d DenyRule) IsApproval() bool { return len(d.Conditions) == 0 }

// ConditionText writes a condition as people read it: "args.amount gt 10000".
func ConditionText(c Condition) string {
	return strings.TrimSpace(c.Path + " " + c.Op + " " + string(c.Value))
}

// ConditionsText writes a deny_if entry's conditions, which all must hold:
// "args.node eq \"pve1\" and args.vmid lt 100".
func ConditionsText(cs []Condition) string {
	texts := make([]string, len(cs))
	for i, c := range cs {
		texts[i] = ConditionText(c)
	}
	return strings.Join(texts, " and ")
}

// EffectiveScope returns the scope the limit counts by, ScopeGrant when empty.
func (l Limit) EffectiveScope() string {
	if l.Scope == "" {
		return ScopeGrant
	}
	return l.Scope
}

// Hidden reports whether tool is hidden by the policy (listed in hide, or hide holds "*").
func (p *Policy) Hidden(tool string) bool {
	return p != nil && (slices.Contains(p.Hide, tool) || slices.Contains(p.Hide, HideAll))
}

// ToolNames returns the names listed under tools, sorted.
func (p *Policy) ToolNames() []string {
	if p == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(p.Tools))
}

// Clone returns a deep copy of p, so that a proposed policy can be built from a
// current one without changing it.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	q := &Policy{
		Version:  p.Version,
		Default:  p.Default,
		Hide:     slices.Clone(p.Hide),
		AllTools: p.AllTools.Clone(),
		Extra:    cloneExtra(p.Extra),
	}
	if p.Tools != nil {
		q.Tools = make(map[string]*ToolRule, len(p.Tools))
		for name, r := range p.Tools {
			q.Tools[name] = r.Clone()
		}
	}
	return q
}

// Clone returns a deep copy of r.
func (r *ToolRule) Clone() *ToolRule {
	if r == nil {
		return nil
	}
	q := &ToolRule{Extra: cloneExtra(r.Extra)}
	for _, c := range r.Require {
		q.Require = append(q.Require, c.clone())
	}
	for _, d := range r.DenyIf {
		nd := DenyRule{OnDeny: d.OnDeny, Extra: cloneExtra(d.Extra)}
		for _, c := range d.Conditions {
			nd.Conditions = append(nd.Conditions, c.clone())
		}
		q.DenyIf = append(q.DenyIf, nd)
	}
	for _, l := range r.Limits {
		l.Extra = cloneExtra(l.Extra)
		q.Limits = append(q.Limits, l)
	}
	return q
}

func (c Condition) clone() Condition {
	c.Value = slices.Clone(c.Value)
	c.Extra = cloneExtra(c.Extra)
	return c
}

func cloneExtra(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// pointerEscape escapes one JSON pointer reference token (RFC 6901).
func pointerEscape(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// ToolPointer returns the JSON pointer of a tool's rules, "/tools/<name>".
func ToolPointer(tool string) string { return "/tools/" + pointerEscape(tool) }

// Holding reports which of ptrs p holds a value at. The pointers are JSON
// pointers as Dropped and LimitPointer write them: a limit is named by its
// counter, or by its index when it has none.
func (p *Policy) Holding(ptrs []string) ([]bool, error) {
	doc, err := p.Canonical()
	if err != nil {
		return nil, err
	}
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("policy: reading canonical JSON: %w", err)
	}
	out := make([]bool, len(ptrs))
	for i, ptr := range ptrs {
		out[i] = holds(root, ptr)
	}
	return out, nil
}

func holds(v any, ptr string) bool {
	if ptr == "" {
		return true
	}
	rest, ok := strings.CutPrefix(ptr, "/")
	if !ok {
		return false
	}
	parent := ""
	for _, tok := range strings.Split(rest, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch t := v.(type) {
		case map[string]any:
			v, ok = t[tok]
		case []any:
			v, ok = element(t, tok, parent == "limits")
		default:
			ok = false
		}
		if !ok {
			return false
		}
		parent = tok
	}
	return true
}

// element is the list's element tok names: its index, or for a limit its
// counter (LimitPointer).
func element(list []any, tok string, limits bool) (any, bool) {
	for i, e := range list {
		counter := ""
		if m, ok := e.(map[string]any); ok && limits {
			counter, _ = m["counter"].(string)
		}
		if (limits && counter == tok) || (counter == "" && strconv.Itoa(i) == tok) {
			return e, true
		}
	}
	return nil, false
}
