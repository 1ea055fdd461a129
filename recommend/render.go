package recommend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/render"
)

// Output formats of `mcptrail recommend` (SPEC §5).
var Formats = []string{"text", "json", "markdown", "policy", "diff", "intercept"}

// ParseFormat validates a --format value.
func ParseFormat(s string) (string, error) { return render.Choice(s, Formats) }

// Write renders the report in format f. color adds ANSI colours to text.
func Write(w io.Writer, r *Report, f string, color bool) error {
	switch f {
	case "json":
		return writeJSON(w, r)
	case "markdown":
		_, err := io.WriteString(w, Markdown(r))
		return err
	case "policy":
		b, err := r.Policy.Canonical()
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "diff":
		_, err := io.WriteString(w, Diff(r))
		return err
	case "intercept":
		return WriteIntercept(w, nil, r, false) // intercept.go
	}
	_, err := io.WriteString(w, Text(r, color))
	return err
}

func writeJSON(w io.Writer, r *Report) error { return encodeJSON(w, r) }

// encodeJSON writes v indented, in one Write once all of it is encoded
// (json.Encoder's own way): w never sees part of a value, and the 2.3 MB
// of a 4-grant set are not copied through another buffer on the way.
func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode recommendation: %w", err)
	}
	return nil
}

// Diff is the unified diff of the current policy's canonical JSON against
// the proposed one ("current" is empty when unknown).
func Diff(r *Report) string { return diffOf(r, "current/policy.json", "proposed/policy.json") }

func diffOf(r *Report, from, to string) string {
	return policy.UnifiedDiff(r.Current, r.Policy, from, to)
}

// WriteFolder writes the PR-ready folder: policy.json, policy.diff, PR.md and
// recommendations.json.
func WriteFolder(dir string, r *Report) error {
	pol, err := r.Policy.Canonical()
	if err != nil {
		return err
	}
	var js bytes.Buffer
	if err := writeJSON(&js, r); err != nil {
		return err
	}
	return writeFiles(dir, []folderFile{
		{"policy.json", pol},
		{"policy.diff", []byte(Diff(r))},
		{"PR.md", []byte(Markdown(r))},
		{"recommendations.json", js.Bytes()},
	})
}

// Counts of the changes the proposal makes.
type changeCounts struct {
	hide, approval, limits, reported, suppressed, widen, regressions int
}

func countChanges(r *Report) changeCounts {
	var c changeCounts
	for _, f := range r.Findings {
		if f.Suppressed != nil {
			c.suppressed++
			continue
		}
		switch f.Action.Op {
		case OpHide:
			c.hide++
		case OpRequireApproval:
			c.approval++
		case OpRateLimit:
			c.limits++
		case OpWiden:
			c.widen++
		case OpRevert:
			c.regressions++
		default:
			c.reported++
		}
	}
	return c
}

// ReplaySentence says what the proposed policy would have done, e.g.
// "would have rate-limited 1,843 of 212,400 calls, all in 3 runaway sessions".
func ReplaySentence(r *Replay) string {
	var parts []string
	add := func(n int64, verb string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", verb, GroupDigits(n)))
		}
	}
	add(r.RateLimited, "rate-limited")
	add(r.ApprovalRequired, "held for approval")
	add(r.Hidden, "refused as hidden")
	add(r.Denied, "denied")
	// The other side, calls the gateway refused that would pass, is said
	// whatever else the policy does: a widening is never left out.
	newly := ""
	if r.NewlyAllowed > 0 {
		newly = fmt.Sprintf("; %s the gateway refused would pass", plural(r.NewlyAllowed, "call", "calls"))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("would have allowed all %s calls", GroupDigits(r.Calls)) + newly
	}
	s := "would have " + strings.Join(parts, ", ") + " of " + GroupDigits(r.Calls) + " calls"
	if r.RateLimited > 0 && r.RateLimitedSessions > 0 {
		if r.RunawaySessions == r.RateLimitedSessions {
			s += fmt.Sprintf(", the rate limits all in %s", plural(r.RunawaySessions, "runaway session", "runaway sessions"))
		} else {
			s += fmt.Sprintf(", the rate limits in %s", plural(r.RateLimitedSessions, "session", "sessions"))
			if r.RunawaySessions > 0 {
				s += fmt.Sprintf(" (%d with runaway loops)", r.RunawaySessions)
			}
		}
	}
	s += fmt.Sprintf("; %s the gateway allowed would change (%s, %s)",
		plural(r.Changed, "call", "calls"), plural(r.SessionsAffected, "session", "sessions"), plural(r.AgentsAffected, "agent", "agents"))
	return s + newly
}

