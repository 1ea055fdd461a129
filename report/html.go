package report

import (
	"fmt"
	"html"
	"strings"

	"github.com/mcptrail/mcptrail/render"
)

// css is the whole style sheet: no external font, script or style.
const css = `
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; --accent: #2f6fb0;
  --critical: #8b0000; --high: #c62828; --medium: #b26a00; --low: #1565c0; --info: #59636e; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 28px 32px 48px; }
header { border-bottom: 1px solid var(--line); padding-bottom: 14px; margin-bottom: 20px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h1 code, h2 code, h3 code { font-size: 0.9em; }
h2 { font-size: 20px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 8px; }
.meta, .note { color: var(--muted); font-size: 14px; }
code { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--soft);
  padding: 1px 4px; border-radius: 4px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 12px; margin: 16px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; background: var(--soft); }
.card .k { color: var(--muted); font-size: 13px; }
.card .v { font-size: 22px; font-weight: 600; }
.callout { border-left: 4px solid var(--accent); background: #eef4fb; padding: 10px 14px; border-radius: 4px; margin: 12px 0; }
.draft { border-left-color: var(--medium); background: #fff4e5; }
.widen { color: var(--high); }
table.grants th { white-space: normal; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; font-size: 14px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.sev { display: inline-block; min-width: 64px; text-align: center; border-radius: 10px; padding: 0 8px;
  font-size: 12px; font-weight: 600; color: #fff; background: var(--info); }
.sev.critical { background: var(--critical); } .sev.high { background: var(--high); }
.sev.medium { background: var(--medium); } .sev.low { background: var(--low); }
.tag { font-size: 12px; color: var(--muted); border: 1px solid var(--line); border-radius: 10px; padding: 0 6px; }
figure { margin: 10px 0 18px; }
figure svg { display: block; width: 100%; height: auto; border: 1px solid var(--line); border-radius: 8px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
@media (max-width: 900px) { .grid2 { grid-template-columns: 1fr; } main { padding: 16px; } }
table.access td.recent { background: #e6f4ea; } table.access td.stale { background: #fff4e5; color: #8a4b00; }
table.access td.never { background: #fdecea; color: #8b0000; font-weight: 600; } table.access td.none { color: var(--muted); }
footer { margin-top: 36px; color: var(--muted); font-size: 13px; border-top: 1px solid var(--line); padding-top: 10px; }
@page { size: A4; margin: 14mm; }
@media print {
  body { font-size: 10.5pt; }
  main { max-width: none; padding: 0; }
  h2 { break-after: avoid; }
  figure, table, .card, .callout, tr { break-inside: avoid; }
  .cards { grid-template-columns: repeat(4, 1fr); }
  .grid2 { grid-template-columns: 1fr; }
  figure svg { border: none; }
  a { color: inherit; text-decoration: none; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
`

// esc makes any text inert in the page: control characters (invalid in
// HTML, and escapes for a terminal the page is printed to) as render.Terminal
// shows them, then HTML's special characters.
func esc(s string) string { return html.EscapeString(render.Terminal(s)) }

func hcode(s string) string { return "<code>" + esc(s) + "</code>" }

