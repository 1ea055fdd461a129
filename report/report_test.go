package report

import (
	"context"
	"encoding/xml"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/recommend"
)

// TestGoldenReport holds the JSON and Markdown reports of a fixed scenario
// and time, checks that the same data gives the same bytes, and that the
// numbers agree with the recommender's.
func TestGoldenReport(t *testing.T) {
	store := proxmoxStore(t)
	ctx := context.Background()
	build := func() *Report {
		r, err := Build(ctx, store, Options{Server: server, Window: week, Now: fixedNow, GeneratedAt: fixedNow, Recommend: inputs(t, store)})
		require.NoError(t, err)
		return r
	}
	r := build()
	dir := filepath.Join(t.TempDir(), Stamp(fixedNow))
	files, err := WriteFolder(dir, r, Formats)
	require.NoError(t, err)
	assert.Equal(t, []string{"charts/agent-tool.svg", "charts/calls-over-time.svg", "charts/errors-over-time.svg", "charts/hour-by-tool.svg",
		"charts/limit-get_task_status--ci-runner.svg", "charts/limit-get_task_status--ops-bot.svg",
		"charts/limit-vm_agent_exec_status--ci-runner.svg", "charts/limit-vm_agent_exec_status--ops-bot.svg", "charts/limits.svg",
		"charts/polls-get_task_status--ci-runner.svg", "charts/polls-get_task_status--ops-bot.svg",
		"charts/polls-vm_agent_exec_status--ci-runner.svg", "charts/polls-vm_agent_exec_status--ops-bot.svg",
		"charts/refusals-over-time.svg", "charts/top-tools.svg", "pr/", HTMLFile, JSONFile, MarkdownFile}, files)
	js, err := os.ReadFile(filepath.Join(dir, JSONFile))
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(dir, MarkdownFile))
	require.NoError(t, err)
	golden(t, "proxmox-7d.json", js)
	golden(t, "proxmox-7d.md", md)
	chartList, err := Charts(r)
	require.NoError(t, err)
	for _, c := range chartList {
		assert.Contains(t, string(md), "](charts/"+c.File+")")
		svg, err := os.ReadFile(filepath.Join(dir, ChartsDir, c.File))
		require.NoError(t, err)
		assert.Equal(t, string(c.SVG)+"\n", string(svg))
	}

	t.Run("same data, same bytes", func(t *testing.T) {
		again := build()
		again.Recommendation.PRFolder = PRDir
		for i, g := range again.Recommendation.Grants {
			again.Recommendation.Grants[i].PRFolder = PRDir + "/" + recommend.PathSegment(g.Grant)
		}
		js2, err := JSON(again)
		require.NoError(t, err)
		assert.Equal(t, string(js), string(js2))
		charts2, err := Charts(again)
		require.NoError(t, err)
		require.Len(t, charts2, len(chartList))
		for i := range chartList {
			assert.Equal(t, string(chartList[i].SVG), string(charts2[i].SVG), chartList[i].File)
		}
		assert.Equal(t, HTML(r, chartList), HTML(again, charts2))
	})

	t.Run("read back", func(t *testing.T) {
		back, err := ParseJSON(js)
		require.NoError(t, err)
		js3, err := JSON(back)
		require.NoError(t, err)
		assert.Equal(t, string(js), string(js3), "the JSON report round-trips")
	})

	t.Run("numbers add up", func(t *testing.T) {
		var calls, allowed int64
		for _, b := range r.Volume.Rows {
			calls += b.Calls
			allowed += b.Allowed
			assert.Equal(t, b.Calls, b.Allowed+b.Denied+b.Hidden+b.RateLimited+b.ApprovalRequired)
		}
		assert.Equal(t, "day", r.Volume.Bucket)
		assert.Len(t, r.Volume.Rows, 7, "a 7-day window ending at midnight has 7 days")
		assert.Equal(t, r.Totals.Calls, calls)
		assert.Equal(t, r.Totals.Allowed, allowed)
		var toolCalls int64
		for _, tl := range r.Tools {
			toolCalls += tl.Calls
		}
		assert.Equal(t, r.Totals.Calls, toolCalls, "every call names a tool")
		for i, tool := range r.HourByTool.Tools {
			var n int64
			for _, c := range r.HourByTool.Counts[i] {
				n += c
			}
			assert.Equal(t, r.Tools[i].Tool, tool, "the heatmap's tools are the busiest")
			assert.Equal(t, r.Tools[i].Calls, n, tool)
		}
	})

	t.Run("polls per loop agree with the findings", func(t *testing.T) {
		require.NotEmpty(t, r.Polling)
		byID := map[string]recommend.Finding{}
		for _, g := range r.FullRecommendations() {
			for _, f := range g.Findings {
				byID[f.ID] = f
			}
		}
		for _, pl := range r.Polling {
			f := byID[pl.FindingID]
			assert.Equal(t, f.Evidence["loops"], int(pl.Loops), pl.Tool)
			require.NotNil(t, pl.Limit, pl.Tool)
			assert.Equal(t, f.Action.Limit.Max, pl.Limit.Max)
		}
	})

	t.Run("charts are SVG documents", func(t *testing.T) {
		var names []string
		for _, c := range chartList {
			names = append(names, c.File)
			assert.True(t, strings.HasPrefix(string(c.SVG), "<svg"), c.File)
			assert.NoError(t, xml.Unmarshal(c.SVG, new(struct{})), "%s is well-formed XML", c.File)
			assert.NotContains(t, string(c.SVG), "http://www.w3.org/1999/xlink\" href", "nothing fetched")
		}
		assert.Equal(t, []string{"calls-over-time.svg", "refusals-over-time.svg", "errors-over-time.svg", "top-tools.svg", "hour-by-tool.svg",
			"agent-tool.svg", "limits.svg", "polls-get_task_status--ci-runner.svg", "limit-get_task_status--ci-runner.svg",
			"polls-vm_agent_exec_status--ci-runner.svg", "limit-vm_agent_exec_status--ci-runner.svg",
			"polls-get_task_status--ops-bot.svg", "limit-get_task_status--ops-bot.svg",
			"polls-vm_agent_exec_status--ops-bot.svg", "limit-vm_agent_exec_status--ops-bot.svg"}, names)
	})

	t.Run("the backtest scores the proposal trained before the window on it", func(t *testing.T) {
		require.NotNil(t, r.Backtest)
		require.NotNil(t, r.Backtest.Result, r.Backtest.Note)
		f := r.Backtest.Result.Folds[0]
		assert.Equal(t, r.Window.From, f.TestFrom)
		assert.Equal(t, r.Window.To, f.TestTo)
		assert.Equal(t, f.TestFrom, f.TrainTo)
		page := HTML(r, chartList)
		assert.Contains(t, page, "<h2>Backtest</h2>")
		for _, s := range f.Grants {
			assert.Contains(t, page, "<tr><td><code>"+s.Grant+"</code></td>")
			for _, tu := range s.Under.ByTool {
				assert.Contains(t, page, fmt.Sprintf("<code>%s</code> (%d)", tu.Tool, tu.Calls))
			}
		}
	})

	t.Run("HTML is one self-contained page", func(t *testing.T) {
		page := HTML(r, chartList)
		assert.Equal(t, len(chartList), strings.Count(page, "<svg "))
		for _, banned := range []string{"<script", "<link", "@import", "src=\"http", "url(http"} {
			assert.NotContains(t, page, banned)
		}
		assert.Contains(t, page, "@media print")
	})
}