const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
)

var severityColor = map[string]string{
	"critical": "\x1b[1;31m", "high": "\x1b[31m", "medium": "\x1b[33m", "low": "\x1b[36m", "info": "\x1b[2m",
}

// Text is the terminal summary. Every value that comes from events or from
// people (names, summaries, reasons, ids) goes through render.Terminal, so
// that the only escape sequences printed are its own colours.
func Text(r *Report, color bool) string {
	t := render.Terminal
	paint := func(code, s string) string {
		if !color || code == "" {
			return s
		}
		return code + s + ansiReset
	}
	var b strings.Builder
	grant := "all grants"
	if r.Grant != "" {
		grant = "grant " + r.Grant
	}
	fmt.Fprintf(&b, "%s\n", paint(ansiBold, fmt.Sprintf("mcptrail recommendation for %s (%s)", t(r.Server), t(grant))))
	fmt.Fprintf(&b, "window   %s → %s (%d days): %s, %s, %s\n", r.Window.From.Format("2006-01-02 15:04"), r.Window.To.Format("2006-01-02 15:04"),
		r.Window.Days, plural(r.Window.Calls, "call", "calls"), plural(r.Window.Sessions, "session", "sessions"), plural(r.Window.Agents, "agent", "agents"))
	if note := r.Window.SessionSources.Note(r.Window.Calls); note != "" {
		fmt.Fprintf(&b, "%s\n", render.Wrap(note, 0, render.TextWidth, "  "))
	}
	fmt.Fprintf(&b, "confidence %s", r.Confidence)
	if r.Draft {
		fmt.Fprint(&b, paint(severityColor["medium"], " — DRAFT: the data gates are not met"))
	}
	fmt.Fprintln(&b)
	for _, g := range r.Gates {
		mark := fmt.Sprintf("%-7s", g.Mark())
		switch {
		case !g.OK && !g.Optional:
			mark = paint(severityColor["medium"], mark)
		case !g.OK:
			mark = paint(ansiDim, mark)
		}
		fmt.Fprintf(&b, "  %s %-16s %s\n", mark, g.Name, render.Wrap(t(g.Detail), 27, render.TextWidth, strings.Repeat(" ", 27)))
	}
	c := countChanges(r)
	// Hides and rate limits are many and alike: they get compact sections.
	var main, limits, hides []Finding
	for _, f := range r.Findings {
		switch {
		case f.Suppressed == nil && f.Kind == KindUnusedTool && f.Action.Op == OpHide:
			hides = append(hides, f)
		case f.Suppressed == nil && f.Kind == KindRateLimit:
			limits = append(limits, f)
		default:
			main = append(main, f)
		}
	}
	fmt.Fprintf(&b, "\n%s\n", paint(ansiBold, fmt.Sprintf("Findings: %d (%d suppressed%s)", len(r.Findings), c.suppressed, newSince(r.Findings))))
	if len(main) == 0 {
		fmt.Fprintln(&b, "  no other findings")
	}
	for _, f := range main {
		act := f.Action.Op
		if f.Action.Limit != nil {
			act = fmt.Sprintf("%s %d/%s per %s", act, f.Action.Limit.Max, f.Action.Limit.Window, f.Action.Limit.EffectiveScope())
		}
		if f.Suppressed != nil {
			act = "suppressed until " + f.Suppressed.Until.Format("2006-01-02") + ": " + t(f.Suppressed.Reason)
		}
		// The summary wraps under itself; the id gets a line of its own,
		// whole, for suppress to be given.
		mark := changeMark(f)
		if mark != "" {
			mark = paint(severityColor[Medium], mark)
		}
		fmt.Fprintf(&b, "  %s %-15s %s\n           → %s  [%s confidence]%s\n             %s\n",
			paint(severityColor[f.Severity], fmt.Sprintf("%-8s", strings.ToUpper(f.Severity))), f.Kind,
			render.Wrap(t(f.Summary), 27, render.TextWidth, strings.Repeat(" ", 27)), act, f.Confidence,
			mark, paint(ansiDim, t(f.ID)))
	}
	if len(limits) > 0 {
		fmt.Fprintf(&b, "\n%s\n", paint(ansiBold, fmt.Sprintf("Rate limits from observed peaks: %d tools%s", len(limits), newSince(limits))))
		for _, f := range limits {
			l := f.Action.Limit
			fmt.Fprintf(&b, "  %-28s %4d/%s per %-7s p99 %-4s max %-4s over %s [%s\n", t(f.Tool), l.Max, l.Window, l.EffectiveScope(),
				evidenceValue(f.Evidence["p99"]), evidenceValue(f.Evidence["max"]), evidenceValue(f.Evidence["scopes"])+" "+l.EffectiveScope()+"s", f.Confidence+"]"+changeMark(f))
		}
	}
	if len(hides) > 0 {
		byCat := map[string]int{}
		var risky []string
		var denied int64
		for _, f := range hides {
			cat := fmt.Sprint(f.Evidence["category"])
			byCat[cat]++
			if f.Severity != "low" {
				risky = append(risky, t(f.Tool))
			}
			if n, ok := f.Evidence["denied_attempts"].(int64); ok {
				denied += n
			}
		}
		var parts []string
		for _, cat := range []string{"admin", "exec", "destructive", "write", "read"} {
			if byCat[cat] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", byCat[cat], cat))
			}
		}
		fmt.Fprintf(&b, "\n%s\n", paint(ansiBold, fmt.Sprintf("Unused in the last %s, to hide: %d tools%s", r.Window.unusedSpan(), len(hides), newSince(hides))))
		fmt.Fprintf(&b, "  %s\n", strings.Join(parts, ", "))
		if len(risky) > 0 {
			shown := risky
			if len(shown) > 12 {
				shown = shown[:12]
			}
			more := ""
			if len(risky) > len(shown) {
				more = fmt.Sprintf(" and %d more", len(risky)-len(shown))
			}
			fmt.Fprintf(&b, "  risky ones: %s\n", render.Wrap(strings.Join(shown, ", ")+more, 14, render.TextWidth, "    "))
		}
		if denied > 0 {
			fmt.Fprintf(&b, "  %s to them were denied in the window\n", plural(denied, "attempt", "attempts"))
		}
		fmt.Fprintln(&b, "  every one is listed with its evidence in --format markdown or json")
	}
	fmt.Fprintf(&b, "\n%s\n", paint(ansiBold, "Proposed policy"))
	fmt.Fprintf(&b, "  default deny; %d tools allowed; hide %d; %d behind approval; %d rate limits; %d reported only\n",
		len(r.Policy.Tools), len(r.Policy.Hide), c.approval, c.limits, c.reported)
	if c.widen > 0 {
		fmt.Fprintf(&b, "  %s\n", paint(severityColor["high"], fmt.Sprintf("WIDENS ACCESS for %s (loosening findings above)", plural(int64(c.widen), "tool", "tools"))))
	}
	fmt.Fprintf(&b, "  replay: %s\n", render.Wrap(ReplaySentence(&r.Replay), 10, render.TextWidth, "    "))
	if len(r.SuppressionChanges) > 0 {
		fmt.Fprintf(&b, "\n%s\n", paint(ansiBold, "Suppression changes in the window"))
		for _, ch := range r.SuppressionChanges {
			fmt.Fprintf(&b, "  %s %-10s %s %s\n", ch.At.Format("2006-01-02"), ch.Action, t(ch.FindingID), t(suppressionDetail(ch)))
		}
	}
	return render.Fit(b.String(), render.TextWidth)
}

