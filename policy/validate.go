package policy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Validate reports every problem of p, each with its JSON pointer: the version
// and default, empty or repeated names in hide, and for all_tools and every tool
// the conditions (path, op, value), and the limits (counter present and unique
// within its list, window, max ≥ 1, scope). It returns nil or an *Error.
//
// A tool both hidden and listed under tools is fine (hide wins).
func (p *Policy) Validate() error {
	var ps problems
	if p == nil {
		ps.add("", "no policy")
		return ps.err("")
	}
	switch p.Version {
	case Version:
	case "":
		ps.add("/version", "missing version (expected %q)", Version)
	default:
		ps.add("/version", "unsupported version %q (expected %q)", p.Version, Version)
	}
	switch p.Default {
	case DefaultAllow, DefaultDeny:
	case "":
		ps.add("/default", "missing default (allowed: allow, deny)")
	default:
		ps.add("/default", "unknown default %q (allowed: allow, deny)", p.Default)
	}
	seen := map[string]int{}
	for i, name := range p.Hide {
		path := "/hide/" + strconv.Itoa(i)
		if strings.TrimSpace(name) == "" {
			ps.add(path, "empty tool name")
			continue
		}
		if first, dup := seen[name]; dup {
			ps.add(path, "%q is listed twice in hide (first at /hide/%d)", name, first)
			continue
		}
		seen[name] = i
	}
	if p.AllTools != nil {
		p.AllTools.validate(&ps, "/all_tools")
	}
	for _, name := range p.ToolNames() {
		path := ToolPointer(name)
		if strings.TrimSpace(name) == "" {
			ps.add(path, "empty tool name")
		}
		if r := p.Tools[name]; r != nil {
			r.validate(&ps, path)
		}
	}
	return ps.err("")
}

func (r *ToolRule) validate(ps *problems, path string) {
	for i, c := range r.Require {
		c.validate(ps, path+"/require/"+strconv.Itoa(i))
	}
	for i, d := range r.DenyIf {
		for j, c := range d.Conditions {
			c.validate(ps, path+"/deny_if/"+strconv.Itoa(i)+"/conditions/"+strconv.Itoa(j))
		}
	}
	counters := map[string]int{}
	for i, l := range r.Limits {
		lp := path + "/limits/" + strconv.Itoa(i)
		switch first, dup := counters[l.Counter]; {
		case l.Counter == "":
			ps.add(lp+"/counter", "missing counter name")
		case dup:
			ps.add(lp+"/counter", "counter %q is used twice in this limits list (first at %s/limits/%d)", l.Counter, path, first)
		default:
			counters[l.Counter] = i
		}
		switch {
		case l.Window == "":
			ps.add(lp+"/window", "missing window (allowed: minute, hour, day)")
		case !slices.Contains(Windows, l.Window):
			ps.add(lp+"/window", "unknown window %q (allowed: minute, hour, day)", l.Window)
		}
		if l.Max < 1 {
			ps.add(lp+"/max", "max must be at least 1, got %d", l.Max)
		}
		if l.Scope != "" && !slices.Contains(Scopes, l.Scope) {
			ps.add(lp+"/scope", "unknown scope %q (allowed: grant, session, agent)", l.Scope)
		}
	}
}

func (c Condition) validate(ps *problems, path string) {
	switch {
	case c.Path == "":
		ps.add(path+"/path", "missing path (expected \"args.<name>\")")
	case !strings.HasPrefix(c.Path, "args.") || strings.HasSuffix(c.Path, ".") || strings.Contains(c.Path, ".."):
		ps.add(path+"/path", "path %q must be \"args.<name>[.<name>...]\"", c.Path)
	}
	if !slices.Contains(Ops, c.Op) {
		if c.Op == "" {
			ps.add(path+"/op", "missing op (allowed: %s)", strings.Join(Ops, ", "))
		} else {
			ps.add(path+"/op", "unknown op %q (allowed: %s)", c.Op, strings.Join(Ops, ", "))
		}
		return
	}
	v, err := c.value()
	if err != nil {
		ps.add(path+"/value", "invalid JSON value: %v", err)
		return
	}
	vp := path + "/value"
	switch c.Op {
	case "in", "not_in":
		if _, ok := v.([]any); !ok {
			ps.add(vp, "op %q needs an array value, got %s", c.Op, typeName(v))
		}
	case "lt", "lte", "gt", "gte":
		if _, ok := v.(json.Number); !ok {
			ps.add(vp, "op %q needs a number value, got %s", c.Op, typeName(v))
		}
	case "regex":
		s, ok := v.(string)
		if !ok {
			ps.add(vp, "op \"regex\" needs a string value, got %s", typeName(v))
		} else if _, err := regexp.Compile(s); err != nil {
			ps.add(vp, "invalid regex %q: %v", s, err)
		}
	case "exists":
		if _, ok := v.(bool); !ok && c.Value != nil {
			ps.add(vp, "op \"exists\" needs a boolean value, got %s", typeName(v))
		}
	case "eq", "neq", "contains":
		if c.Value == nil {
			ps.add(vp, "op %q needs a value", c.Op)
		}
	}
}

// value decodes Value (numbers as json.Number); nil when absent.
func (c Condition) value() (any, error) {
	if c.Value == nil {
		return nil, nil
	}
	var ps problems
	v, ok := readTree(c.Value, &ps)
	if !ok || len(ps) > 0 {
		return nil, ps.err("")
	}
	return v, nil
}