// TestChangesSinceThePreviousReport runs a report, then suppresses a
// finding, adds a week of different traffic with a new tool, and runs the
// next one: the second lists exactly those changes.
func TestChangesSinceThePreviousReport(t *testing.T) {
	ctx := context.Background()
	store := proxmoxStore(t)
	out := t.TempDir()
	t1 := fixedNow.Add(week)
	run := func(now time.Time) *Result {
		ropts := inputs(t, store)
		ropts.Params.Window = week // the recommendation follows the report's week
		ropts.Params.MinDays = 1
		res, err := Run(ctx, store, RunOptions{Options: Options{Server: server, Window: week, Now: now, GeneratedAt: now,
			Schedule: "weekly", Recommend: ropts}, OutDir: out, Formats: Formats})
		require.NoError(t, err)
		return res
	}
	first := run(fixedNow)
	assert.Nil(t, first.Report.Changes.Previous)
	assert.Empty(t, first.Report.Changes.GoneTools)
	assert.Empty(t, first.Report.Changes.NewFindings, "the first report has nothing to compare with")

	// A finding of the first report is accepted...
	var suppressed recommend.Finding
	var grant string // the grant whose proposal holds it
	for _, g := range first.Report.FullRecommendations() {
		for _, f := range g.Findings {
			if f.Kind == recommend.KindRiskyTool && f.Action.Op == recommend.OpRequireApproval && suppressed.ID == "" {
				suppressed, grant = f, g.Grant
			}
		}
	}
	require.NotEmpty(t, grant, "the proxmox scenario's calls carry grants: one proposal per grant")
	assert.Equal(t, recommend.FindingID(suppressed.Kind, server, grant, suppressed.Tool), suppressed.ID, "finding ids name the grant")
	require.NotEmpty(t, suppressed.ID)
	_, err := store.Suppress(ctx, analytics.Suppression{FindingID: suppressed.ID, Reason: "DR drills need it", Owner: "alice",
		Until: t1.Add(90 * 24 * time.Hour), CreatedAt: fixedNow.Add(24 * time.Hour)})
	require.NoError(t, err)
	// ...the same risky tool is used again, so the finding stays...
	// ...and a week of small-cluster traffic follows, with a new tool.
	require.NoError(t, appendScenario(store, "small", 2, t1, 0))
	var events []audit.Event
	for i := range 3 {
		at := t1.Add(-time.Duration(10+i) * time.Hour)
		events = append(events,
			audit.Event{ID: "new-" + string(rune('a'+i)), TS: at, Server: server, Tool: "vm_console_snapshot", Decision: audit.Allowed,
				Status: "ok", Agent: "ops-claude", Session: "s-new"},
			audit.Event{ID: "risky-" + string(rune('a'+i)), TS: at.Add(time.Minute), Server: server, Tool: suppressed.Tool,
				Decision: audit.Allowed, Status: "ok", Agent: "ops-claude", Session: "s-new", Grant: grant})
	}
	appendEvents(t, store, events...)

	second := run(t1)
	c := second.Report.Changes
	require.NotNil(t, c.Previous)
	assert.Equal(t, Stamp(fixedNow), c.Previous.Folder)
	assert.Equal(t, fixedNow, c.Previous.WindowTo)

	assert.Equal(t, []NewTool{{Tool: "vm_console_snapshot", FirstSeen: t1.Add(-12 * time.Hour), Calls: 3}}, c.NewTools)
	assert.Contains(t, c.GoneTools, "get_ha_status", "the dashboards of last week are gone")
	assert.NotContains(t, c.GoneTools, suppressed.Tool)
	allowed := func(r *Report) map[string]bool {
		m := map[string]bool{}
		for _, tl := range r.Tools {
			m[tl.Tool] = tl.Allowed > 0
		}
		return m
	}
	before, after := allowed(first.Report), allowed(second.Report)
	for _, tool := range c.GoneTools {
		assert.True(t, before[tool] && !after[tool], tool)
	}

	ids := func(refs []FindingRef) []string {
		var out []string
		for _, r := range refs {
			out = append(out, r.ID)
		}
		return out
	}
	assert.Contains(t, ids(c.SuppressedFindings), suppressed.ID)
	assert.NotContains(t, ids(c.NewFindings), suppressed.ID)
	assert.NotContains(t, ids(c.ResolvedFindings), suppressed.ID)
	for _, g := range []string{"ops-bot", "ci-runner"} {
		assert.Contains(t, ids(c.ResolvedFindings), recommend.FindingID(recommend.KindPollingLoop, server, g, "start_vm>get_task_status"),
			"no VM started and polled this week, per grant")
	}
	openIDs := func(r *Report) map[string]bool {
		m := map[string]bool{}
		for _, f := range r.Recommendation.Findings {
			m[f.ID] = !f.Suppressed
		}
		return m
	}
	was, is := openIDs(first.Report), openIDs(second.Report)
	require.NotEmpty(t, c.NewFindings)
	for _, id := range ids(c.NewFindings) {
		_, seen := was[id]
		assert.True(t, is[id] && !seen, id)
	}
	for _, id := range ids(c.ResolvedFindings) {
		_, present := is[id]
		assert.True(t, was[id] && !present, id)
	}
	require.Len(t, c.SuppressionChanges, 1)
	assert.Equal(t, suppressed.ID, c.SuppressionChanges[0].FindingID)
	assert.Equal(t, "suppress", c.SuppressionChanges[0].Action)

	md, err := os.ReadFile(filepath.Join(second.Dir, MarkdownFile))
	require.NoError(t, err)
	for _, want := range []string{"Since the previous report", "`" + Stamp(fixedNow) + "`", "Tools seen for the first time:** `vm_console_snapshot`",
		"**Tools no longer used**", "**Suppressed since (", suppressed.ID, "**Resolved findings (", "**New findings (", `by alice, until`, `"DR drills need it"`} {
		assert.Contains(t, string(md), want)
	}
	page, err := os.ReadFile(filepath.Join(second.Dir, HTMLFile))
	require.NoError(t, err)
	assert.Contains(t, string(page), "Suppressed since (")

	// A third report right after finds nothing new.
	third := run(t1.Add(time.Minute))
	assert.Equal(t, Stamp(t1), third.Report.Changes.Previous.Folder)
	assert.Empty(t, third.Report.Changes.NewFindings)
	assert.Empty(t, third.Report.Changes.SuppressedFindings)
	assert.Empty(t, third.Report.Changes.SuppressionChanges)
	assert.Empty(t, third.Report.Changes.NewTools)
}

