package recommend_test

import (
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// loadScenario stores a simulated scenario in a fresh database file.
func loadScenario(t *testing.T, scenario string, seed int64) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "r.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var batch []audit.Event
	flush := func() error {
		_, err := store.Append(context.Background(), ingest.Batch{Events: batch})
		batch = batch[:0]
		return err
	}
	_, err = simulate.Generate(context.Background(), simulate.Options{Scenario: scenario, Seed: seed, Now: now},
		func(e audit.Event) error {
			batch = append(batch, e)
			if len(batch) == 20000 {
				return flush()
			}
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, flush())
	return store
}

func proxmoxCatalog(t *testing.T) []catalog.Classification {
	t.Helper()
	c, err := catalog.Parse(catalog.ProxmoxToolsJSON(), "proxmox-mcp.tools.json")
	require.NoError(t, err)
	return c.Classify(nil)
}

func findings(r *recommend.Report, kind string) map[string]recommend.Finding {
	out := map[string]recommend.Finding{}
	for _, f := range r.Findings {
		if f.Kind == kind {
			out[f.Tool] = f
		}
	}
	return out
}

func TestLoopsScenarioGroundTruth(t *testing.T) {
	store := loadScenario(t, "loops", 1)
	truth := simulate.LoopsTruth
	opts := recommend.Options{Server: truth.Server, Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)}
	r, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)

	t.Run("polling loops, including a pair whose names share nothing", func(t *testing.T) {
		loops := findings(r, recommend.KindPollingLoop)
		require.Len(t, loops, len(truth.Polling), "exactly the planted pairs: %v", keys(loops))
		for _, pp := range truth.Polling {
			f, ok := loops[pp.PollTool]
			require.True(t, ok, "polling of %s after %s", pp.PollTool, pp.StartTool)
			runaway := 0
			for _, rl := range truth.Runaway {
				if rl.PollTool == pp.PollTool {
					runaway++
				}
			}
			assert.Equal(t, pp.StartTool, f.Evidence["start_tool"])
			assert.Equal(t, len(pp.Loops)+runaway, f.Evidence["loops"], pp.PollTool)
			assert.Equal(t, runaway, f.Evidence["runaway_loops"], pp.PollTool)
			counts := pp.PollCounts()
			assert.InDelta(t, median(counts), f.Evidence["median_polls"], 1.0, "median polls of %s", pp.PollTool)
			// The report's histogram: every planted loop of the pair by its polls, fewest first.
			want, got := map[int64]int64{}, map[int64]int64{}
			for _, n := range counts {
				want[int64(n)]++
			}
			for _, rl := range truth.Runaway {
				if rl.PollTool == pp.PollTool {
					want[int64(rl.Polls)]++
				}
			}
			hist := r.PollsPerLoop[recommend.LoopShape{Tool: pp.PollTool, Start: pp.StartTool}]
			for _, c := range hist {
				got[c.Polls] += c.Loops
			}
			assert.Equal(t, want, got, "loops of %s by polls", pp.PollTool)
			assert.True(t, slices.IsSortedFunc(hist, func(a, b recommend.LoopCount) int { return cmp.Compare(a.Polls, b.Polls) }), "fewest polls first")
			assert.InDelta(t, pp.Loops[0].Interval.Seconds(), f.Evidence["median_interval_s"], 0.2)
			assert.Less(t, f.Evidence["interval_cv"], 0.1)
			require.Equal(t, recommend.OpRateLimit, f.Action.Op)
			assert.Equal(t, policy.ScopeSession, f.Action.Limit.Scope)
			// Normal loops must finish under the limit.
			assert.GreaterOrEqual(t, f.Action.Limit.Max, maxInt(counts), "the limit lets the longest normal loop finish")
			if runaway > 0 {
				assert.Positive(t, f.Evidence["runaway_polls_refused"], "the limit cuts runaway loops")
				assert.Equal(t, "high", f.Severity)
			}
		}
	})

	t.Run("retry storm", func(t *testing.T) {
		storms := findings(r, recommend.KindRetryStorm)
		for _, s := range truth.RetryStorms {
			f, ok := storms[s.Tool]
			require.True(t, ok, "retry storm of %s", s.Tool)
			assert.Equal(t, int64(s.Calls), f.Evidence["max_repeats"])
		}
		assert.Len(t, storms, len(truth.RetryStorms))
		assert.NotContains(t, findings(r, recommend.KindPollingLoop), truth.RetryStorms[0].Tool, "a storm is not polling")
	})

	t.Run("denied probe", func(t *testing.T) {
		probes := findings(r, recommend.KindDeniedProbe)
		for _, p := range truth.DeniedProbes {
			f, ok := probes[p.Agent]
			require.True(t, ok, "probe by %s: %v", p.Agent, keys(probes))
			var tools []string
			for _, c := range p.Calls {
				tools = append(tools, c.Tool)
			}
			sort.Strings(tools)
			assert.Subset(t, f.Evidence["tools"], uniq(tools))
		}
	})

	t.Run("rare risky calls go behind approval", func(t *testing.T) {
		risky := findings(r, recommend.KindRiskyTool)
		for _, c := range truth.RareRisky {
			f, ok := risky[c.Tool]
			require.True(t, ok, c.Tool)
			assert.Equal(t, recommend.OpRequireApproval, f.Action.Op)
			rule := r.Policy.Tools[c.Tool]
			require.NotNil(t, rule)
			require.NotEmpty(t, rule.DenyIf)
			assert.True(t, rule.DenyIf[0].IsApproval())
		}
	})

	t.Run("a tool used once 20 days ago is used in a 30-day window", func(t *testing.T) {
		assert.NotContains(t, findings(r, recommend.KindUnusedTool), truth.UsedOnce.Tool)
		assert.Contains(t, r.Policy.Tools, truth.UsedOnce.Tool)
	})

	t.Run("unknown tool", func(t *testing.T) {
		f, ok := findings(r, recommend.KindUnknownTool)[truth.Unknown.Tool]
		require.True(t, ok)
		assert.Equal(t, int64(truth.Unknown.Calls), f.Evidence["calls"])
	})

	t.Run("proposed policy", func(t *testing.T) {
		p := r.Policy
		require.NoError(t, p.Validate())
		assert.Equal(t, policy.DefaultDeny, p.Default)
		unused := findings(r, recommend.KindUnusedTool)
		for tool, f := range unused {
			if f.Action.Op == recommend.OpHide {
				assert.Contains(t, p.Hide, tool)
				assert.NotContains(t, p.Tools, tool)
			}
		}
		assert.Greater(t, len(p.Hide), 200, "most of the 286 tools are unused")
		for _, u := range []string{"get_vm_status", "vm_agent_exec", "vm_agent_exec_status", "get_task_status"} {
			assert.Contains(t, p.Tools, u, "used tools stay allowed")
			assert.NotContains(t, p.Hide, u)
		}
	})

	t.Run("replay", func(t *testing.T) {
		rp := r.Replay
		assert.Equal(t, r.Window.Calls, rp.Calls)
		assert.Equal(t, rp.Calls, rp.Allowed+rp.Denied+rp.Hidden+rp.RateLimited+rp.ApprovalRequired)
		assert.Positive(t, rp.RateLimited, "runaway loops are cut")
		assert.Equal(t, rp.RateLimitedSessions, rp.RunawaySessions, "only the runaway sessions are rate-limited")
		assert.Equal(t, int64(len(truth.Runaway)), rp.RunawaySessions)
		assert.Contains(t, recommend.ReplaySentence(&rp), "all in 2 runaway sessions")
		assert.Equal(t, int64(truth.RareRisky[0].Calls), rp.ApprovalRequired)
	})

	t.Run("SQL replay matches the Go evaluator", func(t *testing.T) {
		from := now.Add(-recommend.DefaultParams().Window)
		fast, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{Server: truth.Server, From: from, To: now, Policy: r.Policy})
		require.NoError(t, err)
		exact, err := recommend.Run(context.Background(), store.DB(), recommend.ReplayOptions{Server: truth.Server, From: from, To: now, Policy: r.Policy, Exact: true})
		require.NoError(t, err)
		assert.Equal(t, exact, fast)
	})
}