// change is what changed in a finding since the previous recorded run of
// its scope: "new", "changed" or "" (not recorded, or unchanged).
func change(f Finding) string {
	switch {
	case f.History == nil:
		return ""
	case f.History.New:
		return "new"
	case f.History.Changed:
		return "changed"
	}
	return ""
}

// changeMark marks a finding new or changed for the text output.
func changeMark(f Finding) string {
	if ch := change(f); ch != "" {
		return "  " + strings.ToUpper(ch)
	}
	return ""
}

// newSince counts the findings new or changed since the previous recorded
// run, as ", N new, M changed" ("" when none).
func newSince(fs []Finding) string {
	var parts []string
	for _, ch := range []string{"new", "changed"} {
		n := 0
		for _, f := range fs {
			if change(f) == ch {
				n++
			}
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, ch))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}

// markdownMark is changeMark for a Markdown cell.
func markdownMark(f Finding) string {
	if ch := change(f); ch != "" {
		return " **" + ch + "**"
	}
	return ""
}

func suppressionDetail(ch analytics.SuppressionChange) string {
	var parts []string
	if ch.Owner != "" {
		parts = append(parts, "by "+ch.Owner)
	}
	if ch.Until != nil {
		parts = append(parts, "until "+ch.Until.Format("2006-01-02"))
	}
	if ch.Reason != "" {
		parts = append(parts, fmt.Sprintf("%q", ch.Reason))
	}
	return strings.Join(parts, ", ")
}

