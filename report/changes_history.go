package report

import (
	"time"

	"github.com/mcptrail/mcptrail/recommend"
)

// HistoryRef says that the finding lists of Changes come from the finding
// history: what the report's recorded run changed since the previous
// recorded run of recommend over the same server and grant.
type HistoryRef struct {
	PreviousRunAt time.Time `json:"previous_run_at"`
}

// historyChanges fills c's finding lists from the finding history (SPEC §5)
// when the report's run was recorded and some scope of it had a recorded
// run before; otherwise it leaves them to the comparison with the previous
// report. A scope (grant) recorded for the first time counts its open
// findings as new.
func historyChanges(c *Changes, reports []*recommend.Report) {
	var previous time.Time
	for _, r := range reports {
		if r == nil || r.Recorded == nil {
			return
		}
		if r.Recorded.PreviousAt.After(previous) {
			previous = r.Recorded.PreviousAt
		}
	}
	if previous.IsZero() {
		return
	}
	c.History = &HistoryRef{PreviousRunAt: previous}
	c.NewFindings, c.ResolvedFindings, c.SuppressedFindings, c.ReopenedFindings = []FindingRef{}, []FindingRef{}, []FindingRef{}, []FindingRef{}
	c.AcceptedFindings = nil
	for _, r := range reports {
		found := map[string]FindingRef{}
		for _, f := range r.Findings {
			ref := FindingRef{ID: f.ID, Kind: f.Kind, Tool: f.Tool, Severity: f.Severity, Summary: f.Summary}
			found[f.ID] = ref
			if h := f.History; h != nil && h.State == recommend.StateOpen && (h.New || r.Recorded.PreviousRunID == 0) {
				c.NewFindings = append(c.NewFindings, ref)
			}
		}
		for _, g := range r.Recorded.Gone {
			found[g.ID] = FindingRef{ID: g.ID, Kind: g.Kind, Tool: g.Tool, Severity: g.Severity, Summary: g.Summary}
		}
		for _, t := range r.Recorded.Transitions {
			ref := found[t.FindingID]
			switch {
			case t.From == "":
			case t.To == recommend.StateDismissed:
				c.SuppressedFindings = append(c.SuppressedFindings, ref)
			case (t.From == recommend.StateDismissed || t.From == recommend.StateAccepted) && t.To == recommend.StateOpen:
				// A suppression ended, or the current policy no longer
				// holds an accepted change: access widened again.
				c.ReopenedFindings = append(c.ReopenedFindings, ref)
			case t.To == recommend.StateAccepted:
				c.AcceptedFindings = append(c.AcceptedFindings, ref)
			case t.To == recommend.StateResolved && t.From != recommend.StateDismissed:
				c.ResolvedFindings = append(c.ResolvedFindings, ref)
			}
		}
	}
}
