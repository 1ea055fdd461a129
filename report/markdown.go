package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/render"
)

// JSON is the machine-consumable report: the same report gives the same
// bytes (generated_at aside, which the caller sets).
func JSON(r *Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("report: encode JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// compactJSON is the report as JSON without indentation: the same
// document as JSON, in fewer bytes.
func compactJSON(r *Report) ([]byte, error) {
	js, err := JSON(r)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		return nil, fmt.Errorf("report: encode JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// JSONList is several reports as one JSON array.
func JSONList(rs []*Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if rs == nil {
		rs = []*Report{}
	}
	if err := enc.Encode(rs); err != nil {
		return nil, fmt.Errorf("report: encode JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseJSON reads a report written by JSON.
func ParseJSON(data []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.Version == 0 || r.Server == "" {
		return nil, fmt.Errorf("not an mcptrail report (no version or server)")
	}
	return &r, nil
}

// Names from events reach the Markdown only through these: text for plain
// text, code for a code span in a paragraph or heading, cell for a code span
// in a table cell (see the render package).
var (
	text = render.MarkdownText
	code = render.MarkdownCode
	cell = render.MarkdownCodeCell
)

// Markdown renders the report. charts are the files written beside it
// (under charts/); with none, the report says where to find them.
func Markdown(r *Report, chartFiles []Chart) string {
	var b strings.Builder
	chart := func(file string) {
		for _, c := range chartFiles {
			if c.File == file {
				fmt.Fprintf(&b, "![%s](charts/%s)\n\n", text(c.Alt), c.File)
			}
		}
	}
	fmt.Fprintf(&b, "# mcptrail report: %s\n\n", code(r.Server))
	fmt.Fprintf(&b, "%s → %s (%s)", minute(r.Window.From), minute(r.Window.To), daysText(r.Window.Days))
	if r.Schedule != "" {
		fmt.Fprintf(&b, " · schedule %s", code(r.Schedule))
	}
	fmt.Fprintf(&b, " · generated %s\n\n", minute(r.GeneratedAt))
	if len(chartFiles) == 0 {
		b.WriteString("_Charts are written beside the report with `--out DIR`, and inline in `--format html`._\n\n")
	}

	t := r.Totals
	b.WriteString("| Calls | Sessions | Agents | Tools | Allowed | Refused | Denial rate | Upstream errors | Error rate |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n\n", num(t.Calls), num(r.Window.Sessions), num(r.Window.Agents),
		num(r.Window.Tools), num(t.Allowed), num(t.Calls-t.Allowed), pct(t.DenialRate), num(t.Errors), pct(t.ErrorRate))
	fmt.Fprintf(&b, "Refused calls: %s denied, %s hidden, %s rate-limited, %s held for approval. The denial rate counts every call not allowed; the error rate is upstream errors per allowed call.\n\n",
		num(t.Denied), num(t.Hidden), num(t.RateLimited), num(t.ApprovalRequired))

	markdownChanges(&b, r)
	markdownRecommendation(&b, r)
	markdownBacktest(&b, r)

	b.WriteString("## Calls over time\n\n")
	chart("calls-over-time.svg")
	unit := "Day"
	if r.Volume.Bucket == "hour" {
		unit = "Hour"
	}
	fmt.Fprintf(&b, "| %s (UTC) | Calls | Allowed | Denied | Hidden | Rate-limited | Held for approval | Errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", unit)
	for _, v := range r.Volume.Rows {
		label := v.Start.Format("Mon 2006-01-02")
		if r.Volume.Bucket == "hour" {
			label = v.Start.Format("2006-01-02 15:00")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", label, num(v.Calls), num(v.Allowed), num(v.Denied), num(v.Hidden),
			num(v.RateLimited), num(v.ApprovalRequired), num(v.Errors))
	}
	if t.Calls > t.Allowed || t.Errors > 0 {
		b.WriteString("\n### Refused and failed calls\n\n")
		chart("refusals-over-time.svg")
		chart("errors-over-time.svg")
		fmt.Fprintf(&b, "On their own scale: %s refused by the gateway (%s of all calls) and %s upstream errors (%s of allowed calls).\n",
			num(t.Calls-t.Allowed), pct(t.DenialRate), num(t.Errors), pct(t.ErrorRate))
	}
	b.WriteString("\n## Top tools\n\n")
	chart("top-tools.svg")
	b.WriteString("| Tool | Calls | Allowed | Refused | Denial rate | Errors | Error rate | Sessions | Agents |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range topTools(r) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", cell(t.Tool), num(t.Calls), num(t.Allowed), num(t.Refused),
			pct(t.DenialRate), num(t.Errors), pct(t.ErrorRate), num(t.Sessions), num(t.Agents))
	}
	if more := len(r.Tools) - len(topTools(r)); more > 0 {
		fmt.Fprintf(&b, "\n%s more in the JSON report.\n", plural(int64(more), "tool", "tools"))
	}
	b.WriteString("\n## Top agents\n\n| Agent | Calls | Sessions | Tools | Refused | Errors |\n|---|---:|---:|---:|---:|---:|\n")
	for _, a := range r.Agents {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(a.Agent), num(a.Calls), num(a.Sessions), num(a.Tools), num(a.Refused), num(a.Errors))
	}
	b.WriteString("\n## Latency by tool\n\nUpstream latency of allowed calls, for the busiest tools that report one.\n\n")
	b.WriteString("| Tool | Calls | p50 | p95 | p99 | max |\n|---|---:|---:|---:|---:|---:|\n")
	for _, t := range latencyTools(r) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(t.Tool), num(t.Allowed), ms(t.P50), ms(t.P95), ms(t.P99), ms(t.Max))
	}
	b.WriteString("\n## When tools are called\n\n")
	chart("hour-by-tool.svg")
	if len(chartFiles) > 0 && len(r.HourByTool.Tools) > 0 {
		fmt.Fprintf(&b, "Calls per hour of the day (UTC) of the %s busiest tools, each row shaded against its own busiest hour.\n\n",
			num(int64(len(r.HourByTool.Tools))))
	}
	markdownAgentTools(&b, r, chart)
	markdownLastAccess(&b, r)
	markdownLimits(&b, r, chart)
	if len(r.Polling) > 0 {
		b.WriteString("## Polling loops\n\n")
		for _, pl := range r.Polling {
			fmt.Fprintf(&b, "### %s after %s", code(pl.Tool), code(pl.StartTool))
			if pl.Grant != "" {
				fmt.Fprintf(&b, " (grant %s)", code(pl.Grant))
			}
			b.WriteString("\n\n")
			chart(pollFile(pl))
			b.WriteString(pollingSentence(pl, r.Recommendation.Days) + "\n\n")
			if l := limitOf(r, pl.Grant, pl.Tool); l != nil && pl.Limit != nil {
				chart(limitFile(pl.Grant, pl.Tool))
				b.WriteString(limitSentence(*l) + "\n\n")
			}
		}
	}
	b.WriteString("<sub>Generated by mcptrail. Finding ids are stable: `mcptrail suppress ID --reason ... --until ...` keeps one out of future proposals; the next report lists the change.</sub>\n")
	return b.String()
}

func markdownChanges(b *strings.Builder, r *Report) {
	c := r.Changes
	b.WriteString("## What changed\n\n")
	if c.Previous == nil {
		fmt.Fprintf(b, "First report in this folder: nothing to compare with yet. Tools first seen in the window and suppression changes are listed.\n\n")
	} else {
		fmt.Fprintf(b, "Since the previous report (window ending %s", minute(c.Previous.WindowTo))
		if c.Previous.Folder != "" {
			fmt.Fprintf(b, ", folder %s", code(c.Previous.Folder))
		}
		b.WriteString(").\n\n")
	}
	if c.History != nil {
		fmt.Fprintf(b, "Findings: since the previous recorded run of the recommendation (%s), from the finding history (`mcptrail findings`).\n\n", minute(c.History.PreviousRunAt))
	}
	nothing := true
	if len(c.NewTools) > 0 {
		nothing = false
		b.WriteString("**Tools seen for the first time:** ")
		parts := make([]string, len(c.NewTools))
		for i, t := range c.NewTools {
			parts[i] = fmt.Sprintf("%s (since %s, %s)", code(t.Tool), day(t.FirstSeen), plural(t.Calls, "call", "calls"))
		}
		b.WriteString(strings.Join(parts, ", ") + "\n\n")
	}
	if len(c.GoneTools) > 0 {
		nothing = false
		parts := make([]string, len(c.GoneTools))
		for i, t := range c.GoneTools {
			parts[i] = code(t)
		}
		fmt.Fprintf(b, "**Tools no longer used** (allowed calls in the previous window, none in this one): %s\n\n", strings.Join(parts, ", "))
	}
	for _, l := range c.findingLists() {
		if len(l.refs) == 0 {
			continue
		}
		nothing = false
		fmt.Fprintf(b, "**%s (%d)**\n\n| Severity | Finding | Tool | Summary |\n|---|---|---|---|\n", l.title, len(l.refs))
		for _, f := range l.refs {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", f.Severity, f.Kind, cell(f.Tool), text(f.Summary))
		}
		b.WriteString("\n")
	}
	if len(c.SuppressionChanges) > 0 {
		nothing = false
		b.WriteString("**Suppression changes**\n\n| When | Change | Finding | Detail |\n|---|---|---|---|\n")
		for _, ch := range c.SuppressionChanges {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", minute(ch.At), ch.Action, cell(ch.FindingID), text(suppressionDetail(ch)))
		}
		b.WriteString("\n")
	}
	if nothing {
		if c.Previous == nil {
			b.WriteString("No tool was seen for the first time and no suppression changed in the window.\n\n")
		} else {
			b.WriteString("Nothing changed: the same tools and findings, no suppression changes.\n\n")
		}
	}
}

func suppressionDetail(ch analytics.SuppressionChange) string {
	var parts []string
	if ch.Owner != "" {
		parts = append(parts, "by "+ch.Owner)
	}
	if ch.Until != nil {
		parts = append(parts, "until "+day(*ch.Until))
	}
	if ch.Reason != "" {
		parts = append(parts, fmt.Sprintf("%q", ch.Reason))
	}
	return strings.Join(parts, ", ")
}

// tightenSentence says what the proposal changes.
func tightenSentence(s Recommendation) string {
	return fmt.Sprintf("The proposed policy denies by default, keeps every used tool allowed (%s), hides %s, puts %s behind human approval and sets %s; %s for review only, %s suppressed.",
		plural(int64(s.PolicyTools), "tool", "tools"), plural(int64(s.Counts.Hide), "unused tool", "unused tools"),
		plural(int64(s.Counts.Approval), "risky tool", "risky tools"), plural(int64(s.Counts.RateLimits), "rate limit", "rate limits"),
		plural(int64(s.Counts.Reported), "finding is", "findings are"), plural(int64(s.Counts.Suppressed), "finding", "findings")) +
		widenSentence(s)
}

// widenSentence says, when it does, that the proposal widens access: the
// loosening findings are counted here and listed in the PR folder.
func widenSentence(s Recommendation) string {
	if s.Counts.Widen == 0 {
		return ""
	}
	return fmt.Sprintf(" It widens access for %s: the PR folder lists each loosening with its evidence.",
		plural(int64(s.Counts.Widen), "tool", "tools"))
}

// keyFindings are the findings a reader acts on: everything except the many
// alike hides and peak-derived rate limits, and the loosenings, which are
// counted (widenSentence) or listed apart (per grant).
func keyFindings(findings []Finding) []Finding {
	var out []Finding
	for _, f := range findings {
		if (f.Kind == recommend.KindUnusedTool || f.Kind == recommend.KindRateLimit || f.Kind == recommend.KindLoosening) && !f.Suppressed {
			continue
		}
		out = append(out, f)
	}
	return out
}

func markdownRecommendation(b *strings.Builder, r *Report) {
	s := r.Recommendation
	b.WriteString("## What to tighten\n\n")
	if len(s.Grants) > 0 {
		markdownGrants(b, r)
		return
	}
	fmt.Fprintf(b, "Recommendation over %s → %s (%s), confidence **%s**", day(s.From), day(s.To), plural(int64(s.Days), "day", "days"), s.Confidence)
	if s.Draft {
		b.WriteString(" (**draft**: the data gates are not met)")
	}
	b.WriteString(". " + tightenSentence(s) + "\n\n")
	fmt.Fprintf(b, "**Replay:** over the same window the proposed policy %s.\n\n", s.ReplaySentence)
	if s.PRFolder != "" {
		fmt.Fprintf(b, "The PR-ready folder is [`%s/`](%s/PR.md): `policy.json`, `policy.diff`, `PR.md`, `recommendations.json`.\n\n", s.PRFolder, s.PRFolder)
	} else {
		fmt.Fprintf(b, "%s writes the PR-ready folder.\n\n", code("mcptrail recommend --server "+r.Server+" --out DIR"))
	}
	markdownKeyFindings(b, s.Findings, false)
}

// markdownKeyFindings writes the key findings table (with a grant column
// for a server with grants), then counts the rest.
func markdownKeyFindings(b *strings.Builder, findings []Finding, grants bool) {
	key := keyFindings(findings)
	if len(key) > 0 {
		if grants {
			b.WriteString("| Grant | Severity | Finding | Tool | Action | Summary |\n|---|---|---|---|---|---|\n")
		} else {
			b.WriteString("| Severity | Finding | Tool | Action | Summary |\n|---|---|---|---|---|\n")
		}
		for _, f := range key {
			act := f.Action
			if f.Suppressed {
				act = "suppressed"
			}
			if grants {
				fmt.Fprintf(b, "| %s ", cell(f.Grant))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", f.Severity, f.Kind, cell(f.Tool), act, text(f.Summary))
		}
		b.WriteString("\n")
	}
	hides, limits := 0, 0
	for _, f := range findings {
		if f.Suppressed {
			continue
		}
		switch f.Kind {
		case recommend.KindUnusedTool:
			hides++
		case recommend.KindRateLimit:
			limits++
		}
	}
	if hides+limits > 0 {
		fmt.Fprintf(b, "Also: %s not used in the window and %s from observed peaks; each is listed with its evidence in the PR folder.\n\n",
			plural(int64(hides), "tool to hide", "tools to hide"), plural(int64(limits), "rate limit", "rate limits"))
	}
}

// widenTotal says how many tools the grants' proposals widen access for,
// and in which grants, each named by name (code for Markdown, as is for
// HTML, which escapes the whole); "" when none.
func widenTotal(s Recommendation, name func(string) string) string {
	if s.Counts.Widen == 0 {
		return ""
	}
	var parts []string
	for _, g := range s.Grants {
		if g.Counts.Widen > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d)", name(g.Grant), g.Counts.Widen))
		}
	}
	return fmt.Sprintf("The proposals widen access for %s, in %s: %s. Each is listed first in its grant below; review every one.",
		plural(int64(s.Counts.Widen), "tool", "tools"), plural(int64(len(parts)), "grant", "grants"), strings.Join(parts, ", "))
}

// ruleChangesTitle heads a grant's rule changes.
func ruleChangesTitle(g GrantRecommendation) string {
	return fmt.Sprintf("Rule changes, current → proposed (%s)", plural(int64(len(g.RuleChanges)), "tool", "tools"))
}

// widensMark marks a rule change that widens access.
func widensMark(ch recommend.RuleChange) string {
	if ch.Widens {
		return "⚠️ yes"
	}
	return ""
}

// grantSentence says what one grant's proposal changes.
func grantSentence(g GrantRecommendation) string {
	return fmt.Sprintf("The proposed policy denies by default, keeps %s allowed, hides %s, puts %s behind human approval and sets %s; %s for review only, %s suppressed.",
		plural(int64(g.PolicyTools), "tool", "tools"), plural(int64(g.Counts.Hide), "unused tool", "unused tools"),
		plural(int64(g.Counts.Approval), "risky tool", "risky tools"), plural(int64(g.Counts.RateLimits), "rate limit", "rate limits"),
		plural(int64(g.Counts.Reported), "finding is", "findings are"), plural(int64(g.Counts.Suppressed), "finding", "findings"))
}

// markdownGrants writes the recommendation of a server whose calls carry
// grants: a summary row per grant, then each grant's loosenings, rule
// changes (current → proposed), replay on both sides and key findings.
func markdownGrants(b *strings.Builder, r *Report) {
	s := r.Recommendation
	fmt.Fprintf(b, "One policy per grant (a policy is attached to a grant): %s, recommendation over %s → %s (%s), confidence **%s**",
		plural(int64(len(s.Grants)), "grant", "grants"), day(s.From), day(s.To), plural(int64(s.Days), "day", "days"), s.Confidence)
	if s.Draft {
		b.WriteString(" (**draft** for some grants: their data gates are not met)")
	}
	b.WriteString(".\n\n")
	if w := widenTotal(s, code); w != "" {
		fmt.Fprintf(b, "> ⚠️ **%s**\n\n", w)
	}
	if s.UngrantedCalls > 0 {
		fmt.Fprintf(b, "%s carry no grant: no per-grant policy covers them.\n\n", plural(s.UngrantedCalls, "call", "calls"))
	}
	if s.PRFolder != "" {
		fmt.Fprintf(b, "The PR-ready folder is [`%s/`](%s/PR.md): `<grant>/policy.json` and `<grant>/policy.diff` per grant, one `PR.md` and `recommendations.json`.\n\n", s.PRFolder, s.PRFolder)
	} else {
		fmt.Fprintf(b, "%s writes the PR-ready folder, one policy per grant.\n\n", code("mcptrail recommend --server "+r.Server+" --out DIR"))
	}
	b.WriteString("| Grant | Calls | Confidence | Widens access | Hide | Approval | Rate limits | Allowed then, refused now | Refused then, allowed now |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range s.Grants {
		widen := num(int64(g.Counts.Widen))
		if g.Counts.Widen > 0 {
			widen = "⚠️ " + widen
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", cell(g.Grant), num(g.Calls), g.Confidence, widen, num(int64(g.Counts.Hide)),
			num(int64(g.Counts.Approval)), num(int64(g.Counts.RateLimits)), num(g.Replay.Changed), num(g.Replay.NewlyAllowed))
	}
	b.WriteString("\n")
	for _, g := range s.Grants {
		fmt.Fprintf(b, "### Grant %s\n\n", code(g.Grant))
		fmt.Fprintf(b, "%s calls, confidence **%s**", num(g.Calls), g.Confidence)
		if g.Draft {
			b.WriteString(" (**draft**: the data gates are not met)")
		}
		b.WriteString(". " + grantSentence(g))
		if g.PRFolder != "" {
			fmt.Fprintf(b, " Its policy: [`%s/policy.json`](%s/policy.json).", g.PRFolder, g.PRFolder)
		}
		b.WriteString("\n\n")
		if len(g.Loosenings) > 0 {
			fmt.Fprintf(b, "**⚠️ Access widened for %s**: the proposal lets this grant do what it could not do before.\n\n", plural(int64(len(g.Loosenings)), "tool", "tools"))
			recommend.WideningTable(b, g.Loosenings)
		}
		fmt.Fprintf(b, "**Replay:** over the same window the proposed policy %s. Allowed then, refused now: %s; refused then, allowed now: %s.\n\n",
			g.ReplaySentence, plural(g.Replay.Changed, "call", "calls"), plural(g.Replay.NewlyAllowed, "call", "calls"))
		if len(g.RuleChanges) > 0 {
			fmt.Fprintf(b, "<details><summary>%s</summary>\n\n", ruleChangesTitle(g))
			b.WriteString("| Tool | Current | Proposed | Widens |\n|---|---|---|---|\n")
			for _, ch := range g.RuleChanges {
				fmt.Fprintf(b, "| %s | %s | → %s | %s |\n", cell(ch.Tool), text(ch.Current), text(ch.Proposed), widensMark(ch))
			}
			b.WriteString("\n</details>\n\n")
		}
	}
	b.WriteString("### Key findings, every grant\n\n")
	markdownKeyFindings(b, s.Findings, true)
}

// topTools are the busiest tools, at most DefaultTopN.
func topTools(r *Report) []ToolStats {
	return r.Tools[:min(len(r.Tools), DefaultTopN)]
}

// latencyTools are the busiest tools with a latency, at most 15.
func latencyTools(r *Report) []ToolStats {
	var out []ToolStats
	for _, t := range r.Tools {
		if t.P50 != nil && len(out) < 15 {
			out = append(out, t)
		}
	}
	return out
}

func pollingSentence(pl PollingLoop, days int) string {
	s := fmt.Sprintf("%s polled %s after %s in %s", plural(pl.Loops, "loop", "loops"), code(pl.Tool), code(pl.StartTool), plural(int64(days), "day", "days"))
	if len(pl.Histogram) > 0 {
		s += fmt.Sprintf(", from %s to %s polls", num(pl.Histogram[0].Polls), num(pl.Histogram[len(pl.Histogram)-1].Polls))
	}
	s += "."
	if l := pl.Limit; l != nil {
		s += fmt.Sprintf(" Proposed limit: %s, which counts calls per %s, not per loop (below, in its own unit).", limitText(*l), l.Scope)
	} else {
		s += " No new limit is proposed."
	}
	if pl.RunawayThreshold > 0 {
		s += fmt.Sprintf(" Loops of more than %s polls count as runaway.", trim(pl.RunawayThreshold))
	}
	return s
}

func markdownAgentTools(b *strings.Builder, r *Report, chart func(string)) {
	m := r.AgentTools
	if len(m.Agents) == 0 {
		return
	}
	b.WriteString("## Which agent calls which tool\n\n")
	chart("agent-tool.svg")
	fmt.Fprintf(b, "Calls in the window of the %s busiest agents to the %s busiest tools, refused ones in parentheses; an empty cell is a tool the agent never called.\n\n",
		num(int64(len(m.Agents))), num(int64(len(m.Tools))))
	matrixHeader(b, m.Agents, "---:|")
	for j, tool := range m.Tools {
		fmt.Fprintf(b, "| %s |", cell(tool))
		for i := range m.Agents {
			v, refused := m.Calls[i][j], m.Refused[i][j]
			switch {
			case v == 0:
				b.WriteString("  |")
			case refused > 0:
				fmt.Fprintf(b, " %s (%s refused) |", num(v), num(refused))
			default:
				fmt.Fprintf(b, " %s |", num(v))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func markdownLastAccess(b *strings.Builder, r *Report) {
	g := lastAccessGrid(r)
	if len(g.grants) == 0 {
		return
	}
	from, to := r.Window.From, r.Window.To
	b.WriteString("## Last accessed, by tool and grant\n\n")
	b.WriteString(accessSentence(g, from, to) + " `never`: only refused; `–`: not called.\n\n")
	matrixHeader(b, g.grants, "---|")
	for _, tool := range g.tools {
		fmt.Fprintf(b, "| %s |", cell(tool))
		for _, gr := range g.grants {
			text, class, _ := g.cell(tool, gr, from, to)
			if class == accessNever {
				text = "**never**"
			}
			fmt.Fprintf(b, " %s |", text)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func markdownLimits(b *strings.Builder, r *Report, chart func(string)) {
	if len(r.Limits) == 0 {
		return
	}
	b.WriteString("## Proposed limits against observed peaks\n\n")
	chart("limits.svg")
	fmt.Fprintf(b, "Each proposed rate limit in its own unit (calls per window per session, grant or agent) against the peaks observed over the recommendation's %s; the limits the peaks come closest to first.\n\n",
		plural(int64(r.Recommendation.Days), "day", "days"))
	b.WriteString("| Tool | Proposed limit | Scope values | Peak p50 | Peak p99 | Highest peak | Over the limit | Calls beyond it |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	shown := limitsOrder(r.Limits)[:min(len(r.Limits), DefaultTopN)]
	for _, l := range shown {
		tool := cell(l.Tool)
		if l.Grant != "" {
			tool += " (" + cell(l.Grant) + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", tool, limitText(l.Limit), scopeNoun(l.Limit.Scope, l.Scopes),
			trim(l.PeakP50), trim(l.PeakP99), trim(l.PeakMax), num(l.ScopesOver), num(l.CallsOver))
	}
	if more := len(r.Limits) - len(shown); more > 0 {
		fmt.Fprintf(b, "\n%s more in the JSON report.\n", plural(int64(more), "limit", "limits"))
	}
	b.WriteString("\n")
}

// matrixHeader writes the head of a tool × name table, each name column
// aligned as align says.
func matrixHeader(b *strings.Builder, names []string, align string) {
	b.WriteString("| Tool |")
	for _, n := range names {
		fmt.Fprintf(b, " %s |", cell(n))
	}
	b.WriteString("\n|---|" + strings.Repeat(align, len(names)) + "\n")
}
