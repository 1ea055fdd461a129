package recommend

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/policy"
)

// Access levels of a tool under a policy, from the narrowest.
const (
	accHidden = iota
	accDenied
	accApproval
	accAllowed
)

var accessWords = []string{"hidden", "denied", "approval", "allowed"}

// access is what a policy lets a tool do: its level, and for a tool that
// passes its rules the limits that count its calls (its own and all_tools').
type access struct {
	level       int
	limits      []namedLimit
	conditional bool // require, or deny_if with conditions
	// conditions name each require condition and conditional deny_if entry
	// by what it tests (policy.ConditionKey, ConditionsKey), with its text.
	conditions map[string]string
}

// namedLimit is a limit with the pointer that names it in its policy.
type namedLimit struct {
	pointer string
	policy.Limit
}

func accessOf(p *policy.Policy, tool string) access {
	if p.Hidden(tool) {
		return access{level: accHidden}
	}
	r, listed := p.Tools[tool]
	if !listed && p.Default != policy.DefaultAllow {
		return access{level: accDenied}
	}
	a := access{level: accAllowed}
	// In the evaluator's order (policy.Evaluator): the tool's own rule,
	// then all_tools'; in each, require, then deny_if entry by entry. An
	// approval entry decides every call that reaches it, so what comes
	// after it (later entries, and all_tools' rule behind a tool's
	// approval) refuses nothing and is no condition kept.
	for _, rule := range []struct {
		base string
		r    *policy.ToolRule
	}{{policy.ToolPointer(tool), r}, {"/all_tools", p.AllTools}} {
		if rule.r == nil {
			continue
		}
		condition := func(key, text string) {
			a.conditional = true
			if a.conditions == nil {
				a.conditions = map[string]string{}
			}
			a.conditions[key] = text
		}
		for _, c := range rule.r.Require {
			condition("require "+policy.ConditionKey(c), "require "+policy.ConditionText(c))
		}
		for _, d := range rule.r.DenyIf {
			if d.IsApproval() {
				a.level = accApproval
				break
			}
			condition("deny_if "+policy.ConditionsKey(d.Conditions), "deny_if "+policy.ConditionsText(d.Conditions))
		}
		if a.level == accApproval {
			break
		}
		for _, l := range rule.r.Limits {
			a.limits = append(a.limits, namedLimit{pointer: rule.base + "/limits/" + l.Counter, Limit: l})
		}
	}
	if a.level != accAllowed {
		a.limits = nil
	}
	return a
}

// inOutput opens what a change of one output format ends with: "limit
// removed: … (in the intercept output)" (gatewayLoosenings).
const inOutput = " (in the "