// HTML renders the report as one self-contained page: inline style, inline
// <svg> charts, no script and nothing fetched.
func HTML(r *Report, chartList []Chart) string {
	var b strings.Builder
	figure := func(file, caption string) {
		for _, c := range chartList {
			if c.File != file {
				continue
			}
			svg := string(c.SVG)
			svg = strings.Replace(svg, "<svg ", fmt.Sprintf(`<svg role="img" aria-label="%s" data-chart="%s" `, esc(c.Alt), esc(c.File)), 1)
			fmt.Fprintf(&b, "<figure>%s", svg)
			if caption != "" {
				fmt.Fprintf(&b, "<figcaption>%s</figcaption>", caption)
			}
			b.WriteString("</figure>\n")
		}
	}
	title := "mcptrail report: " + r.Server
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", esc(title), css)
	fmt.Fprintf(&b, "<header><h1>mcptrail report: %s</h1>\n<div class=\"meta\">%s → %s (%s)", hcode(r.Server), esc(minute(r.Window.From)), esc(minute(r.Window.To)), esc(daysText(r.Window.Days)))
	if r.Schedule != "" {
		fmt.Fprintf(&b, " · schedule %s", hcode(r.Schedule))
	}
	fmt.Fprintf(&b, " · generated %s</div></header>\n", esc(minute(r.GeneratedAt)))

	t := r.Totals
	s := r.Recommendation
	b.WriteString("<section class=\"cards\">\n")
	card := func(k, v string) {
		fmt.Fprintf(&b, "<div class=\"card\"><div class=\"k\">%s</div><div class=\"v\">%s</div></div>\n", esc(k), esc(v))
	}
	card("Calls", num(t.Calls))
	card("Sessions", num(r.Window.Sessions))
	card("Agents", num(r.Window.Agents))
	card("Tools used", num(r.Window.Tools))
	card("Denial rate", pct(t.DenialRate))
	card("Upstream error rate", pct(t.ErrorRate))
	card("Key findings", num(int64(openKeyFindings(s))))
	b.WriteString("</section>\n")
	fmt.Fprintf(&b, "<p class=\"note\">Refused: %s denied, %s hidden, %s rate-limited, %s held for approval. The denial rate counts every call not allowed; the error rate is upstream errors (%s) per allowed call.</p>\n",
		num(t.Denied), num(t.Hidden), num(t.RateLimited), num(t.ApprovalRequired), num(t.Errors))

	htmlChanges(&b, r)
	htmlRecommendation(&b, r)
	htmlBacktest(&b, r)

	b.WriteString("<h2>Calls over time</h2>\n")
	figure("calls-over-time.svg", fmt.Sprintf("Calls per %s (UTC), stacked by the gateway's decision.", esc(r.Volume.Bucket)))

	if hasChart(chartList, "refusals-over-time.svg") || hasChart(chartList, "errors-over-time.svg") {
		b.WriteString("<h2>Refused and failed calls</h2>\n")
		figure("refusals-over-time.svg", fmt.Sprintf("Calls per %s (UTC) that the gateway refused, by decision, on their own scale: %s refused, %s of all calls.",
			esc(r.Volume.Bucket), num(t.Calls-t.Allowed), pct(t.DenialRate)))
		figure("errors-over-time.svg", fmt.Sprintf("Allowed calls per %s (UTC) that failed upstream, on their own scale: %s, %s of allowed calls.",
			esc(r.Volume.Bucket), num(t.Errors), pct(t.ErrorRate)))
	}

	b.WriteString("<h2>Top tools</h2>\n")
	figure("top-tools.svg", "")
	b.WriteString("<table><tr><th>Tool</th><th class=\"n\">Calls</th><th class=\"n\">Allowed</th><th class=\"n\">Refused</th><th class=\"n\">Denial rate</th><th class=\"n\">Errors</th><th class=\"n\">Error rate</th><th class=\"n\">Sessions</th><th class=\"n\">Agents</th></tr>\n")
	for _, t := range topTools(r) {
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			hcode(t.Tool), num(t.Calls), num(t.Allowed), num(t.Refused), pct(t.DenialRate), num(t.Errors), pct(t.ErrorRate), num(t.Sessions), num(t.Agents))
	}
	b.WriteString("</table>\n")
	if more := len(r.Tools) - len(topTools(r)); more > 0 {
		fmt.Fprintf(&b, "<p class=\"note\">%s more in the JSON report.</p>\n", esc(plural(int64(more), "tool", "tools")))
	}

	b.WriteString("<div class=\"grid2\"><div>\n<h2>Top agents</h2>\n<table><tr><th>Agent</th><th class=\"n\">Calls</th><th class=\"n\">Sessions</th><th class=\"n\">Tools</th><th class=\"n\">Refused</th><th class=\"n\">Errors</th></tr>\n")
	for _, a := range r.Agents {
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			hcode(a.Agent), num(a.Calls), num(a.Sessions), num(a.Tools), num(a.Refused), num(a.Errors))
	}
	b.WriteString("</table>\n</div><div>\n<h2>Latency by tool</h2>\n<table><tr><th>Tool</th><th class=\"n\">p50</th><th class=\"n\">p95</th><th class=\"n\">p99</th><th class=\"n\">max</th></tr>\n")
	for _, t := range latencyTools(r) {
		fmt.Fprintf(&b, "<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			hcode(t.Tool), esc(ms(t.P50)), esc(ms(t.P95)), esc(ms(t.P99)), esc(ms(t.Max)))
	}
	b.WriteString("</table>\n<p class=\"note\">Upstream latency of allowed calls.</p>\n</div></div>\n")

	if len(r.HourByTool.Tools) > 0 {
		b.WriteString("<h2>When tools are called</h2>\n")
		figure("hour-by-tool.svg", fmt.Sprintf("Calls per hour of the day (UTC) of the %d busiest tools, each row shaded against its own busiest hour (its count and the tool's calls on the right); hover a cell for its count.",
			len(r.HourByTool.Tools)))
	}
	htmlAgentTools(&b, r, figure)
	htmlLastAccess(&b, r)
	htmlLimits(&b, r, figure)
	if len(r.Polling) > 0 {
		b.WriteString("<h2>Polling loops</h2>\n")
		for _, pl := range r.Polling {
			grant := ""
			if pl.Grant != "" {
				grant = " (grant " + hcode(pl.Grant) + ")"
			}
			fmt.Fprintf(&b, "<h3>%s after %s%s</h3>\n", hcode(pl.Tool), hcode(pl.StartTool), grant)
			figure(pollFile(pl), esc(strings.ReplaceAll(pollingSentence(pl, s.Days), "`", "")))
			if l := limitOf(r, pl.Grant, pl.Tool); l != nil && pl.Limit != nil {
				figure(limitFile(pl.Grant, pl.Tool), esc(strings.ReplaceAll(limitSentence(*l), "`", "")))
			}
		}
	}
	b.WriteString("<footer>Generated by mcptrail. Finding ids are stable: <code>mcptrail suppress ID --reason … --until …</code> keeps one out of future proposals; the next report lists the change.</footer>\n</main>\n</body>\n</html>\n")
	return b.String()
}

