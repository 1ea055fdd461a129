package report

import (
	"sort"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

// changes compares the report with the previous one. log holds the
// suppression changes since the previous report's window ended (or since
// from, the start of this window, for the first report); a change at or
// after the report's end is left for the next one.
func changes(r *Report, prev *Report, prevFolder string, log []analytics.SuppressionChange, from time.Time) Changes {
	c := Changes{
		NewTools: []NewTool{}, GoneTools: []string{}, NewFindings: []FindingRef{}, ResolvedFindings: []FindingRef{},
		SuppressedFindings: []FindingRef{}, ReopenedFindings: []FindingRef{}, SuppressionChanges: []analytics.SuppressionChange{},
	}
	for _, ch := range log {
		if ch.At.Before(r.Window.To) {
			c.SuppressionChanges = append(c.SuppressionChanges, ch)
		}
	}
	baseline := from
	if prev != nil {
		c.Previous = &PreviousRef{Folder: prevFolder, GeneratedAt: prev.GeneratedAt, WindowTo: prev.Window.To}
		baseline = prev.Window.To
	}
	for _, t := range r.Tools {
		if t.FirstSeen.After(baseline) {
			c.NewTools = append(c.NewTools, NewTool{Tool: t.Tool, FirstSeen: t.FirstSeen, Calls: t.Calls})
		}
	}
	sort.SliceStable(c.NewTools, func(i, j int) bool {
		if !c.NewTools[i].FirstSeen.Equal(c.NewTools[j].FirstSeen) {
			return c.NewTools[i].FirstSeen.Before(c.NewTools[j].FirstSeen)
		}
		return c.NewTools[i].Tool < c.NewTools[j].Tool
	})
	if prev == nil {
		return c
	}

	used := map[string]bool{}
	for _, t := range r.Tools {
		if t.Allowed > 0 {
			used[t.Tool] = true
		}
	}
	for _, t := range prev.Tools {
		if t.Allowed > 0 && !used[t.Tool] {
			c.GoneTools = append(c.GoneTools, t.Tool)
		}
	}
	sort.Strings(c.GoneTools)

	before := map[string]Finding{}
	for _, f := range prev.Recommendation.Findings {
		before[f.ID] = f
	}
	now := map[string]bool{}
	for _, f := range r.Recommendation.Findings {
		now[f.ID] = true
		old, seen := before[f.ID]
		switch {
		case !seen && !f.Suppressed:
			c.NewFindings = append(c.NewFindings, ref(f))
		case seen && !old.Suppressed && f.Suppressed:
			c.SuppressedFindings = append(c.SuppressedFindings, ref(f))
		case seen && old.Suppressed && !f.Suppressed:
			c.ReopenedFindings = append(c.ReopenedFindings, ref(f))
		}
	}
	for _, f := range prev.Recommendation.Findings {
		if !now[f.ID] && !f.Suppressed {
			c.ResolvedFindings = append(c.ResolvedFindings, ref(f))
		}
	}
	return c
}

func ref(f Finding) FindingRef {
	return FindingRef{ID: f.ID, Kind: f.Kind, Tool: f.Tool, Severity: f.Severity, Summary: f.Summary}
}