// WideningKinds are the kinds of a loosening's changes, from its evidence
// ("denied → allowed", "denied → allowed without a limit", "limit raised",
// "scope broadened (in the intercept output)"), sorted, without their figures, which move with the traffic
// from run to run: what tells one widening of a tool from another. A
// removed condition or limit keeps its text, which names the rule removed,
// a raised or broadened limit the current limit it widens, and a broadened
// one the scope it is counted over instead.
func WideningKinds(evidence map[string]any) []string {
	var changes []string
	switch c := evidence["changes"].(type) {
	case []string: // this run's
		changes = c
	case []any: // a recommendations.json's
		for _, v := range c {
			changes = append(changes, fmt.Sprint(v))
		}
	}
	kinds := make([]string, 0, len(changes))
	for _, c := range changes {
		kind, _, _ := strings.Cut(c, ":")
		switch kind {
		case "condition removed", "limit removed", "field removed":
			// What follows names a rule (or field) of the policy, not a
			// figure of the traffic: another removed is another widening.
			kinds = append(kinds, c)
			continue
		case "limit raised":
			// The current limit before the arrow is a rule; the proposed
			// one after it moves with the traffic.
			kind, _, _ = strings.Cut(c, " → ")
		case "scope broadened":
			// So does its figure, but the scope it counts over is what the
			// proposal widens to: per session accepted is not per agent.
			before, after, _ := strings.Cut(c, " → ")
			after, _, _ = strings.Cut(after, inOutput)
			kind = before
			if i := strings.LastIndex(after, " per "); i >= 0 {
				kind += " → per " + after[i+len(" per "):]
			}
		}
		if _, in, ok := strings.Cut(c, inOutput); ok {
			kind += inOutput + in
		}
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	return slices.Compact(kinds)
}

// WideningCovered reports whether every kind of a loosening's changes is
// among those accepted: a widening of another kind is not. An allowance
// without a limit, accepted, covers the same allowance under a limit,
// which lets fewer calls through.
func WideningCovered(kinds, accepted []string) bool {
	for _, k := range kinds {
		if !slices.Contains(accepted, k) && !slices.Contains(accepted, k+withoutLimit) {
			return false
		}
	}
	return true
}

// LimitText writes a limit as "100/minute per grant".
func LimitText(l policy.Limit) string {
	return fmt.Sprintf("%d/%s per %s", l.Max, l.Window, l.EffectiveScope())
}

// RuleText describes what a policy does with a tool: "hidden", "denied",
// "approval", "allowed", with its limits ("allowed, 100/minute per grant;
// all tools 60/minute per grant") and conditions. A nil policy gives "".
func RuleText(p *policy.Policy, tool string) string {
	if p == nil {
		return ""
	}
	a := accessOf(p, tool)
	s := accessWords[a.level]
	if a.conditional && a.level >= accApproval {
		s += " with conditions"
	}
	var parts []string
	for _, l := range a.limits {
		t := LimitText(l.Limit)
		if strings.HasPrefix(l.pointer, "/all_tools/") {
			t = "all tools " + t
		}
		parts = append(parts, t)
	}
	if len(parts) > 0 {
		s += ", " + strings.Join(parts, "; ")
	}
	return s
}

// narrowerOrSame reports whether a limit counted per scope b lets no more
// calls through than one counted per scope a: the same scope, or one
// counter per grant, which no other scope undercuts. The others do not
// order: per agent gives each agent one quota where per session gives each
// of its sessions one, but a call without a protocol session counts under
// its grant (SPEC §4), so for stateless traffic a per-session limit is a
// per-grant one that a per-agent limit multiplies; and one per gateway
// instance (Intercept's state store) multiplies a grant's by the instances
// it reaches.
func narrowerOrSame(b, a string) bool {
	return b == a || b == policy.ScopeGrant
}

var windowSeconds = map[string]int64{policy.WindowMinute: 60, policy.WindowHour: 3600, policy.WindowDay: 86400}

// capacity is the most calls a limit lets through in a span of w seconds.
func capacity(l policy.Limit, w int64) int64 {
	lw := windowSeconds[l.Window]
	if lw == 0 || lw >= w {
		return int64(l.Max)
	}
	return int64(l.Max) * (w / lw)
}

// raised reports whether b lets more calls through than a in some span.
func raised(a, b policy.Limit) bool {
	for _, w := range windowSeconds {
		if capacity(b, w) > capacity(a, w) {
			return true
		}
	}
	return false
}

// covers reports whether b is at least as strict as a: a scope no broader
// (narrowerOrSame) and no more calls in any span.
func covers(b, a policy.Limit) bool {
	return narrowerOrSame(b.EffectiveScope(), a.EffectiveScope()) && !raised(a, b)
}

// coversNamed is covers for limits of a policy: a limit of all_tools counts
// every tool's calls on one counter, which only another such limit covers
// (the tools' own limits together let through their sum).
func coversNamed(b, a namedLimit) bool {
	return covers(b.Limit, a.Limit) && (allToolsLimit(b) || !allToolsLimit(a))
}

func allToolsLimit(l namedLimit) bool { return strings.HasPrefix(l.pointer, "/all_tools/") }

// Loosenings lists how the proposed policy widens a tool's access compared
// with the current one: a refusal turned into approval or allowance, a limit
// raised, removed or counted over a broader scope, conditions dropped. Both
// policies must be known.
func Loosenings(current, proposed *policy.Policy, tool string) []string {
	if current == nil || proposed == nil {
		return nil
	}
	a, b := accessOf(current, tool), accessOf(proposed, tool)
	var out []string
	if b.level > a.level {
		out = append(out, accessWords[a.level]+" → "+accessWords[b.level]+unlimited(b))
	}
	if a.conditional && b.level >= accApproval && a.level >= accApproval {
		// Each rule removed by its text, so that accepting one removal
		// (a suppression's covers) accepts no other.
		var gone []string
		for k, text := range a.conditions {
			if _, kept := b.conditions[k]; !kept {
				gone = append(gone, text)
			}
		}
		slices.Sort(gone)
		for _, text := range gone {
			out = append(out, "condition removed: "+text)
		}
	}
	if a.level != accAllowed || b.level != accAllowed {
		return out
	}
	for _, old := range a.limits {
		i := slices.IndexFunc(b.limits, func(n namedLimit) bool { return n.pointer == old.pointer })
		if i < 0 {
			if !slices.ContainsFunc(b.limits, func(n namedLimit) bool { return coversNamed(n, old) }) {
				out = append(out, "limit removed: "+limitName(old))
			}
			continue
		}
		nl := b.limits[i].Limit
		if raised(old.Limit, nl) {
			out = append(out, fmt.Sprintf("limit raised: %s → %s", limitName(old), LimitText(nl)))
		}
		if !narrowerOrSame(nl.EffectiveScope(), old.EffectiveScope()) {
			out = append(out, fmt.Sprintf("scope broadened: %s → %s", limitName(old), LimitText(nl)))
		}
	}
	return out
}

// withoutLimit ends the change that allows a tool no limit counts: an
// allowance under a limit, once accepted (a suppression's or baseline's
// covers), must not cover a later proposal that lets every call through.
const withoutLimit = " without a limit"

// unlimited is withoutLimit for an access that allows with no limit, else "".
func unlimited(b access) string {
	if b.level == accAllowed && len(b.limits) == 0 {
		return withoutLimit
	}
	return ""
}

func limitName(l namedLimit) string {
	if allToolsLimit(l) {
		return "all tools " + LimitText(l.Limit)
	}
	return LimitText(l.Limit)
}

// observedText describes a tool's calls in the window, for when the current
// policy is unknown: "observed: allowed 4, denied 71".
func observedText(u *usage) string {
	if u == nil || u.Calls == 0 {
		return "no calls"
	}
	var parts []string
	for _, c := range []struct {
		n    int64
		word string
	}{{u.Allowed, "allowed"}, {u.Approval, "approval"}, {u.RateLimited, "rate-limited"}, {u.Denied, "denied"}, {u.Hidden, "hidden"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", c.word, GroupDigits(c.n)))
		}
	}
	return "observed: " + strings.Join(parts, ", ")
}

// observedLoosenings infers from the window's calls how the proposal widens
// a tool's access when the current policy is unknown.
func observedLoosenings(u *usage, proposed *policy.Policy, tool string, newly int64) []string {
	if u == nil {
		return nil
	}
	b := accessOf(proposed, tool)
	var out []string
	if b.level >= accApproval {
		if u.Hidden > 0 {
			out = append(out, "hidden → "+accessWords[b.level]+unlimited(b))
		}
		if u.Denied > 0 {
			out = append(out, "denied → "+accessWords[b.level]+unlimited(b))
		}
	}
	if b.level == accAllowed && u.Approval > 0 {
		out = append(out, "approval → allowed"+unlimited(b))
	}
	if b.level == accAllowed && u.RateLimited > 0 && newly > 0 {
		out = append(out, "rate-limited calls pass: a limit raised or removed")
	}
	return out
}

// RuleChange is what the proposal does to one tool, before and after.
type RuleChange struct {
	Tool     string `json:"tool"`
	Current  string `json:"current"`
	Proposed string `json:"proposed"`
	Widens   bool   `json:"widens"`
}

// detectLoosenings compares the proposal with the current policy (or, when
// that is unknown, with the window's decisions) and the replay: every tool
// whose access widens is a finding of its own.
func (s *state) detectLoosenings(proposed *policy.Policy, replay *Replay) []RuleChange {
	cur := s.opts.Current
	set := map[string]bool{}
	for t := range s.usage {
		set[t] = true
	}
	for _, p := range []*policy.Policy{cur, proposed} {
		if p == nil {
			continue
		}
		for t := range p.Tools {
			set[t] = true
		}
		for _, t := range p.Hide {
			if t != policy.HideAll {
				set[t] = true
			}
		}
	}
	changes := []RuleChange{}
	for _, t := range sortedKeys(set) {
		u := s.usage[t]
		var newly int64
		if tr := replay.ByTool[t]; tr != nil {
			newly = tr.NewlyAllowed
		}
		before := RuleText(cur, t)
		widen := Loosenings(cur, proposed, t)
		if cur == nil {
			before = observedText(u)
			widen = observedLoosenings(u, proposed, t, newly)
		}
		if newly > 0 && len(widen) == 0 {
			widen = append(widen, "calls refused then pass")
		}
		after := RuleText(proposed, t)
		// A refused tool that the proposal hides stays refused: the hidden
		// tools are listed apart.
		quiet := before == accessWords[accDenied] && after == accessWords[accHidden]
		if before != after && !quiet && !(cur == nil && sameAsObserved(u, after)) {
			changes = append(changes, RuleChange{Tool: t, Current: before, Proposed: after, Widens: len(widen) > 0})
		}
		if len(widen) == 0 {
			continue
		}
		ev := map[string]any{"before": before, "after": after, "changes": widen, "newly_allowed": newly}
		var calls []string
		for _, call := range replay.FirstNewlyAllowed {
			if call.Tool == t {
				calls = append(calls, fmt.Sprintf("%s %s (%s)", call.TS.Format("2006-01-02T15:04:05Z"), call.ID, call.Recorded))
			}
		}
		if len(calls) > 0 {
			ev["first_newly_allowed"] = calls
		}
		summary := fmt.Sprintf("%s: the proposal widens access (%s)", t, strings.Join(widen, "; "))
		if newly > 0 {
			summary += fmt.Sprintf("; %s the gateway refused would pass", plural(newly, "call", "calls"))
		}
		s.add(s.looseningFinding(t, proposed, summary, ev))
	}
	return changes
}

// looseningFinding is the loosening of tool t under the policy p that
// widens it, with ev's evidence and the tool's category and SQL: severity
// medium, high for a risky tool p allows.
func (s *state) looseningFinding(t string, p *policy.Policy, summary string, ev map[string]any) Finding {
	c := s.classes[t]
	sev := string(catalog.SeverityMedium)
	if isRisky(c.Category) && accessOf(p, t).level == accAllowed {
		sev = string(catalog.SeverityHigh)
	}
	ev["category"], ev["sql"] = string(c.Category), s.looseningSQL(t)
	return Finding{Kind: KindLoosening, Tool: t, Severity: sev, Confidence: s.confid, Summary: summary, Evidence: ev,
		Action: Action{Op: OpWiden}}
}

// sameAsObserved reports whether a tool's calls were all decided the way the
// proposal decides them (or there were none), so that no change is shown.
func sameAsObserved(u *usage, after string) bool {
	if u == nil {
		return true
	}
	return (u.Hidden == u.Calls && after == accessWords[accHidden]) || (u.Denied == u.Calls && after == accessWords[accDenied]) ||
		(u.Approval == u.Calls && after == accessWords[accApproval])
}
