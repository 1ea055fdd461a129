package recommend

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
)

// Finding states in the finding history (SPEC §5, "Finding history").
const (
	StateOpen      = "open"      // proposed, not in the current policy
	StateAccepted  = "accepted"  // the current policy holds the proposed change
	StateDismissed = "dismissed" // suppressed (mcptrail suppress)
	StateResolved  = "resolved"  // a later run of its scope no longer found it
)

// FindingStates lists the states in the order they are explained.
var FindingStates = []string{StateOpen, StateAccepted, StateDismissed, StateResolved}

// History is a finding's place in the finding history, as a recorded run
// shows it. New and Changed compare with the previous recorded run of the
// same scope, so the first run of a scope marks nothing: there is nothing
// to compare with.
type History struct {
	State     string    `json:"state"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// New: the previous run did not find it (it is seen for the first time,
	// or again after it was resolved or accepted).
	New bool `json:"new"`
	// Changed: the previous run found it with another state, severity or
	// proposed change (for a loosening, another widening).
	Changed bool `json:"changed"`
}

// Recorded is what recording one run did to its scope's history.
type Recorded struct {
	RunID, PreviousRunID int64
	PreviousAt           time.Time // the previous run's now; zero for none
	// Transitions are the state changes the run logged.
	Transitions []analytics.FindingTransition
	// Gone are the scope's findings the run did not find whose state it
	// changed (to resolved or accepted), as recorded.
	Gone []analytics.FindingRecord
}

// AdvanceHistory is the state-transition logic of the finding history,
// without I/O: given the scope's history before the run (h), it returns
// the scope's findings after the run and the state changes to log, and
// marks r's findings (Finding.History, Report.Recorded). A finding the run
// found is dismissed when suppressed, accepted when the current policy
// already holds its change, and open otherwise; one it did not find
// becomes accepted when the current policy holds its change and resolved
// otherwise. It keeps first_seen; last_seen is the run's.
func AdvanceHistory(r *Report, h analytics.RunHistory) ([]analytics.FindingRecord, []analytics.FindingTransition) {
	at := r.Window.To.UTC()
	known := make(map[string]analytics.FindingRecord, len(h.Known))
	for _, k := range h.Known {
		known[k.ID] = k
	}
	rec := &Recorded{RunID: h.RunID, PreviousRunID: h.PreviousRunID, PreviousAt: h.PreviousAt}
	next := make([]analytics.FindingRecord, 0, len(r.Findings)+len(h.Known))
	found := make(map[string]bool, len(r.Findings))
	for i := range r.Findings {
		f := &r.Findings[i]
		if found[f.ID] {
			continue
		}
		found[f.ID] = true
		n := analytics.FindingRecord{ID: f.ID, Kind: f.Kind, Tool: f.Tool, State: f.observedState(r.Current), Severity: f.Severity,
			Summary: f.Summary, Action: actionKey(f.Action), FirstSeen: at, LastSeen: at, ChangedAt: at, LastRunID: h.RunID}
		if f.Kind == KindLoosening {
			n.Changes = WideningKinds(f.Evidence)
		}
		old, seen := known[f.ID]
		inPrevious := seen && h.PreviousRunID != 0 && old.LastRunID == h.PreviousRunID
		if seen {
			n.FirstSeen, n.ChangedAt = old.FirstSeen, old.ChangedAt
		}
		if !seen || old.State != n.State {
			n.ChangedAt = at
			rec.Transitions = append(rec.Transitions, analytics.FindingTransition{FindingID: f.ID, From: old.State, To: n.State})
		}
		// A loosening's action is always widen: what it widens is its
		// changes (unknown for one recorded before they were, nil), those
		// of the policy itself: a run for another output format adds or
		// drops that output's own, which is no change of the proposal.
		otherWidening := f.Kind == KindLoosening && old.Changes != nil &&
			!slices.Equal(policyWidenings(old.Changes), policyWidenings(n.Changes))
		f.History = &History{State: n.State, FirstSeen: n.FirstSeen, LastSeen: at,
			New:     h.PreviousRunID != 0 && !inPrevious,
			Changed: inPrevious && (old.State != n.State || old.Severity != n.Severity || old.Action != n.Action || otherWidening)}
		next = append(next, n)
	}
	for _, k := range h.Known {
		if found[k.ID] {
			continue
		}
		to := StateResolved
		if k.State != StateResolved && recordedInPolicy(k, r.Current) {
			to = StateAccepted
		}
		if k.State != to {
			rec.Transitions = append(rec.Transitions, analytics.FindingTransition{FindingID: k.ID, From: k.State, To: to})
			k.State, k.ChangedAt = to, at
			rec.Gone = append(rec.Gone, k)
		}
		next = append(next, k)
	}
	r.Recorded = rec
	return next, rec.Transitions
}

// observedState is the state of a finding a run found.
func (f Finding) observedState(current *policy.Policy) string {
	switch {
	case f.Suppressed != nil:
		return StateDismissed
	case f.InPolicy(current):
		return StateAccepted
	}
	return StateOpen
}

// recordedInPolicy is InPolicy for a finding as recorded (its action as JSON).
func recordedInPolicy(k analytics.FindingRecord, p *policy.Policy) bool {
	var a Action
	if json.Unmarshal([]byte(k.Action), &a) != nil {
		return false
	}
	return Finding{Tool: k.Tool, Action: a}.InPolicy(p)
}

// actionKey is the proposed change as the history compares it between runs.
func actionKey(a Action) string {
	b, err := json.Marshal(a)
	if err != nil {
		return a.Op
	}
	return string(b)
}

// InPolicy reports whether p already does what the finding proposes: hides
// the tool, holds it behind approval, limits it at most as much as the
// proposed limit in the same window and scope, allows it, or holds a
// regression's revert (the tool allowed with the rule restored). Findings that
// propose nothing (none) or widen access are never in a policy.
func (f Finding) InPolicy(p *policy.Policy) bool {
	if p == nil {
		return false
	}
	rule, listed := p.Tools[f.Tool]
	switch f.Action.Op {
	case OpHide:
		return p.Hidden(f.Tool)
	case OpRequireApproval:
		return listed && rule != nil && slices.ContainsFunc(rule.DenyIf, policy.DenyRule.IsApproval)
	case OpRateLimit:
		want := f.Action.Limit
		return want != nil && listed && rule != nil && slices.ContainsFunc(rule.Limits, func(l policy.Limit) bool {
			return l.Window == want.Window && l.EffectiveScope() == want.EffectiveScope() && l.Max <= want.Max
		})
	case OpAllow:
		return !p.Hidden(f.Tool) && (listed || p.Default == policy.DefaultAllow)
	case OpRevert:
		return revertInPolicy(f, p)
	}
	return false
}

// policyWidenings are the kinds of a loosening's changes that the proposal
// itself makes, without those of one output format ("… (in the intercept
// output)").
func policyWidenings(kinds []string) []string {
	return slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return strings.Contains(k, inOutput) })
}