// Markdown is the PR body. Every value that comes from events or from people
// goes through render.MarkdownText or a render.MarkdownCode span, so that no
// name can end a table cell, open a link or put raw HTML in the PR.
func Markdown(r *Report) string { return markdown(r, 2) }

// markdown writes the PR body with its title at heading level h (its
// sections one level down).
func markdown(r *Report, h int) string {
	code, cell, text := render.MarkdownCode, render.MarkdownCodeCell, render.MarkdownText
	var b strings.Builder
	h1, h2 := strings.Repeat("#", h)+" ", strings.Repeat("#", h+1)+" "
	c := countChanges(r)
	fmt.Fprintf(&b, "%smcptrail: least-privilege policy for %s", h1, code(r.Server))
	if r.Grant != "" {
		fmt.Fprintf(&b, " (grant %s)", code(r.Grant))
	}
	b.WriteString("\n\n")
	if r.Draft {
		b.WriteString("> **Draft.** The data gates are not met, so every finding has low confidence. Review before merging.\n\n")
	}
	fmt.Fprintf(&b, "Derived from %s in %s by %s between %s and %s (%d days). ",
		plural(r.Window.Calls, "call", "calls"), plural(r.Window.Sessions, "session", "sessions"), plural(r.Window.Agents, "agent", "agents"),
		r.Window.From.Format("2006-01-02"), r.Window.To.Format("2006-01-02"), r.Window.Days)
	if note := r.Window.SessionSources.Note(r.Window.Calls); note != "" {
		fmt.Fprintf(&b, "%s%s. ", strings.ToUpper(note[:1]), note[1:])
	}
	if r.Window.HistoryDays > 0 && r.Window.HistoryDays < r.Window.Days {
		fmt.Fprintf(&b, "The history covers only the last %d of those days: \"unused\" means unused in those. ", r.Window.HistoryDays)
	}
	fmt.Fprintf(&b, "The proposed policy denies by default, keeps every used tool allowed, hides %s, puts %s behind human approval and sets %s.\n\n",
		plural(int64(c.hide), "unused tool", "unused tools"), plural(int64(c.approval), "rarely used risky tool", "rarely used risky tools"),
		plural(int64(c.limits), "rate limit", "rate limits"))
	fmt.Fprintf(&b, "**Replay:** over the same window the proposed policy %s.\n\n", ReplaySentence(&r.Replay))
	if since := newSince(r.Findings); since != "" {
		fmt.Fprintf(&b, "**Since the previous run:** %s (marked below).\n\n", strings.TrimPrefix(since, ", "))
	}

	regressionsMarkdown(&b, r, h2)
	if widen := OpenWidenings(r); len(widen) > 0 {
		fmt.Fprintf(&b, h2+"⚠️ Access widened for %s\n\n", plural(int64(len(widen)), "tool", "tools"))
		b.WriteString("> The proposal lets this grant do what it could not do before. Review every row; `mcptrail suppress ID` accepts one.\n\n")
		WideningTable(&b, widen)
	}
	if len(r.RuleChanges) > 0 {
		b.WriteString(h2 + "Rule changes (current → proposed)\n\n")
		if r.Current == nil {
			b.WriteString("No current policy is known: the current column shows the window's decisions.\n\n")
		}
		b.WriteString("| Tool | Current | Proposed | Widens |\n|---|---|---|---|\n")
		for _, ch := range r.RuleChanges {
			mark := ""
			if ch.Widens {
				mark = "⚠️ yes"
			}
			fmt.Fprintf(&b, "| %s | %s | → %s | %s |\n", cell(ch.Tool), text(ch.Current), text(ch.Proposed), mark)
		}
		b.WriteString("\n")
	}
	b.WriteString(h2 + "Changes\n\n")
	b.WriteString("| Change | Tool | Why | Evidence | Confidence |\n|---|---|---|---|---|\n")
	var hides []Finding
	for _, f := range r.Findings {
		if f.Suppressed != nil || f.Action.Op == OpNone || f.Action.Op == OpAllow || f.Action.Op == OpWiden || f.Action.Op == OpRevert {
			continue
		}
		if f.Action.Op == OpHide {
			hides = append(hides, f)
			continue
		}
		fmt.Fprintf(&b, "| %s%s | %s | %s | %s | %s |\n", changeText(f), markdownMark(f), cell(f.Tool), text(f.Summary), evidenceText(f), f.Confidence)
	}
	b.WriteString("\n")
	if len(hides) > 0 {
		fmt.Fprintf(&b, "<details><summary>Hide %s not used in the window</summary>\n\n", plural(int64(len(hides)), "tool", "tools"))
		b.WriteString("| Change | Tool | Risk | Last called | Denied attempts | Confidence |\n|---|---|---|---|---|---|\n")
		for _, f := range hides {
			last := "never"
			if t, ok := f.Evidence["last_called"].(*time.Time); ok && t != nil {
				last = t.Format("2006-01-02")
			}
			fmt.Fprintf(&b, "| hide%s | %s | %s | %s | %v | %s |\n", markdownMark(f), cell(f.Tool), text(fmt.Sprint(f.Evidence["category"])), last, f.Evidence["denied_attempts"], f.Confidence)
		}
		b.WriteString("\n</details>\n\n")
	}
	var review []Finding
	for _, f := range r.Findings {
		if f.Suppressed == nil && (f.Action.Op == OpNone || f.Action.Op == OpAllow) {
			review = append(review, f)
		}
	}
	if len(review) > 0 {
		b.WriteString(h2 + "For review (not applied)\n\n| Severity | Finding | Subject | What we saw | Evidence |\n|---|---|---|---|---|\n")
		for _, f := range review {
			fmt.Fprintf(&b, "| %s%s | %s | %s | %s | %s |\n", f.Severity, markdownMark(f), f.Kind, cell(f.Tool), text(f.Summary), evidenceText(f))
		}
		b.WriteString("\n")
	}
	b.WriteString(h2 + "Replay impact\n\n")
	fmt.Fprintf(&b, "| Decision | Calls |\n|---|---:|\n| allowed | %s |\n| rate limited | %s |\n| approval required | %s |\n| hidden | %s |\n| denied | %s |\n| **total** | **%s** |\n\n",
		GroupDigits(r.Replay.Allowed), GroupDigits(r.Replay.RateLimited), GroupDigits(r.Replay.ApprovalRequired),
		GroupDigits(r.Replay.Hidden), GroupDigits(r.Replay.Denied), GroupDigits(r.Replay.Calls))
	var changed []string
	for t, tr := range r.Replay.ByTool {
		if tr.Changed > 0 || tr.NewlyAllowed > 0 {
			changed = append(changed, t)
		}
	}
	sort.Strings(changed)
	if len(changed) > 0 {
		b.WriteString("| Tool | Calls | Allowed then, refused now | Refused then, allowed now | Sessions affected |\n|---|---:|---:|---:|---:|\n")
		for _, t := range changed {
			tr := r.Replay.ByTool[t]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cell(t), GroupDigits(tr.Calls), GroupDigits(tr.Changed),
				GroupDigits(tr.NewlyAllowed), GroupDigits(tr.SessionsAffected))
		}
		b.WriteString("\n")
	}
	b.WriteString(h2 + "Confidence and data gates\n\n")
	fmt.Fprintf(&b, "Overall confidence: **%s**.\n\n| Gate | | Detail |\n|---|---|---|\n", r.Confidence)
	for _, g := range r.Gates {
		mark := "✅"
		switch {
		case !g.OK && g.Optional:
			mark = "missing"
		case !g.OK:
			mark = "⚠️ FAIL"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.Name, mark, text(g.Detail))
	}
	b.WriteString("\n")
	var sup []Finding
	for _, f := range r.Findings {
		if f.Suppressed != nil {
			sup = append(sup, f)
		}
	}
	if len(sup) > 0 {
		b.WriteString(h2 + "Suppressed findings\n\n| Finding | Reason | By | Until |\n|---|---|---|---|\n")
		for _, f := range sup {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(f.ID), text(f.Suppressed.Reason), text(f.Suppressed.By), f.Suppressed.Until.Format("2006-01-02"))
		}
		b.WriteString("\n")
	}
	if len(r.SuppressionChanges) > 0 {
		b.WriteString(h2 + "Suppression changes\n\n| When | Action | Finding | Detail |\n|---|---|---|---|\n")
		for _, ch := range r.SuppressionChanges {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", ch.At.Format("2006-01-02"), ch.Action, cell(ch.FindingID), text(suppressionDetail(ch)))
		}
		b.WriteString("\n")
	}
	writeEvidenceSQL(&b, r, h2)
	fmt.Fprintf(&b, "<sub>Generated by %s. Finding ids are stable: `mcptrail suppress ID --reason ... --until ...` keeps one out of future proposals.</sub>\n", code("mcptrail recommend --server "+r.Server))
	return b.String()
}