func TestOutputFolderAndRetention(t *testing.T) {
	ctx := context.Background()
	store := proxmoxStore(t)
	out := t.TempDir()
	sdir := ServerDir(out, server)
	// Something else in the server's folder is never pruned.
	require.NoError(t, os.MkdirAll(filepath.Join(sdir, "notes"), 0o755))
	var dirs []string
	var last *Report
	for i := range 4 {
		now := fixedNow.Add(-time.Duration(3-i) * 24 * time.Hour)
		res, err := Run(ctx, store, RunOptions{Options: Options{Server: server, Window: week, Now: now, GeneratedAt: now, Recommend: inputs(t, store)},
			OutDir: out, Formats: []string{"json"}, Keep: 2})
		require.NoError(t, err)
		assert.Equal(t, []string{"pr/", JSONFile}, res.Files, "json alone: no Markdown, HTML or charts")
		dirs = append(dirs, filepath.Base(res.Dir))
		last = res.Report
		if i >= 2 {
			assert.Equal(t, []string{dirs[i-2]}, res.Pruned)
		}
	}
	entries, err := os.ReadDir(sdir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{dirs[2], dirs[3], "notes"}, names, "the 2 newest reports are kept, nothing else touched")
	pr := filepath.Join(sdir, dirs[3], PRDir)
	for _, f := range []string{"PR.md", "recommendations.json"} {
		assert.FileExists(t, filepath.Join(pr, f))
	}
	// One policy per grant, as `mcptrail recommend --out` writes them.
	require.Len(t, last.Recommendation.Grants, 4)
	for _, g := range last.Recommendation.Grants {
		assert.Equal(t, PRDir+"/"+g.Grant, g.PRFolder)
		for _, f := range []string{"policy.json", "policy.diff"} {
			assert.FileExists(t, filepath.Join(pr, g.Grant, f))
		}
	}
	assert.NoFileExists(t, filepath.Join(pr, "policy.json"), "no server-wide policy beside the grants'")

	t.Run("prune keeps all with keep 0", func(t *testing.T) {
		removed, err := Prune(sdir, 0)
		require.NoError(t, err)
		assert.Empty(t, removed)
	})

	t.Run("a folder that cannot be written", func(t *testing.T) {
		if os.Geteuid() == 0 {
			// root writes anywhere: use a file where the folder should be.
			blocked := filepath.Join(t.TempDir(), "file")
			require.NoError(t, os.WriteFile(blocked, nil, 0o644))
			_, err := Run(ctx, store, RunOptions{Options: Options{Server: server, Window: week, Now: fixedNow, Recommend: inputs(t, store)},
				OutDir: blocked, Formats: Formats})
			require.Error(t, err)
			assert.Contains(t, err.Error(), blocked)
			return
		}
		ro := t.TempDir()
		require.NoError(t, os.Chmod(ro, 0o500))
		_, err := Run(ctx, store, RunOptions{Options: Options{Server: server, Window: week, Now: fixedNow, Recommend: inputs(t, store)},
			OutDir: ro, Formats: Formats})
		require.Error(t, err)
		assert.Contains(t, err.Error(), ro)
	})

	t.Run("a server without calls", func(t *testing.T) {
		_, err := Run(ctx, store, RunOptions{Options: Options{Server: "nope-mcp", Window: week, Now: fixedNow}, OutDir: out, Formats: Formats})
		require.ErrorIs(t, err, ErrNoCalls)
		assert.Contains(t, err.Error(), `"nope-mcp"`)
		assert.NoDirExists(t, ServerDir(out, "nope-mcp"))
	})
}