func sevBadge(s string) string {
	return fmt.Sprintf("<span class=\"sev %s\">%s</span>", esc(s), esc(s))
}

func htmlChanges(b *strings.Builder, r *Report) {
	c := r.Changes
	b.WriteString("<h2>What changed</h2>\n")
	if c.Previous == nil {
		b.WriteString("<p>First report in this folder: nothing to compare with yet. Tools first seen in the window and suppression changes are listed.</p>\n")
	} else {
		fmt.Fprintf(b, "<p>Since the previous report (window ending %s", esc(minute(c.Previous.WindowTo)))
		if c.Previous.Folder != "" {
			fmt.Fprintf(b, ", folder %s", hcode(c.Previous.Folder))
		}
		b.WriteString(").</p>\n")
	}
	if c.History != nil {
		fmt.Fprintf(b, "<p>Findings: since the previous recorded run of the recommendation (%s), from the finding history (<code>mcptrail findings</code>).</p>\n", esc(minute(c.History.PreviousRunAt)))
	}
	nothing := true
	if len(c.NewTools) > 0 {
		nothing = false
		parts := make([]string, len(c.NewTools))
		for i, t := range c.NewTools {
			parts[i] = fmt.Sprintf("%s (since %s, %s)", hcode(t.Tool), day(t.FirstSeen), esc(plural(t.Calls, "call", "calls")))
		}
		fmt.Fprintf(b, "<p><strong>Tools seen for the first time:</strong> %s</p>\n", strings.Join(parts, ", "))
	}
	if len(c.GoneTools) > 0 {
		nothing = false
		parts := make([]string, len(c.GoneTools))
		for i, t := range c.GoneTools {
			parts[i] = hcode(t)
		}
		fmt.Fprintf(b, "<p><strong>Tools no longer used</strong> (allowed calls in the previous window, none in this one): %s</p>\n", strings.Join(parts, ", "))
	}
	for _, l := range c.findingLists() {
		if len(l.refs) == 0 {
			continue
		}
		nothing = false
		fmt.Fprintf(b, "<h3>%s (%d)</h3>\n<table><tr><th>Severity</th><th>Finding</th><th>Tool</th><th>Summary</th></tr>\n", esc(l.title), len(l.refs))
		for _, f := range l.refs {
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", sevBadge(f.Severity), esc(f.Kind), hcode(f.Tool), esc(f.Summary))
		}
		b.WriteString("</table>\n")
	}
	if len(c.SuppressionChanges) > 0 {
		nothing = false
		b.WriteString("<h3>Suppression changes</h3>\n<table><tr><th>When</th><th>Change</th><th>Finding</th><th>Detail</th></tr>\n")
		for _, ch := range c.SuppressionChanges {
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(minute(ch.At)), esc(ch.Action), hcode(ch.FindingID), esc(suppressionDetail(ch)))
		}
		b.WriteString("</table>\n")
	}
	if nothing {
		if c.Previous == nil {
			b.WriteString("<p class=\"note\">No tool was seen for the first time and no suppression changed in the window.</p>\n")
		} else {
			b.WriteString("<p class=\"note\">Nothing changed: the same tools and findings, no suppression changes.</p>\n")
		}
	}
}

