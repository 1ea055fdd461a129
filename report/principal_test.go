package report

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
)

// principalStore holds a hand-made week: three grants with one agent each,
// a busy tool with 0.5 % of its calls denied, a quiet tool, a tool last
// used before the window, a tool only ever refused, a catalog tool never
// called, and a polled tool with sessions under and over a limit of 5 per
// minute per session.
func principalStore(t *testing.T) *analytics.Store {
	t.Helper()
	store := emptyStore(t)
	var events []audit.Event
	n := 0
	add := func(ts time.Time, tool, grant, agent, session string, d audit.Decision) {
		n++
		events = append(events, audit.Event{ID: fmt.Sprintf("e%d", n), TS: ts, Server: server, Tool: tool, Decision: d,
			Grant: grant, Agent: agent, Session: session})
	}
	day := fixedNow.Add(-2 * 24 * time.Hour) // a midnight inside the window
	for i := range 1600 {
		add(day.Add(time.Duration(i)*time.Minute), "get_status", "ops", "ops-agent", fmt.Sprintf("o%d", i/50), audit.Allowed)
	}
	for i := range 5 { // 0.5 % refused
		add(day.Add(time.Duration(i)*time.Hour+30*time.Second), "get_status", "dash", "dash-agent", "d1", audit.Denied)
	}
	for i := range 30 { // the quiet tool: 30 calls at 03h, 10 at 05h
		add(day.Add(3*time.Hour+time.Duration(i)*time.Minute), "quiet_tool", "ci", "ci-agent", "c1", audit.Allowed)
	}
	for i := range 10 {
		add(day.Add(5*time.Hour+time.Duration(i)*time.Minute), "quiet_tool", "ci", "ci-agent", "c1", audit.Allowed)
	}
	add(fixedNow.Add(-20*24*time.Hour), "old_tool", "ops", "ops-agent", "o-old", audit.Allowed)
	add(day.Add(time.Hour), "admin_tool", "dash", "dash-agent", "d1", audit.Denied)
	// The polled tool: p1 calls 8 times in one minute, p2 3 times, a call
	// without a session counts under its grant; rate-limited calls count,
	// denied ones do not.
	poll := day.Add(10 * time.Hour)
	for i := range 8 {
		d := audit.Allowed
		if i >= 6 {
			d = audit.RateLimited
		}
		add(poll.Add(time.Duration(i)*5*time.Second), "poll_status", "ops", "ops-agent", "p1", d)
	}
	for i := range 3 {
		add(poll.Add(time.Duration(i)*5*time.Second), "poll_status", "ops", "ops-agent", "p2", audit.Allowed)
	}
	add(poll, "poll_status", "ci", "ci-agent", "", audit.Allowed)
	add(poll.Add(time.Second), "poll_status", "ops", "ops-agent", "p2", audit.Denied)
	appendEvents(t, store, events...)
	_, err := store.ImportCatalog(context.Background(), server, "c.json", fixedNow.Add(-30*24*time.Hour),
		[]analytics.ToolRecord{{Server: server, Tool: "never_tool", Category: "read", Severity: "info", RiskSource: "default"},
			{Server: server, Tool: "get_status", Category: "read", Severity: "info", RiskSource: "default"}})
	require.NoError(t, err)
	return store
}

