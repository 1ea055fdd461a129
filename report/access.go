package report

import (
	"fmt"
	"sort"
	"time"
)

// maxAccessGrants bounds the grant columns of the last-accessed tables; the
// JSON report holds them all.
const maxAccessGrants = 8

// accessGrid is the last-accessed data as a tool × grant table.
type accessGrid struct {
	grants []string
	tools  []string
	cells  map[[2]string]LastAccess
	// more is how many grants were left out.
	more int
}

// lastAccessGrid lays out the report's last-accessed data: tools by name,
// the grants that called the most tools first (then by name), at most
// maxAccessGrants of them.
func lastAccessGrid(r *Report) accessGrid {
	g := accessGrid{cells: map[[2]string]LastAccess{}}
	toolSeen := map[string]bool{}
	grantTools := map[string]int{}
	for _, la := range r.LastAccess {
		if !toolSeen[la.Tool] {
			toolSeen[la.Tool] = true
			g.tools = append(g.tools, la.Tool)
		}
		if la.Grant == "" {
			continue
		}
		grantTools[la.Grant]++
		g.cells[[2]string{la.Tool, la.Grant}] = la
	}
	g.grants = byCount(grantTools)
	if len(g.grants) > maxAccessGrants {
		g.more = len(g.grants) - maxAccessGrants
		g.grants = g.grants[:maxAccessGrants]
	}
	return g
}

// access classes of a cell: allowed in the window, allowed only before it,
// only refused, never called.
const (
	accessRecent = "recent"
	accessStale  = "stale"
	accessNever  = "never"
	accessNone   = "none"
)

// cell says when a grant last had a tool allowed, relative to the window's
// end, and how that reads: recent (in the window), stale (before it),
// never (only refused) or none (no call).
func (g accessGrid) cell(tool, grant string, from, to time.Time) (text, class, title string) {
	la, ok := g.cells[[2]string{tool, grant}]
	if !ok {
		return "–", accessNone, fmt.Sprintf("%s never called %s", grant, tool)
	}
	inWindow := fmt.Sprintf("in the window %s allowed, %s refused", num(la.Allowed), num(la.Refused))
	if la.LastAllowed == nil {
		return "never", accessNever, fmt.Sprintf("%s was never allowed %s (last refused %s); %s", grant, tool, minute(*la.LastRefused), inWindow)
	}
	class = accessStale
	if la.LastAllowed.After(from) {
		class = accessRecent
	}
	return ago(to.Sub(*la.LastAllowed)), class, fmt.Sprintf("%s last called %s %s; %s", grant, tool, minute(*la.LastAllowed), inWindow)
}

// ago writes an age briefly: "<1 h ago", "5 h ago", "12 d ago".
func ago(d time.Duration) string {
	switch {
	case d < time.Hour:
		return "<1 h ago"
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int64(d/time.Hour))
	}
	return fmt.Sprintf("%d d ago", int64(d/(24*time.Hour)))
}

// accessSummary counts the grid's tool × grant pairs by class.
func (g accessGrid) accessSummary(from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, t := range g.tools {
		for _, gr := range g.grants {
			_, class, _ := g.cell(t, gr, from, to)
			out[class]++
		}
	}
	return out
}

// accessSentence sums up the last-accessed table.
func accessSentence(g accessGrid, from, to time.Time) string {
	c := g.accessSummary(from, to)
	s := fmt.Sprintf("When each grant last had each tool allowed, over the whole history up to %s (as IAM Access Analyzer shows last access per action): %s used in the window, %s used only before it, %s only ever refused.",
		minute(to), plural(int64(c[accessRecent]), "pair", "pairs"), num(int64(c[accessStale])), num(int64(c[accessNever])))
	if g.more > 0 {
		s += fmt.Sprintf(" %s more grants in the JSON report.", num(int64(g.more)))
	}
	return s
}

// limitText writes a limit as the policy does: "57 per day per session".
func limitText(l Limit) string { return fmt.Sprintf("%s %s", num(int64(l.Max)), limitUnit(l)) }

// limitSentence says how a tool's calls meet its proposed limit, in the
// limit's unit.
func limitSentence(l LimitPeak) string {
	return fmt.Sprintf("Calls of %s counted %s, as the proposed limit counts them: the %s peaked at %s (median), %s (p99) and %s at most; %s went over the proposed limit of %s, with %s beyond it.",
		code(l.Tool), limitUnit(l.Limit), scopeNoun(l.Limit.Scope, l.Scopes), trim(l.PeakP50), trim(l.PeakP99), trim(l.PeakMax),
		scopeNoun(l.Limit.Scope, l.ScopesOver), num(int64(l.Limit.Max)), plural(l.CallsOver, "call", "calls"))
}

// byCount lists a map's keys by their count, most first, then by name.
func byCount[N int | int64](counts map[string]N) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		return a < b
	})
	return keys
}
