package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decisions of a Verdict (the same words as the audit event's decision).
const (
	Allowed          = "allowed"
	Denied           = "denied"
	Hidden           = "hidden"
	ApprovalRequired = "approval_required"
	RateLimited      = "rate_limited"
)

// Rule literals of a Verdict, as PolicyLayer's proxy logs write them.
const (
	RuleHidden      = "(hidden)"
	RuleDefaultDeny = "(default deny)"
)

// Call is one tool call as the evaluator sees it.
type Call struct {
	TS    time.Time
	Tool  string
	Grant string
	// Session is the protocol session the gateway saw and counts a limit
	// per session by; empty for a call without one, which counts under its
	// grant.
	Session string
	Agent   string
	// Args are the call's argument values, nil when unknown. mcptrail stores
	// them only with ingest.store_args (off by default), so usually they are
	// nil and conditions over arguments cannot be evaluated.
	Args map[string]any
	// Refused, for a call with unknown Args, is what the gateway's refusal
	// of it by a conditional rule tells of them (Refusals): a deny_if entry
	// with the same conditions matches the call, a require condition the
	// same as the failed one fails it. Ignored when Args is set.
	Refused *Refusal
}

// Verdict is what a policy decides for a call.
type Verdict struct {
	Decision string // Allowed, Denied, Hidden, ApprovalRequired or RateLimited
	// Rule is the JSON pointer of the rule that decided ("/tools/x/deny_if/0",
	// "/tools/x/require/0", "/tools/x/limits/<counter>" or
	// "/all_tools/limits/<counter>" as in gateway logs), RuleHidden or
	// RuleDefaultDeny; empty for an allowed call where no rule fired.
	Rule   string
	Reason string // the message the agent would see
}

// Evaluator decides calls against one policy, the same way for `mcptrail
// replay` and for the recommender's replay of a proposed policy.
//
// Semantics (SPEC §4): a hidden tool is "hidden"; a tool not listed under tools
// is "denied" by a default-deny policy; then the tool's rules and then the
// all_tools rules: `require` (every predicate must hold) and `deny_if` (the
// first matching entry denies; one with no conditions asks for approval), and
// last the limits, per-tool and all_tools together. Conditions over arguments
// are evaluated only when Call.Args is set: with unknown arguments a `require`
// or conditional `deny_if` neither allows nor denies, it is skipped, unless
// Call.Refused says the gateway refused the call by the same conditions.
//
// Limits count calls in fixed, calendar-aligned UTC windows per scope key (the
// call's grant, session or agent; a call lacking its session or agent counts
// under its grant, and under "" when the grant is missing too). A call that the
// policy lets through consumes quota in every applicable counter; a call
// refused by a limit consumes none. Calls must be fed in time order; a call
// older than the current window is counted in the current window. Only the
// current window's counters are kept, so memory is bounded by the keys active
// in one window.
//
// An Evaluator is not safe for concurrent use.
type Evaluator struct {
	hidden  map[string]bool
	hideAll bool
	deny    bool
	tools   map[string]*compiledRule
	all     *compiledRule
	windows [3]window // minute, hour, day
}

type compiledRule struct {
	require []compiledCond
	denyIf  []compiledDeny
	limits  []compiledLimit
}

type compiledCond struct {
	pointer string
	text    string   // "args.amount gt 10000", for reasons
	key     string   // ConditionKey, to match a Refusal
	keys    []string // path below args
	op      string
	value   any
	re      *regexp.Regexp
	bad     bool // invalid condition (Validate reports it); never matches
}

type compiledDeny struct {
	pointer string
	onDeny  string
	conds   []compiledCond
	key     string // ConditionsKey, to match a Refusal
}

type compiledLimit struct {
	pointer string
	counter string
	window  int // index into Evaluator.windows
	max     int
	scope   string
}

// window holds the counters of every limit with one window length. Windows are
// calendar-aligned, so all of them share the same current window, and moving
// to the next one drops every past counter at once.
type window struct {
	start  time.Time
	valid  bool
	counts map[string]int
}

// NewEvaluator compiles p. It expects a validated policy: a limit with an
// unknown window is ignored and an invalid condition never matches. A nil
// policy denies every call, as PolicyLayer does for a grant without a policy.
func NewEvaluator(p *Policy) *Evaluator {
	e := &Evaluator{hidden: map[string]bool{}, tools: map[string]*compiledRule{}}
	if p == nil {
		e.deny = true
		return e
	}
	e.deny = p.Default != DefaultAllow
	for _, name := range p.Hide {
		e.hidden[name] = true
		e.hideAll = e.hideAll || name == HideAll
	}
	for name, r := range p.Tools {
		e.tools[name] = compileRule(ToolPointer(name), r)
	}
	if p.AllTools != nil {
		e.all = compileRule("/all_tools", p.AllTools)
	}
	return e
}

func compileRule(base string, r *ToolRule) *compiledRule {
	c := &compiledRule{}
	if r == nil {
		return c
	}
	for i, cond := range r.Require {
		c.require = append(c.require, compileCond(base+"/require/"+strconv.Itoa(i), cond))
	}
	for i, d := range r.DenyIf {
		cd := compiledDeny{pointer: base + "/deny_if/" + strconv.Itoa(i), onDeny: d.OnDeny, key: ConditionsKey(d.Conditions)}
		for j, cond := range d.Conditions {
			cd.conds = append(cd.conds, compileCond(cd.pointer+"/conditions/"+strconv.Itoa(j), cond))
		}
		c.denyIf = append(c.denyIf, cd)
	}
	for i, l := range r.Limits {
		w := slices.Index(Windows, l.Window)
		if w < 0 {
			continue
		}
		// Gateways name a limit by its counter: /tools/x/limits/x_rate.
		c.limits = append(c.limits, compiledLimit{
			pointer: LimitPointer(base, i, l),
			counter: l.Counter,
			window:  w,
			max:     l.Max,
			scope:   l.EffectiveScope(),
		})
	}
	return c
}

func compileCond(pointer string, c Condition) compiledCond {
	cc := compiledCond{pointer: pointer, op: c.Op, text: ConditionText(c), key: ConditionKey(c)}
	rest, ok := strings.CutPrefix(c.Path, "args.")
	if !ok || rest == "" || !slices.Contains(Ops, c.Op) {
		cc.bad = true
		return cc
	}
	cc.keys = strings.Split(rest, ".")
	if c.Value != nil {
		v, err := conditionValueOf(c.Value)
		if err != nil {
			cc.bad = true
			return cc
		}
		cc.value = v
	}
	if c.Op == "regex" {
		s, _ := cc.value.(string)
		re, err := regexp.Compile(s)
		if err != nil {
			cc.bad = true
			return cc
		}
		cc.re = re
	}
	return cc
}

// conditionValue is a condition's value as Intercept holds it once written
// as YAML (valueNode): an integer at the top an int64, every other number a
// float64. It matters where a value is compared as text: Intercept prints
// an int's digits (1000000) and a float the shortest way (1e+06), so the
// argument "1000000" equals the value 1000000 and "1e+06" does not.
func conditionValue(v any, nested bool) any {
	switch t := v.(type) {
	case json.Number:
		return numberValue(t, nested)
	case []any:
		for i, e := range t {
			t[i] = conditionValue(e, true)
		}
	case map[string]any:
		for k, e := range t {
			t[k] = conditionValue(e, true)
		}
	}
	return v
}

// conditionValueOf decodes a condition's value as conditionValue holds it.
func conditionValueOf(raw json.RawMessage) (any, error) {
	var v any
	if err := unmarshalNumbers(raw, &v); err != nil {
		return nil, err
	}
	return conditionValue(v, false), nil
}

// numberValue is a number of a condition's value as Intercept holds it
// once written as YAML: an int64 when it is an integer at the top, else a
// float64. The Intercept output (valueNode) and the evaluator
// (conditionValue) both follow it, so that they compare alike.
func numberValue(n json.Number, nested bool) any {
	if i, err := n.Int64(); err == nil && !nested {
		return i
	}
	f, _ := n.Float64()
	return f
}

// Evaluate decides c and, when the policy lets it through, consumes its quota.
func (e *Evaluator) Evaluate(c Call) Verdict { return e.decide(c, true) }

// Peek decides c as Evaluate would, consuming no quota: what the policy does
// with a call, not what it does with one more.
func (e *Evaluator) Peek(c Call) Verdict { return e.decide(c, false) }

func (e *Evaluator) decide(c Call, spend bool) Verdict {
	if e.hideAll || e.hidden[c.Tool] {
		return Verdict{Decision: Hidden, Rule: RuleHidden, Reason: fmt.Sprintf("tool %q is hidden by the policy", c.Tool)}
	}
	rule, listed := e.tools[c.Tool]
	if !listed && e.deny {
		return Verdict{Decision: Denied, Rule: RuleDefaultDeny, Reason: fmt.Sprintf("tool %q is not listed and the policy denies by default", c.Tool)}
	}
	// The tool's own rules first, then the all_tools rules, as Intercept does.
	for _, r := range []*compiledRule{rule, e.all} {
		if r == nil {
			continue
		}
		if v, decided := r.check(c); decided {
			return v
		}
	}
	return e.consume(c, rule, spend)
}

// check applies require and deny_if. With unknown arguments only what
// c.Refused tells of them decides a condition; the others are skipped.
func (r *compiledRule) check(c Call) (Verdict, bool) {
	for _, cond := range r.require {
		failed := c.Args == nil && c.Refused != nil && c.Refused.failed == cond.key
		if failed || (c.Args != nil && !cond.holds(c.Args)) {
			return Verdict{Decision: Denied, Rule: cond.pointer, Reason: "required condition not met: " + cond.text}, true
		}
	}
	for _, d := range r.denyIf {
		if len(d.conds) == 0 {
			reason := d.onDeny
			if reason == "" {
				reason = "Requires human approval."
			}
			return Verdict{Decision: ApprovalRequired, Rule: d.pointer, Reason: reason}, true
		}
		if c.Args == nil && (c.Refused == nil || c.Refused.matched != d.key) {
			continue // argument values unknown: cannot tell, so do not deny
		}
		if c.Args == nil || d.matches(c.Args) {
			reason := d.onDeny
			if reason == "" {
				reason = "denied by " + d.pointer
			}
			return Verdict{Decision: Denied, Rule: d.pointer, Reason: reason}, true
		}
	}
	return Verdict{}, false
}

func (d compiledDeny) matches(args map[string]any) bool {
	for _, cond := range d.conds {
		if !cond.holds(args) {
			return false
		}
	}
	return true
}

// consume checks every applicable limit and, only if all have room and
// spend is set, counts the call in each of them.
func (e *Evaluator) consume(c Call, rule *compiledRule, spend bool) Verdict {
	var limits []compiledLimit
	if rule != nil {
		limits = rule.limits
	}
	if e.all != nil {
		limits = append(slices.Clip(limits), e.all.limits...)
	}
	if len(limits) == 0 {
		return Verdict{Decision: Allowed}
	}
	keys := make([]string, len(limits))
	for i, l := range limits {
		w := e.roll(l.window, c.TS)
		keys[i] = l.pointer + "\x00" + scopeKey(l.scope, c)
		if w.counts[keys[i]] >= l.max {
			per := ""
			if l.scope != ScopeGrant {
				per = ", per " + l.scope
			}
			return Verdict{Decision: RateLimited, Rule: l.pointer,
				Reason: fmt.Sprintf("Rate limit of %d per %s reached (counter %s%s).", l.max, Windows[l.window], l.counter, per)}
		}
	}
	if spend {
		for i, l := range limits {
			e.windows[l.window].counts[keys[i]]++
		}
	}
	return Verdict{Decision: Allowed}
}

// roll moves window w to the one holding ts, dropping the past window's counters.
func (e *Evaluator) roll(w int, ts time.Time) *window {
	win := &e.windows[w]
	start := windowStart(ts, w)
	if !win.valid || start.After(win.start) {
		win.start, win.valid = start, true
		win.counts = map[string]int{}
	}
	return win
}

func windowStart(ts time.Time, w int) time.Time {
	ts = ts.UTC()
	switch w {
	case 0:
		return ts.Truncate(time.Minute)
	case 1:
		return ts.Truncate(time.Hour)
	}
	y, m, d := ts.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// scopeKey is the counter key of a call for a scope; the prefixes keep a
// session named like a grant from sharing its counter. A policy is attached
// to a grant, so each grant counts its own sessions and agents: a session
// or agent seen under two grants has a counter in each.
func scopeKey(scope string, c Call) string {
	switch {
	case scope == ScopeSession && c.Session != "":
		return "s:" + c.Grant + "\x00" + c.Session
	case scope == ScopeAgent && c.Agent != "":
		return "a:" + c.Grant + "\x00" + c.Agent
	}
	return "g:" + c.Grant
}

// holds evaluates one condition as Intercept's engine does: exists holds
// for a value that is present and not null; numbers are compared
// numerically when both sides are JSON numbers (a string is never read as
// one), eq otherwise compares their text; a missing argument fails every op
// except exists.
func (c compiledCond) holds(args map[string]any) bool {
	if c.bad {
		return false
	}
	actual, found := lookup(args, c.keys)
	if c.op == "exists" {
		want, ok := c.value.(bool)
		if !ok {
			want = true
		}
		return (found && actual != nil) == want
	}
	if !found {
		return false
	}
	switch c.op {
	case "eq":
		return equal(actual, c.value)
	case "neq":
		return !equal(actual, c.value)
	case "in", "not_in":
		list, _ := c.value.([]any)
		in := slices.ContainsFunc(list, func(v any) bool { return equal(actual, v) })
		return in == (c.op == "in")
	case "lt", "lte", "gt", "gte":
		a, ok1 := toFloat(actual)
		b, ok2 := toFloat(c.value)
		if !ok1 || !ok2 {
			return false
		}
		switch c.op {
		case "lt":
			return a < b
		case "lte":
			return a <= b
		case "gt":
			return a > b
		}
		return a >= b
	case "regex":
		s, ok := actual.(string)
		return ok && c.re != nil && c.re.MatchString(s)
	case "contains":
		switch a := actual.(type) {
		case string:
			s, ok := c.value.(string)
			return ok && strings.Contains(a, s)
		case []any:
			return slices.ContainsFunc(a, func(v any) bool { return equal(v, c.value) })
		}
	}
	return false
}

func lookup(args map[string]any, keys []string) (any, bool) {
	var cur any = args
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func equal(a, b any) bool {
	x, ok1 := toFloat(a)
	y, ok2 := toFloat(b)
	if ok1 && ok2 {
		return x == y
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint64:
		return float64(n), true
	}
	return 0, false
}