func TestLastAccessByToolAndGrant(t *testing.T) {
	store := principalStore(t)
	q := querier{db: store.DB(), server: server, from: fixedNow.Add(-week), to: fixedNow}
	la, err := q.lastAccess(context.Background())
	require.NoError(t, err)
	got := map[string]LastAccess{}
	for _, l := range la {
		got[l.Tool+"/"+l.Grant] = l
	}
	require.Contains(t, got, "get_status/ops")
	assert.Equal(t, int64(1600), got["get_status/ops"].Allowed)
	assert.Equal(t, fixedNow.Add(-2*24*time.Hour+1599*time.Minute), *got["get_status/ops"].LastAllowed)
	dash := got["get_status/dash"]
	assert.Nil(t, dash.LastAllowed, "dash was only ever refused")
	assert.Equal(t, int64(5), dash.Refused)
	old := got["old_tool/ops"]
	require.NotNil(t, old.LastAllowed, "last access reads the history before the window")
	assert.Equal(t, fixedNow.Add(-20*24*time.Hour), *old.LastAllowed)
	assert.Zero(t, old.Allowed, "no call in the window")
	never, ok := got["never_tool/"]
	require.True(t, ok, "a catalog tool nobody called is listed: %v", la)
	assert.Nil(t, never.LastAllowed)
	assert.NotContains(t, got, "get_status/", "a called catalog tool is not listed again")

	r := &Report{LastAccess: la, Window: Window{From: q.from, To: q.to}}
	g := lastAccessGrid(r)
	assert.Equal(t, []string{"ops", "ci", "dash"}, g.grants, "the grants that called the most tools first, then by name")
	text, class, _ := g.cell("old_tool", "ops", q.from, q.to)
	assert.Equal(t, "20 d ago", text)
	assert.Equal(t, accessStale, class)
	_, class, _ = g.cell("admin_tool", "dash", q.from, q.to)
	assert.Equal(t, accessNever, class)
	_, class, _ = g.cell("quiet_tool", "ops", q.from, q.to)
	assert.Equal(t, accessNone, class)
	text, class, _ = g.cell("get_status", "ops", q.from, q.to)
	assert.Equal(t, "21 h ago", text)
	assert.Equal(t, accessRecent, class)
}

func TestAgentToolMatrix(t *testing.T) {
	store := principalStore(t)
	q := querier{db: store.DB(), server: server, from: fixedNow.Add(-week), to: fixedNow}
	m, err := q.agentTools(context.Background(), 10, 40)
	require.NoError(t, err)
	assert.Equal(t, []string{"ops-agent", "ci-agent", "dash-agent"}, m.Agents)
	assert.Equal(t, []string{"get_status", "quiet_tool", "poll_status", "admin_tool"}, m.Tools)
	assert.Equal(t, []int64{1600, 0, 12, 0}, m.Calls[0])
	assert.Equal(t, []int64{0, 0, 3, 0}, m.Refused[0], "ops-agent's rate-limited and denied polls")
	assert.Equal(t, []int64{5, 0, 0, 1}, m.Calls[2])
	assert.Equal(t, []int64{5, 0, 0, 1}, m.Refused[2])
	// The busiest tools and agents only.
	m, err = q.agentTools(context.Background(), 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"ops-agent"}, m.Agents)
	assert.Equal(t, []string{"get_status"}, m.Tools, "the busiest tools that the busiest agents called")
	assert.Equal(t, [][]int64{{1600}}, m.Calls)

	svg := string(agentToolSVG(m))
	assert.Contains(t, svg, "<title>ops-agent → get_status: 1,600 calls</title>")
}

func TestLimitsAgainstPeaks(t *testing.T) {
	store := principalStore(t)
	q := querier{db: store.DB(), server: server, from: fixedNow.Add(-week), to: fixedNow}
	ls := []LimitPeak{
		{Tool: "poll_status", Limit: Limit{Max: 5, Window: "minute", Scope: "session"}},
		{Tool: "quiet_tool", Limit: Limit{Max: 20, Window: "hour", Scope: "grant"}},
		{Tool: "get_status", Limit: Limit{Max: 100, Window: "day", Scope: "agent"}},
	}
	require.NoError(t, q.limitPeaks(context.Background(), ls))
	p := ls[0]
	assert.Equal(t, int64(3), p.Scopes, "p1, p2 and the grant of the call without a session")
	assert.Equal(t, int64(1), p.ScopesOver)
	assert.Equal(t, 8.0, p.PeakMax, "rate-limited calls count, denied ones do not")
	assert.Equal(t, int64(1), p.WindowsOver)
	assert.Equal(t, int64(3), p.CallsOver)
	assert.Equal(t, []PeakCount{{1, 1}, {3, 1}, {8, 1}}, p.Histogram)
	q2 := ls[1]
	assert.Equal(t, int64(1), q2.Scopes)
	assert.Equal(t, 30.0, q2.PeakMax, "30 calls in the busiest hour of the ci grant")
	assert.Equal(t, int64(10), q2.CallsOver)
	g := ls[2]
	assert.Equal(t, int64(1), g.Scopes, "dash-agent's calls were denied")
	assert.Equal(t, 1440.0, g.PeakMax, "a day's calls of ops-agent")
	assert.Equal(t, int64(2), g.WindowsOver)
	assert.Equal(t, int64(1340+60), g.CallsOver)

	// The chart draws each limit on its own row, the one over it first and in red.
	svg := string(limitsSVG(ls))
	assert.Less(t, strings.Index(svg, ">get_status<"), strings.Index(svg, ">poll_status<"), "the furthest over the limit first")
	assert.Contains(t, svg, `class="over"`)
	// The polled tool's chart counts in the limit's unit.
	c, err := limitChart(p)
	require.NoError(t, err)
	assert.Contains(t, string(c.SVG), "peak calls of the tool in one minute per session")
	assert.Contains(t, limitSentence(p), "1 session went over the proposed limit of 5, with 3 calls beyond it")
}