func TestUsedOnceIsUnusedInAShortWindow(t *testing.T) {
	store := loadScenario(t, "loops", 1)
	truth := simulate.LoopsTruth
	p := recommend.DefaultParams()
	p.Window = 14 * 24 * time.Hour
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: truth.Server, Now: now, Params: p, Catalog: proxmoxCatalog(t)})
	require.NoError(t, err)
	f, ok := findings(r, recommend.KindUnusedTool)[truth.UsedOnce.Tool]
	require.True(t, ok)
	assert.Equal(t, recommend.OpHide, f.Action.Op)
	last, ok := f.Evidence["last_called"].(*time.Time)
	require.True(t, ok)
	require.NotNil(t, last)
	assert.WithinDuration(t, now.Add(-truth.UsedOnce.Ago), *last, time.Second)
}

func TestEnumerationIsNotPolling(t *testing.T) {
	store := loadScenario(t, "proxmox", 3)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)})
	require.NoError(t, err)
	loops := findings(r, recommend.KindPollingLoop)
	assert.Contains(t, loops, "vm_agent_exec_status")
	assert.NotContains(t, loops, "get_vm_status", "reading many VMs one after another is enumeration")
	assert.NotContains(t, loops, "get_vm_config")
}

func TestNoCalls(t *testing.T) {
	store := loadScenario(t, "small", 1)
	_, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "nope", Now: now, Params: recommend.DefaultParams()})
	require.ErrorIs(t, err, recommend.ErrNoCalls)
	assert.Contains(t, err.Error(), `"nope"`)
}

func TestDataGatesMakeADraft(t *testing.T) {
	store := loadScenario(t, "small", 1)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	assert.Equal(t, recommend.Low, r.Confidence)
	assert.True(t, r.Draft)
	gates := map[string]bool{}
	for _, g := range r.Gates {
		gates[g.Name] = g.OK
	}
	assert.False(t, gates["min_days"], "two days of data")
	assert.False(t, gates["catalog_present"])
	for _, f := range r.Findings {
		if f.Kind != recommend.KindAllowCandidate {
			assert.Equal(t, recommend.Low, f.Confidence, f.ID)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func uniq(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func median(v []int) float64 {
	s := append([]int(nil), v...)
	sort.Ints(s)
	n := len(s)
	if n%2 == 1 {
		return float64(s[n/2])
	}
	return float64(s[n/2-1]+s[n/2]) / 2
}

func maxInt(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