func htmlRecommendation(b *strings.Builder, r *Report) {
	s := r.Recommendation
	b.WriteString("<h2>What to tighten</h2>\n")
	if len(s.Grants) > 0 {
		htmlGrants(b, r)
		return
	}
	class := "callout"
	if s.Draft {
		class += " draft"
	}
	fmt.Fprintf(b, "<div class=\"%s\"><p>Recommendation over %s → %s (%s), confidence <strong>%s</strong>", class, day(s.From), day(s.To),
		esc(plural(int64(s.Days), "day", "days")), esc(s.Confidence))
	if s.Draft {
		b.WriteString(" (<strong>draft</strong>: the data gates are not met)")
	}
	fmt.Fprintf(b, ". %s</p>\n<p><strong>Replay:</strong> over the same window the proposed policy %s.</p>\n", esc(tightenSentence(s)), esc(s.ReplaySentence))
	htmlPRFolder(b, r, "<code>policy.json</code>, <code>policy.diff</code>", "")
	b.WriteString("</div>\n")
	htmlKeyFindings(b, s.Findings, false)
}

// htmlPRFolder says where the PR-ready folder is (files: what it holds
// besides PR.md and recommendations.json), or how to write it.
func htmlPRFolder(b *strings.Builder, r *Report, files, perGrant string) {
	if s := r.Recommendation; s.PRFolder != "" {
		fmt.Fprintf(b, "<p>PR-ready folder: <a href=\"%s/PR.md\">%s/</a> (%s, <code>PR.md</code>, <code>recommendations.json</code>).</p>\n",
			esc(s.PRFolder), esc(s.PRFolder), files)
		return
	}
	fmt.Fprintf(b, "<p><code>mcptrail recommend --server %s --out DIR</code> writes the PR-ready folder%s.</p>\n", esc(r.Server), perGrant)
}

// htmlKeyFindings writes the key findings table, with a grant column for a
// server with grants.
func htmlKeyFindings(b *strings.Builder, findings []Finding, grants bool) {
	key := keyFindings(findings)
	if len(key) > 0 {
		b.WriteString("<table><tr>")
		if grants {
			b.WriteString("<th>Grant</th>")
		}
		b.WriteString("<th>Severity</th><th>Finding</th><th>Tool</th><th>Action</th><th>Summary</th></tr>\n")
		for _, f := range key {
			act := esc(f.Action)
			if f.Suppressed {
				act = "<span class=\"tag\">suppressed</span>"
			}
			b.WriteString("<tr>")
			if grants {
				fmt.Fprintf(b, "<td>%s</td>", hcode(f.Grant))
			}
			fmt.Fprintf(b, "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", sevBadge(f.Severity), esc(f.Kind), hcode(f.Tool), act, esc(f.Summary))
		}
		b.WriteString("</table>\n")
	}
}