// TestRefusalsOnTheirOwnScale builds the report of the hand-made week, where
// 0.5 % of the calls are refused: they get a chart of their own, which the
// calls-over-time chart's scale would hide.
func TestRefusalsOnTheirOwnScale(t *testing.T) {
	store := principalStore(t)
	r, err := Build(context.Background(), store, Options{Server: server, Window: week, Now: fixedNow, GeneratedAt: fixedNow})
	require.NoError(t, err)
	require.InDelta(t, 0.005, r.Totals.DenialRate, 0.001)
	chartList, err := Charts(r)
	require.NoError(t, err)
	var refusals *Chart
	for i := range chartList {
		if chartList[i].File == "refusals-over-time.svg" {
			refusals = &chartList[i]
		}
	}
	require.NotNil(t, refusals)
	// The denied bar fills most of the chart's height: its own scale tops
	// out near the refused calls' busiest day, not near the allowed calls'.
	assert.Contains(t, string(refusals.SVG), "fill:rgb(228,87,86)")
	assert.NotRegexp(t, regexp.MustCompile(`>1k<|>1\.\dk<`), string(refusals.SVG), "the value axis is the refusals' own")
	md := Markdown(r, chartList)
	assert.Contains(t, md, "](charts/refusals-over-time.svg)")
	assert.Contains(t, md, "## Last accessed, by tool and grant")
	assert.Contains(t, md, "## Which agent calls which tool")
	page := HTML(r, chartList)
	assert.Contains(t, page, `<td class="never"`)
}

// TestHeatmapShadesEachToolAgainstItself: a tool with 40 calls beside one
// with 1,000 still shows its busiest hour in the darkest shade, and every
// cell carries its count in a title.
func TestHeatmapShadesEachToolAgainstItself(t *testing.T) {
	store := principalStore(t)
	q := querier{db: store.DB(), server: server, from: fixedNow.Add(-week), to: fixedNow}
	m, err := q.hourByTool(context.Background(), 10)
	require.NoError(t, err)
	svg := string(heatmapSVG(m))
	darkest, lightest := stepShade(1), stepShade(0.01)
	cell := func(tool string, h int) string {
		re := regexp.MustCompile(`<rect [^>]*fill="(#[0-9a-f]{6})"[^>]*class="cell"><title>` + regexp.QuoteMeta(esc(tool)) + fmt.Sprintf(`, %02d:00`, h) + `[^<]*</title>`)
		mm := re.FindStringSubmatch(svg)
		require.NotNil(t, mm, "%s at %02d h", tool, h)
		return mm[1]
	}
	assert.Equal(t, darkest, cell("quiet_tool", 3), "the quiet tool's busiest hour is as dark as the busy tool's")
	assert.NotEqual(t, lightest, cell("quiet_tool", 5), "10 of 30 is a third of the way up")
	assert.Equal(t, darkest, cell("get_status", 0))
	assert.Contains(t, svg, "<title>quiet_tool, 03:00–04:00 UTC: 30 calls (100.0% of its busiest hour)</title>")
	assert.Contains(t, svg, "<title>quiet_tool, 04:00–05:00 UTC: 0 calls</title>")
}
