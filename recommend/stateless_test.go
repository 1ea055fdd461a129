package recommend_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// loadStateless stores a scenario as stateless MCP traffic: no event
// carries a session, so the store derives them (SPEC §3).
func loadStateless(t *testing.T, scenario string) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "stateless.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var events []audit.Event
	_, err = simulate.Generate(context.Background(), simulate.Options{Scenario: scenario, Seed: 1, Now: now}, func(e audit.Event) error {
		e.Session = ""
		events = append(events, e)
		return nil
	})
	require.NoError(t, err)
	for len(events) > 0 {
		k := min(len(events), 5000) // many batches: runs continue across them
		_, err := store.Append(context.Background(), ingest.Batch{Events: events[:k]})
		require.NoError(t, err)
		events = events[k:]
	}
	return store
}

// TestStatelessLoopsAreFoundAndLimitedPerAgent: without protocol sessions
// the planted loops are found in derived sessions exactly as with them, and
// their limits are per agent (a gateway cannot count derived sessions),
// cutting the runaway loops and sparing the normal ones.
func TestStatelessLoopsAreFoundAndLimitedPerAgent(t *testing.T) {
	store := loadStateless(t, "loops")
	var derived, total int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FILTER (session_source = 'derived'), count(*) FROM calls`).Scan(&derived, &total))
	assert.Equal(t, total, derived, "every call has an agent: every session is derived")
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: simulate.LoopsTruth.Server, Now: now,
		Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)})
	require.NoError(t, err)
	loops := findings(r, recommend.KindPollingLoop)
	require.Len(t, loops, len(simulate.LoopsTruth.Polling))
	for _, pp := range simulate.LoopsTruth.Polling {
		f, ok := loops[pp.PollTool]
		require.True(t, ok, pp.PollTool)
		runaway := 0
		for _, rl := range simulate.LoopsTruth.Runaway {
			if rl.PollTool == pp.PollTool {
				runaway++
			}
		}
		assert.Equal(t, len(pp.Loops)+runaway, f.Evidence["loops"], pp.PollTool)
		assert.Equal(t, runaway, f.Evidence["runaway_loops"], pp.PollTool)
		require.NotNil(t, f.Action.Limit, f.Summary)
		assert.Equal(t, policy.ScopeAgent, f.Action.Limit.Scope, f.Summary)
		assert.Equal(t, int64(0), f.Evidence["normal_polls_refused"], f.Summary)
		if runaway > 0 {
			assert.Positive(t, f.Evidence["runaway_polls_refused"], f.Summary)
			continue
		}
		// Its peaks are each agent's busiest minute (a call without an
		// agent under its grant), not each derived session's.
		var p50, p99, peak float64
		require.NoError(t, store.DB().QueryRow(`
SELECT quantile_disc(peak, 0.5), quantile_disc(peak, 0.99), max(peak) FROM (
	SELECT k, max(n) AS peak FROM (
		SELECT CASE WHEN coalesce(agent, '') <> '' THEN 'a:' || agent ELSE 'g:' || coalesce("grant", '') END AS k,
		       epoch_ms(ts) // 60000, count(*) AS n
		FROM calls WHERE server = ? AND tool = ? AND ts > ? AND ts <= ? AND decision IN ('allowed', 'rate_limited')
		GROUP BY ALL)
	GROUP BY k)`, r.Server, pp.PollTool, r.Window.From, r.Window.To).Scan(&p50, &p99, &peak))
		assert.Equal(t, []float64{p50, p99, peak}, []float64{f.Evidence["p50"].(float64), f.Evidence["p99"].(float64), f.Evidence["max"].(float64)},
			"%s: its peaks per agent", pp.PollTool)
	}
	assert.Len(t, findings(r, recommend.KindRetryStorm), len(simulate.LoopsTruth.RetryStorms))
	assert.Equal(t, r.Window.Calls, r.Window.SessionSources.Derived)
	assert.Contains(t, recommend.Text(r, false), "sessions: derived from agent runs 100% of calls; a gateway cannot count")
}

// TestLongLivedSessionIsNotThrottled: a CI watcher keeps one session for
// days and polls 30 runs a day. Among 150 short sessions it is under 1% of
// them, so a per-day limit sized on their peaks would cut most of its
// polls; the limit's window must spare it and still cut the runaway loops,
// which run for hours.
func TestLongLivedSessionIsNotThrottled(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "long.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var evs []audit.Event
	loop := func(session, agent string, start time.Time, polls int) {
		call := func(tool string, at time.Time) {
			evs = append(evs, audit.Event{ID: fmt.Sprintf("e%06d", len(evs)), TS: at, Server: "srv", Tool: tool, Method: "tools/call",
				Decision: audit.Allowed, Status: "ok", Grant: "ci", Agent: agent, Session: session, ArgsHash: "sha256:" + session + start.String()})
		}
		call("start_vm", start)
		for i := 1; i <= polls; i++ {
			call("get_task_status", start.Add(time.Duration(i)*3*time.Second))
		}
	}
	begin := now.Add(-6 * 24 * time.Hour)
	for i := range 150 {
		loop(fmt.Sprintf("short-%d", i), "builder", begin.Add(time.Duration(i)*47*time.Minute), 3+i%10)
	}
	for d := range 5 {
		for k := range 30 {
			loop("watch-1", "ci-watcher", begin.Add(time.Duration(d)*24*time.Hour+time.Duration(k)*47*time.Minute+time.Minute), 8)
		}
	}
	for i := range 2 { // three hours at one poll every 3 s
		loop(fmt.Sprintf("runaway-%d", i), "builder", begin.Add(time.Duration(2+i)*24*time.Hour+30*time.Minute), 3600)
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)

	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("start_vm", "get_task_status")})
	require.NoError(t, err)
	f := findings(r, recommend.KindPollingLoop)["get_task_status"]
	require.NotNil(t, f.Action.Limit, f.Summary)
	assert.Equal(t, 2, f.Evidence["runaway_loops"])
	assert.Positive(t, f.Evidence["runaway_polls_refused"], f.Summary)
	assert.NotEqual(t, policy.WindowDay, f.Action.Limit.Window, f.Summary)

	// Replayed through the evaluator in time order, the watcher's session
	// keeps every poll.
	slices.SortFunc(evs, func(a, b audit.Event) int { return a.TS.Compare(b.TS) })
	ev := policy.NewEvaluator(r.Policy)
	refused := 0
	for _, e := range evs {
		v := ev.Evaluate(policy.Call{TS: e.TS, Tool: e.Tool, Grant: e.Grant, Session: e.Session, Agent: e.Agent})
		if e.Session == "watch-1" && v.Decision != policy.Allowed {
			refused++
		}
	}
	assert.Zero(t, refused, "the long-lived session's polls under %s", f.Summary)
}

// TestStatelessOTLPLoopsFollowTheirTraces: stateless MCP traffic sent as
// OTLP spans (no mcp.session.id; each task's calls share a trace) and
// stored in many batches gives the same polling loops, runaway loops and
// loops by polls as the same traffic with its sessions: a call belongs to
// its trace's session, not to its gateway's, where the tasks of many
// agents would mix.
func TestStatelessOTLPLoopsFollowTheirTraces(t *testing.T) {
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "otlp.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var events []audit.Event
	_, err = simulate.Generate(ctx, simulate.Options{Scenario: "loops", Seed: 1, Now: now}, func(e audit.Event) error {
		events = append(events, e)
		return nil
	})
	require.NoError(t, err)
	for len(events) > 0 {
		k := min(len(events), 5000)
		res := otlp.FromTraces(otlp.TracesRequest(events[:k], otlp.EncodeOptions{Stateless: true}), otlp.Options{})
		require.Len(t, res.Events, k, "every span a call: %s", res.Message)
		_, err := store.Append(ctx, ingest.Batch{Events: res.Events})
		require.NoError(t, err)
		events = events[k:]
	}
	var traced, total int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*) FILTER (session_source = 'trace'), count(*) FROM calls`).Scan(&traced, &total))
	require.Equal(t, total, traced, "every call's session is its trace")

	stateful := loadScenario(t, "loops", 1)
	loops := func(r *recommend.Report) map[string]string {
		out := map[string]string{}
		for tool, f := range findings(r, recommend.KindPollingLoop) {
			out[tool] = fmt.Sprintf("start %v, loops %v, runaway %v, median polls %v", f.Evidence["start_tool"], f.Evidence["loops"],
				f.Evidence["runaway_loops"], f.Evidence["median_polls"])
		}
		return out
	}
	// Every grant together (the runs found from the calls), then each
	// grant (its runs read from those the store keeps).
	grants, _, err := recommend.Grants(ctx, store.DB(), simulate.LoopsTruth.Server, now.Add(-recommend.DefaultParams().Window), now)
	require.NoError(t, err)
	found := 0
	for _, g := range append([]string{""}, grants...) {
		opts := recommend.Options{Server: simulate.LoopsTruth.Server, Grant: g, Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)}
		want, err := recommend.Recommend(ctx, stateful.DB(), opts)
		require.NoError(t, err)
		got, err := recommend.Recommend(ctx, store.DB(), opts)
		require.NoError(t, err)
		assert.Equal(t, loops(want), loops(got), "grant %q", g)
		assert.Equal(t, want.PollsPerLoop, got.PollsPerLoop, "grant %q: loops by polls", g)
		if g != "" {
			found += len(loops(want))
		}
	}
	assert.Equal(t, len(simulate.LoopsTruth.Polling), found, "the planted loops, each under its grant")
}
