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
// one value (whitespace, key order, 1e4 and 10000) name the same condition.
func ConditionKey(c Condition) string {
	value := string(c.Value)
	var v any
	if c.Value != nil && json.Unmarshal(c.Value, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			value = string(b)
		}
	}
	return c.Path + "\x00" + c.Op + "\x00" + value
}

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