func changeText(f Finding) string {
	switch f.Action.Op {
	case OpRequireApproval:
		return "require approval"
	case OpRateLimit:
		if l := f.Action.Limit; l != nil {
			return fmt.Sprintf("limit %d/%s per %s", l.Max, l.Window, l.EffectiveScope())
		}
	}
	return f.Action.Op
}

// evidenceText lists a finding's evidence as key=value in key order.
func evidenceText(f Finding) string {
	keys := make([]string, 0, len(f.Evidence))
	for k := range f.Evidence {
		if k == "why" || k == "sql" {
			continue // the reason is in the summary; the SQL has its own section
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+evidenceValue(f.Evidence[k]))
	}
	return render.MarkdownText(strings.Join(parts, ", "))
}

func evidenceValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "none"
	case *time.Time:
		if x == nil {
			return "never"
		}
		return x.UTC().Format("2006-01-02")
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04Z")
	case float64:
		return trimFloat(x)
	case []string:
		return strings.Join(x, " ")
	}
	return fmt.Sprint(v)
}

// changesText lists what a loosening widens.
// Widening is one loosening finding as the renderers show it: the tool's
// rule before and after, what widens, and the calls the gateway refused
// that the proposal lets through.
type Widening struct {
	ID           string `json:"id"`
	Tool         string `json:"tool"`
	Severity     string `json:"severity"`
	Current      string `json:"current"`
	Proposed     string `json:"proposed"`
	Changes      string `json:"changes"`
	NewlyAllowed int64  `json:"newly_allowed"`
}

