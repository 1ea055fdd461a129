package policy

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Refusal is what a gateway's refusal of a call by a conditional rule tells of
// the call's arguments when they were not recorded: the deny_if entry whose
// conditions all held for them, or the require condition that did not hold.
// The same conditions decide the same arguments the same way, so a policy that
// keeps them refuses the call again (Call.Refused).
type Refusal struct {
	matched string // ConditionsKey of the deny_if entry that matched
	failed  string // ConditionKey of the require condition that failed
}

// Refusals maps the JSON pointer of every conditional rule of p (a deny_if
// entry with conditions, a require condition), as a gateway enforcing p
// records it in an event's rule, to what that refusal tells of a call's
// arguments. nil for a nil policy.
func Refusals(p *Policy) map[string]*Refusal {
	if p == nil {
		return nil
	}
	out := map[string]*Refusal{}
	add := func(base string, r *ToolRule) {
		if r == nil {
			return
		}
		for i, c := range r.Require {
			out[base+"/require/"+strconv.Itoa(i)] = &Refusal{failed: ConditionKey(c)}
		}
		for i, d := range r.DenyIf {
			if !d.IsApproval() {
				out[base+"/deny_if/"+strconv.Itoa(i)] = &Refusal{matched: ConditionsKey(d.Conditions)}
			}
		}
	}
	for name, r := range p.Tools {
		add(ToolPointer(name), r)
	}
	add("/all_tools", p.AllTools)
	return out
}

// ConditionKey names a condition by what it tests, so that two spellings of
// one value (whitespace, key order, 1e4 and 1.0e4; for lt…gte 10000 too)
// name the same condition, and two values the evaluator tells apart never
// do: where a value may be compared as text, an integer written as one
// (10000) compares by its digits and any other number (1e4) as a float
// (conditionValue), so they are keyed apart.
func ConditionKey(c Condition) string {
	value := string(c.Value)
	if c.Value != nil {
		if v, err := conditionValueOf(c.Value); err == nil {
			if b, err := json.Marshal(v); err == nil {
				value = string(b)
				if _, float := v.(float64); float && textCompared(c.Op) {
					value = "f:" + value
				}
			}
		}
	}
	return c.Path + "\x00" + c.Op + "\x00" + value
}

// textCompared tells the ops that may compare a top-level value as text
// (a string argument against a number), where an integer and a float of
// one value differ; lt…gte compare numbers alone.
func textCompared(op string) bool { return op == "eq" || op == "neq" || op == "contains" }

// ConditionsKey names a deny_if entry's conditions, which all must hold, in
// any order.
func ConditionsKey(cs []Condition) string {
	keys := make([]string, len(cs))
	for i, c := range cs {
		keys[i] = ConditionKey(c)
	}
	slices.Sort(keys)
	return strings.Join(keys, "\x01")
}