// TestToolsFirstSeen: a tool's first call ever is found in the window, on
// the window's first day before its start, or in the days before (from
// tool_days), whichever is earliest.
func TestToolsFirstSeen(t *testing.T) {
	store := emptyStore(t)
	now := time.Date(2026, 11, 20, 15, 0, 0, 0, time.UTC) // the window starts 2026-11-19 15:00
	var events []audit.Event
	call := func(tool string, at time.Time) {
		events = append(events, audit.Event{ID: fmt.Sprintf("e%d", len(events)), TS: at, Server: server, Tool: tool,
			Decision: audit.Allowed, Status: "ok", Agent: "a", Session: "s"})
	}
	firstDay := time.Date(2026, 11, 19, 12, 0, 0, 0, time.UTC)
	call("same-day", firstDay)                       // before the window, on its first day
	call("same-day", now.Add(-time.Hour))            // in the window
	call("days-before", firstDay.Add(-72*time.Hour)) // kept in tool_days
	call("days-before", now.Add(-2*time.Hour))
	call("in-window", now.Add(-3*time.Hour))
	call("in-window", now.Add(-30*time.Minute))
	appendEvents(t, store, events...)
	r, err := Build(context.Background(), store, Options{Server: server, Window: 24 * time.Hour, Now: now})
	require.NoError(t, err)
	first := map[string]time.Time{}
	for _, tl := range r.Tools {
		first[tl.Tool] = tl.FirstSeen
	}
	assert.Equal(t, map[string]time.Time{"same-day": firstDay, "days-before": firstDay.Add(-72 * time.Hour), "in-window": now.Add(-3 * time.Hour)}, first)
}