// htmlGrants writes the recommendation of a server whose calls carry
// grants: a table of the grants, then per grant its loosenings, rule
// changes (current → proposed), replay on both sides and key findings.
func htmlGrants(b *strings.Builder, r *Report) {
	s := r.Recommendation
	class := "callout"
	if s.Draft {
		class += " draft"
	}
	fmt.Fprintf(b, "<div class=\"%s\"><p>One policy per grant (a policy is attached to a grant): %s, recommendation over %s → %s (%s), confidence <strong>%s</strong>",
		class, esc(plural(int64(len(s.Grants)), "grant", "grants")), day(s.From), day(s.To), esc(plural(int64(s.Days), "day", "days")), esc(s.Confidence))
	if s.Draft {
		b.WriteString(" (<strong>draft</strong> for some grants: their data gates are not met)")
	}
	b.WriteString(".</p>\n")
	if w := widenTotal(s, func(g string) string { return g }); w != "" {
		fmt.Fprintf(b, "<p class=\"widen\"><strong>⚠️ %s</strong></p>\n", esc(w))
	}
	if s.UngrantedCalls > 0 {
		fmt.Fprintf(b, "<p>%s carry no grant: no per-grant policy covers them.</p>\n", esc(plural(s.UngrantedCalls, "call", "calls")))
	}
	htmlPRFolder(b, r, "<code>&lt;grant&gt;/policy.json</code> and <code>&lt;grant&gt;/policy.diff</code> per grant", ", one policy per grant")
	b.WriteString("</div>\n")
	b.WriteString("<table class=\"grants\"><tr><th>Grant</th><th class=\"n\">Calls</th><th>Confidence</th><th class=\"n\">Widens access</th><th class=\"n\">Hide</th><th class=\"n\">Approval</th><th class=\"n\">Rate limits</th><th class=\"n\">Allowed then, refused now</th><th class=\"n\">Refused then, allowed now</th></tr>\n")
	for _, g := range s.Grants {
		widen := num(int64(g.Counts.Widen))
		if g.Counts.Widen > 0 {
			widen = "<strong>⚠️ " + widen + "</strong>"
		}
		fmt.Fprintf(b, "<tr data-grant=\"%s\"><td>%s</td><td class=\"n\">%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			esc(g.Grant), hcode(g.Grant), num(g.Calls), esc(g.Confidence), widen, num(int64(g.Counts.Hide)), num(int64(g.Counts.Approval)),
			num(int64(g.Counts.RateLimits)), num(g.Replay.Changed), num(g.Replay.NewlyAllowed))
	}
	b.WriteString("</table>\n")
	for _, g := range s.Grants {
		fmt.Fprintf(b, "<h3>Grant %s</h3>\n<p>%s calls, confidence <strong>%s</strong>", hcode(g.Grant), num(g.Calls), esc(g.Confidence))
		if g.Draft {
			b.WriteString(" (<strong>draft</strong>: the data gates are not met)")
		}
		fmt.Fprintf(b, ". %s", esc(grantSentence(g)))
		if g.PRFolder != "" {
			fmt.Fprintf(b, " Its policy: <a href=\"%s/policy.json\">%s/policy.json</a>.", esc(g.PRFolder), esc(g.PRFolder))
		}
		b.WriteString("</p>\n")
		if len(g.Loosenings) > 0 {
			fmt.Fprintf(b, "<p class=\"widen\"><strong>⚠️ Access widened for %s</strong>: the proposal lets this grant do what it could not do before.</p>\n",
				esc(plural(int64(len(g.Loosenings)), "tool", "tools")))
			fmt.Fprintf(b, "<table class=\"loosenings\" data-grant=\"%s\"><tr><th>Tool</th><th>Current</th><th>Proposed</th><th>What widens</th><th class=\"n\">Refused then, allowed now</th><th>Severity</th></tr>\n", esc(g.Grant))
			for _, w := range g.Loosenings {
				fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">%s</td><td>%s</td></tr>\n",
					hcode(w.Tool), esc(w.Current), esc(w.Proposed), esc(w.Changes), num(w.NewlyAllowed), sevBadge(w.Severity))
			}
			b.WriteString("</table>\n")
		}
		fmt.Fprintf(b, "<p><strong>Replay:</strong> over the same window the proposed policy %s. Allowed then, refused now: %s; refused then, allowed now: %s.</p>\n",
			esc(g.ReplaySentence), esc(plural(g.Replay.Changed, "call", "calls")), esc(plural(g.Replay.NewlyAllowed, "call", "calls")))
		if len(g.RuleChanges) > 0 {
			fmt.Fprintf(b, "<details><summary>%s</summary>\n", esc(ruleChangesTitle(g)))
			fmt.Fprintf(b, "<table class=\"rule-changes\" data-grant=\"%s\"><tr><th>Tool</th><th>Current</th><th>Proposed</th><th>Widens</th></tr>\n", esc(g.Grant))
			for _, ch := range g.RuleChanges {
				fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>→ %s</td><td><strong>%s</strong></td></tr>\n", hcode(ch.Tool), esc(ch.Current), esc(ch.Proposed), widensMark(ch))
			}
			b.WriteString("</table>\n</details>\n")
		}
	}
	b.WriteString("<h3>Key findings, every grant</h3>\n")
	htmlKeyFindings(b, s.Findings, true)
}