// OpenWidenings are the report's unsuppressed loosening findings, in
// finding order.
func OpenWidenings(r *Report) []Widening {
	var out []Widening
	for _, f := range r.Findings {
		if f.Suppressed != nil || f.Kind != KindLoosening {
			continue
		}
		w := Widening{ID: f.ID, Tool: f.Tool, Severity: f.Severity, Current: evidenceValue(f.Evidence["before"]),
			Proposed: evidenceValue(f.Evidence["after"]), Changes: changesText(f)}
		switch n := f.Evidence["newly_allowed"].(type) {
		case int64:
			w.NewlyAllowed = n
		case int:
			w.NewlyAllowed = int64(n)
		case float64:
			w.NewlyAllowed = int64(n)
		}
		out = append(out, w)
	}
	return out
}

// WideningTable writes the Markdown table of widenings, one row each.
func WideningTable(b *strings.Builder, widen []Widening) {
	cell, text := render.MarkdownCodeCell, render.MarkdownText
	b.WriteString("| Tool | Current | Proposed | What widens | Refused then, allowed now | Severity |\n|---|---|---|---|---:|---|\n")
	for _, w := range widen {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", cell(w.Tool), text(w.Current), text(w.Proposed),
			text(w.Changes), GroupDigits(w.NewlyAllowed), w.Severity)
	}
	b.WriteString("\n")
}