func TestShortWindowCountsHours(t *testing.T) {
	store := emptyStore(t)
	require.NoError(t, appendScenario(store, "small", 1, fixedNow, 0))
	r, err := Build(context.Background(), store, Options{Server: server, Window: 24 * time.Hour, Now: fixedNow.Add(-30 * time.Minute)})
	require.NoError(t, err)
	assert.Equal(t, "hour", r.Volume.Bucket)
	assert.Len(t, r.Volume.Rows, 25, "a day not on the hour touches 25 hours")
	var n int64
	for _, b := range r.Volume.Rows {
		n += b.Calls
	}
	assert.Equal(t, r.Totals.Calls, n)
	for _, pl := range r.Polling {
		var n int64
		for _, pc := range pl.Histogram {
			n += pc.Loops
		}
		assert.Equal(t, pl.Loops, n)
	}
	_, err = Charts(r)
	require.NoError(t, err)
}

func TestParseFormats(t *testing.T) {
	f, err := ParseFormats("html, MD", "json")
	require.NoError(t, err)
	assert.Equal(t, []string{"markdown", "json", "html"}, f)
	f, err = ParseFormats("")
	require.NoError(t, err)
	assert.Equal(t, Formats, f)
	_, err = ParseFormats("markdown,pdf")
	require.EqualError(t, err, `unknown format "pdf": allowed formats are markdown, json, html`)
}

