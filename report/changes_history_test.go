package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// TestHistoryChanges: a recorded run with a previous run lists the finding
// changes the history logged; an unrecorded or first run leaves the lists
// to the previous report.
func TestHistoryChanges(t *testing.T) {
	t1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	r := &recommend.Report{Findings: []recommend.Finding{
		{ID: "n", Tool: "new", History: &recommend.History{State: recommend.StateOpen, New: true}},
		{ID: "k", Tool: "kept", History: &recommend.History{State: recommend.StateOpen}},
		{ID: "s", Tool: "muted", History: &recommend.History{State: recommend.StateDismissed, Changed: true}},
		{ID: "a", Tool: "taken", History: &recommend.History{State: recommend.StateAccepted, Changed: true}},
		{ID: "w", Tool: "widened", History: &recommend.History{State: recommend.StateOpen, Changed: true}},
	}, Recorded: &recommend.Recorded{RunID: 2, PreviousRunID: 1, PreviousAt: t1,
		Gone: []analytics.FindingRecord{{ID: "g", Tool: "gone", State: recommend.StateResolved}},
		Transitions: []analytics.FindingTransition{{FindingID: "n", To: "open"}, {FindingID: "s", From: "open", To: "dismissed"},
			{FindingID: "a", From: "open", To: "accepted"}, {FindingID: "g", From: "open", To: "resolved"},
			{FindingID: "w", From: "accepted", To: "open"}}}}

	var c Changes
	historyChanges(&c, []*recommend.Report{r})
	require.NotNil(t, c.History)
	assert.Equal(t, t1, c.History.PreviousRunAt)
	tools := func(refs []FindingRef) []string {
		out := []string{}
		for _, f := range refs {
			out = append(out, f.Tool)
		}
		return out
	}
	assert.Equal(t, []string{"new"}, tools(c.NewFindings))
	assert.Equal(t, []string{"gone"}, tools(c.ResolvedFindings))
	assert.Equal(t, []string{"muted"}, tools(c.SuppressedFindings))
	assert.Equal(t, []string{"taken"}, tools(c.AcceptedFindings))
	assert.Equal(t, []string{"widened"}, tools(c.ReopenedFindings), "the policy no longer holds its accepted change")

	first := &recommend.Report{Recorded: &recommend.Recorded{RunID: 1}}
	var untouched Changes
	historyChanges(&untouched, []*recommend.Report{first})
	assert.Nil(t, untouched.History, "a first recorded run has nothing to compare with")
	historyChanges(&untouched, []*recommend.Report{{}})
	assert.Nil(t, untouched.History, "an unrecorded run leaves the report's comparison")
}