// openKeyFindings counts the unsuppressed findings of the "What to
// tighten" table.
func openKeyFindings(s Recommendation) int {
	n := 0
	for _, f := range keyFindings(s.Findings) {
		if !f.Suppressed {
			n++
		}
	}
	return n
}

// hasChart tells whether a chart was drawn.
func hasChart(chartList []Chart, file string) bool {
	for _, c := range chartList {
		if c.File == file {
			return true
		}
	}
	return false
}

func htmlAgentTools(b *strings.Builder, r *Report, figure func(file, caption string)) {
	m := r.AgentTools
	if len(m.Agents) == 0 {
		return
	}
	b.WriteString("<h2>Which agent calls which tool</h2>\n")
	figure("agent-tool.svg", fmt.Sprintf("Calls in the window of the %s busiest agents to the %s busiest tools; an empty cell is a tool the agent never called, a red corner a cell with refused calls.",
		num(int64(len(m.Agents))), num(int64(len(m.Tools)))))
}

func htmlLastAccess(b *strings.Builder, r *Report) {
	g := lastAccessGrid(r)
	if len(g.grants) == 0 {
		return
	}
	from, to := r.Window.From, r.Window.To
	b.WriteString("<h2>Last accessed, by tool and grant</h2>\n")
	fmt.Fprintf(b, "<p class=\"note\">%s</p>\n", esc(accessSentence(g, from, to)))
	b.WriteString("<table class=\"access\"><tr><th>Tool</th>")
	for _, gr := range g.grants {
		fmt.Fprintf(b, "<th>%s</th>", hcode(gr))
	}
	b.WriteString("</tr>\n")
	for _, tool := range g.tools {
		fmt.Fprintf(b, "<tr><td>%s</td>", hcode(tool))
		for _, gr := range g.grants {
			text, class, title := g.cell(tool, gr, from, to)
			fmt.Fprintf(b, "<td class=\"%s\" title=\"%s\">%s</td>", class, esc(title), esc(text))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	if g.more > 0 {
		fmt.Fprintf(b, "<p class=\"note\">%s more in the JSON report.</p>\n", esc(plural(int64(g.more), "grant", "grants")))
	}
}

func htmlLimits(b *strings.Builder, r *Report, figure func(file, caption string)) {
	if len(r.Limits) == 0 {
		return
	}
	s := r.Recommendation
	b.WriteString("<h2>Proposed limits against observed peaks</h2>\n")
	figure("limits.svg", fmt.Sprintf("Each proposed rate limit in its own unit (calls per window per session, grant or agent) against the peaks observed over the recommendation's %s: one row per tool, each on its own scale.",
		esc(plural(int64(s.Days), "day", "days"))))
	b.WriteString("<table><tr><th>Tool</th><th class=\"n\">Proposed limit</th><th class=\"n\">Scope values</th><th class=\"n\">Peak p50</th><th class=\"n\">Peak p99</th><th class=\"n\">Highest peak</th><th class=\"n\">Over the limit</th><th class=\"n\">Calls beyond it</th></tr>\n")
	shown := limitsOrder(r.Limits)[:min(len(r.Limits), DefaultTopN)]
	for _, l := range shown {
		tool := hcode(l.Tool)
		if l.Grant != "" {
			tool += " (" + hcode(l.Grant) + ")"
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
			tool, esc(limitText(l.Limit)), esc(scopeNoun(l.Limit.Scope, l.Scopes)), esc(trim(l.PeakP50)), esc(trim(l.PeakP99)), esc(trim(l.PeakMax)),
			esc(num(l.ScopesOver)), esc(num(l.CallsOver)))
	}
	b.WriteString("</table>\n")
	if more := len(r.Limits) - len(shown); more > 0 {
		fmt.Fprintf(b, "<p class=\"note\">The limits the peaks come closest to; %s more in the JSON report.</p>\n", esc(plural(int64(more), "limit", "limits")))
	}
}