func TestPollBins(t *testing.T) {
	h := []PollCount{{3, 10}, {4, 20}, {6, 5}, {40, 1}, {150, 2}}
	bins := histBins(h, 20, true)
	var labels []string
	var within, over int64
	for _, b := range bins {
		labels = append(labels, strings.TrimSpace(strings.Join([]string{itoa(b.lo), itoa(b.hi)}, "-")))
		within += b.within
		over += b.over
	}
	assert.Equal(t, []string{"3-3", "4-4", "5-5", "6-6", "7-20", "21-40", "41-80", "81-160"}, labels)
	assert.Equal(t, int64(35), within)
	assert.Equal(t, int64(3), over)

	// Values far under the limit: the bars run on to it.
	bins = histBins([]PollCount{{3, 35}, {6, 24}}, 24, true)
	require.Len(t, bins, 5)
	assert.Equal(t, pollBin{lo: 7, hi: 24}, bins[4])
	// Polls per loop, split at the runaway threshold: unit bars up to
	// it, then doubling, the runaway loops over.
	bins = histBins([]PollCount{{3, 5}, {4, 2}, {30, 1}}, 10, false)
	assert.Equal(t, pollBin{lo: 5, hi: 10, within: 0}, bins[2])
	assert.Equal(t, int64(1), bins[len(bins)-1].over)
	// A limit under every value: all over.
	bins = histBins([]PollCount{{30, 2}, {31, 1}}, 20, true)
	var o int64
	for _, b := range bins {
		o += b.over
		assert.Zero(t, b.within)
	}
	assert.Equal(t, int64(3), o)
}

func itoa(n int64) string { return num(n) }

// With a debug logger, every query of the report logs how long it took
// (MCPTRAIL_DEBUG=1 on the command line), as the recommender's do.
func TestBuildLogsQueryTimings(t *testing.T) {
	store := emptyStore(t)
	require.NoError(t, appendScenario(store, "small", 1, fixedNow, 0))
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := Build(context.Background(), store, Options{Server: server, Window: week, Now: fixedNow, Log: log})
	require.NoError(t, err)
	require.NotEmpty(t, r.Limits, "the scenario proposes rate limits")
	for _, q := range []string{"query=totals", "query=tools", "query=agents", `query="last access"`, `query="limits against peaks"`} {
		assert.Contains(t, logged.String(), `msg="report query" `+q+" took=", q)
	}
	assert.Contains(t, logged.String(), `msg="recommend query"`, "the recommendation's own timings")
}