func changesText(f Finding) string {
	if c, ok := f.Evidence["changes"].([]string); ok {
		return strings.Join(c, "; ")
	}
	return ""
}

// writeEvidenceSQL gives, for each finding other than the many alike (hides
// and derived limits), the SQL that reproduces its numbers, folded away.
// Every finding's is in recommendations.json (evidence.sql).
func writeEvidenceSQL(b *strings.Builder, r *Report, h2 string) {
	var shown []Finding
	for _, f := range r.Findings {
		if _, ok := f.Evidence["sql"].(string); ok && f.Suppressed == nil && f.Kind != KindUnusedTool && f.Kind != KindRateLimit {
			shown = append(shown, f)
		}
	}
	b.WriteString(h2 + "Reproduce the numbers\n\n")
	b.WriteString("Each finding's `evidence.sql` (in `recommendations.json`) is one query over the `calls` table whose row is the finding's evidence numbers: run it with `mcptrail query --sql`. The findings that are neither hides nor derived limits:\n\n")
	for _, f := range shown {
		fmt.Fprintf(b, "<details><summary>%s</summary>\n\n%s\n</details>\n\n", render.MarkdownText(f.ID), render.MarkdownBlock("sql", f.Evidence["sql"].(string)))
	}
}

// regressionsMarkdown opens the PR body with the regressions: what the new
// policy version broke, and the revert as a JSON Patch against the current
// policy.
func regressionsMarkdown(b *strings.Builder, r *Report, h2 string) {
	var regs []Finding
	for _, f := range r.Findings {
		if f.Suppressed == nil && f.Action.Op == OpRevert {
			regs = append(regs, f)
		}
	}
	if len(regs) == 0 {
		return
	}
	fmt.Fprintf(b, h2+"🚨 Regression: a new policy version refuses %s this grant used\n\n", plural(int64(len(regs)), "tool", "tools"))
	for _, f := range regs {
		fmt.Fprintf(b, "%s%s: %s\n\n", render.MarkdownCode(f.Tool), markdownMark(f), render.MarkdownText(f.Summary))
		switch {
		case len(f.Action.Patch) == 0:
			b.WriteString("No current policy is recorded, so no revert can be written: record the policy in force with `mcptrail recommend --policy FILE`.\n\n")
		default:
			from := "the current policy without what refuses the tool (no earlier policy is recorded)"
			if f.Evidence["revert_from"] == RevertFromPrevious {
				from = "the tool's rule in the policy recorded before the current one"
			}
			fmt.Fprintf(b, "Revert (JSON Patch against the current policy, restoring %s):\n\n", from)
			var patch bytes.Buffer
			if json.Indent(&patch, f.Action.Patch, "", "  ") != nil {
				patch.Reset()
				patch.Write(f.Action.Patch)
			}
			b.WriteString(render.MarkdownBlock("json", patch.String()) + "\n")
			if widens, _ := f.Evidence["revert_widens"].([]string); len(widens) > 0 {
				fmt.Fprintf(b, "Applying it widens the current policy for %s: %s.\n\n", render.MarkdownCode(f.Tool),
					render.MarkdownText(strings.Join(widens, "; ")))
			}
		}
	}
}
