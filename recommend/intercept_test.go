package recommend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// tourStore holds n events of the default scenario, as the README's tour does.
func tourStore(t *testing.T, n int) *analytics.Store {
	t.Helper()
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "tour.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var events []audit.Event
	_, err = simulate.Generate(ctx, simulate.Options{Seed: 1, Count: n, Now: now}, func(e audit.Event) error {
		events = append(events, e)
		return nil
	})
	require.NoError(t, err)
	for len(events) > 0 {
		k := min(len(events), 50000)
		_, err := store.Append(ctx, ingest.Batch{Events: events[:k]})
		require.NoError(t, err)
		events = events[k:]
	}
	return store
}

// refusedPerInstance replays the window's calls that passed the recorded
// gateway's other rules through p, counting each limit per gateway instance
// (the evaluator's session scope keyed by the instance) as Intercept does:
// a call answered with a JSON-RPC error takes no quota (Peek). It returns
// the calls per tool and how many the limits refused.
func refusedPerInstance(t *testing.T, store *analytics.Store, p *policy.Policy) (calls, refused map[string]int) {
	t.Helper()
	q := p.Clone()
	for _, r := range q.Tools {
		for i := range r.Limits {
			r.Limits[i].Scope = policy.ScopeSession
		}
	}
	rows, err := store.DB().Query(`SELECT ts, tool, coalesce(gateway, ''), decision = 'allowed' AND error_code IS NOT NULL FROM calls
		WHERE ts > $1 AND ts <= $2 AND decision IN ('allowed', 'rate_limited') ORDER BY ts, id`, now.Add(-30*24*time.Hour), now)
	require.NoError(t, err)
	defer rows.Close()
	e := policy.NewEvaluator(q)
	calls, refused = map[string]int{}, map[string]int{}
	for rows.Next() {
		var c policy.Call
		var givenBack bool
		require.NoError(t, rows.Scan(&c.TS, &c.Tool, &c.Session, &givenBack))
		calls[c.Tool]++
		decide := e.Evaluate
		if givenBack {
			decide = e.Peek
		}
		if decide(c).Decision == policy.RateLimited {
			refused[c.Tool]++
		}
	}
	require.NoError(t, rows.Err())
	return calls, refused
}

// interceptRun recommends for the tour's 100,000 events with Intercept as
// the target, and returns the store, the options and the report.
func interceptRun(t *testing.T) (*analytics.Store, recommend.Options, *recommend.Report) {
	t.Helper()
	store := tourStore(t, 100000)
	opts := recommend.Options{Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t),
		Target: recommend.FormatIntercept}
	r, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)
	return store, opts, r
}

func TestInterceptLimitsPerInstance(t *testing.T) {
	store, opts, r := interceptRun(t)
	g := r.Gateway
	require.NotNil(t, g)
	assert.Equal(t, policy.ScopeInstance, g.Scope)

	const polled = "vm_agent_exec_status"
	limits := map[string]recommend.GatewayLimit{}
	for _, l := range g.Limits {
		limits[l.Tool] = l
	}
	proposed := 0
	for _, f := range r.Findings {
		if f.Suppressed != nil || f.Action.Op != recommend.OpRateLimit {
			continue
		}
		proposed++
		l, ok := limits[f.Tool]
		require.True(t, ok, "%s: its limit is computed per instance", f.Tool)
		assert.Equal(t, policy.ScopeInstance, l.Limit.Scope)
		assert.Equal(t, f.Action.Limit.Counter, l.Limit.Counter)
		want := max(int(math.Ceil(l.Stats.P99*opts.Params.Headroom-1e-9)), opts.Params.MinLimit)
		assert.Equal(t, want, l.Limit.Max, "%s: ceil(p99 × headroom) with the floor", f.Tool)
		assert.Contains(t, []int64{1, 2}, l.Instances, "%s: the simulator's two gateway instances (rare tools: one)", f.Tool)
	}
	assert.Greater(t, proposed, 5)
	require.Contains(t, limits, polled)
	require.Equal(t, policy.ScopeSession, limits[polled].Proposed.Scope)
	assert.Equal(t, int64(2), limits[polled].Instances)

	// The per-instance peaks, counted here independently for a tool that is not polled.
	var peak int
	require.NoError(t, store.DB().QueryRow(`SELECT max(n) FROM (SELECT gateway, epoch_ms(ts) // 60000, count(*) AS n FROM calls
		WHERE tool = 'get_vm_status' AND ts > $1 AND ts <= $2 AND decision IN ('allowed', 'rate_limited') GROUP BY ALL)`,
		now.Add(-30*24*time.Hour), now).Scan(&peak))
	assert.Equal(t, float64(peak), limits["get_vm_status"].Stats.Max)

	// Replayed per instance, as Intercept counts: the per-session limits of
	// policy.json refuse most polls; the per-instance ones refuse (almost) none.
	calls, before := refusedPerInstance(t, store, r.Policy)
	_, after := refusedPerInstance(t, store, g.Policy)
	assert.Greater(t, float64(before[polled]), 0.5*float64(calls[polled]), "per-session values in a per-instance counter")
	for tool, n := range after {
		assert.LessOrEqual(t, float64(n), 0.01*float64(calls[tool]), "%s: %d of %d calls refused per instance", tool, n, calls[tool])
	}
	assert.Equal(t, int64(after[polled]), limits[polled].Refused, "the SQL count agrees with the evaluator")

	// The YAML carries them, with the scope in its header.
	var out bytes.Buffer
	require.NoError(t, recommend.WriteIntercept(&out, nil, r, false))
	assert.Contains(t, out.String(), "# Scope: Intercept counts each rate_limit in its state store")
	assert.Contains(t, out.String(), "  "+polled+":\n    rules:\n")
	assert.Contains(t, out.String(), "per instance: p99 of per-instance peaks")
	assert.NotContains(t, out.String(), "NOT CARRIED OVER")

	// Without them (a report made for another format), the session limits
	// cannot be carried over: the writer refuses, or with allowLossy lists them.
	r.Gateway = nil
	err := recommend.WriteIntercept(&bytes.Buffer{}, nil, r, false)
	var lossy *recommend.LossyError
	require.True(t, errors.As(err, &lossy), "%v", err)
	assert.Len(t, lossy.Dropped, len(g.Limits))
	assert.Contains(t, err.Error(), "/tools/"+polled+"/limits/"+polled+"_rate: ")
	var yaml, stderr bytes.Buffer
	require.NoError(t, recommend.WriteIntercept(&yaml, &stderr, r, true))
	assert.Equal(t, len(g.Limits), strings.Count(stderr.String(), "not carried over to Intercept (--allow-lossy)"))
	assert.Contains(t, yaml.String(), "# NOT CARRIED OVER: ")
}

// A current cap that agents never hit gives way to the proposal's limit,
// which Intercept's output then recomputes per gateway instance: where
// that raises the current cap, the output widens access, and the widening
// is a loosening finding (what --fail-on widen counts), though policy.json
// alone does not widen. The current policy here is a first run's
// proposal with each cap just under the instance's limit.
func TestInterceptLimitsThatRaiseACurrentCapAreLoosenings(t *testing.T) {
	store, opts, first := interceptRun(t)
	raised := map[string]bool{} // tools whose per-instance limit lets more through than policy.json's
	for _, l := range first.Gateway.Limits {
		if recommend.Loosenings(first.Policy, first.Gateway.Policy, l.Tool) != nil {
			raised[l.Tool] = true
		}
	}
	require.NotEmpty(t, raised, "the simulator's two instances carry more than one session or grant")

	// The current caps: policy.json's own, each just under what the
	// instance's limit will let through, which agents never hit (the
	// simulated gateway refused none of these tools' calls).
	current := first.Policy.Clone()
	for _, l := range first.Gateway.Limits {
		if !raised[l.Tool] {
			continue
		}
		r := current.Tools[l.Tool]
		for i := range r.Limits {
			if r.Limits[i].Counter == l.Limit.Counter {
				r.Limits[i].Max = l.Limit.Max - 1
			}
		}
	}
	opts.Current = current
	second, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)
	widen := map[string]bool{}
	for _, w := range recommend.OpenWidenings(second) {
		widen[w.Tool] = true
	}
	silent := 0 // tools that policy.json alone leaves as they were
	for _, l := range second.Gateway.Limits {
		own := recommend.Loosenings(current, second.Policy, l.Tool)
		var extra []string
		for _, w := range recommend.Loosenings(current, second.Gateway.Policy, l.Tool) {
			if !slices.Contains(own, w) {
				extra = append(extra, w)
			}
		}
		if len(extra) == 0 {
			continue
		}
		if len(own) == 0 {
			silent++
		}
		i := slices.IndexFunc(second.Findings, func(f recommend.Finding) bool { return f.Kind == recommend.KindLoosening && f.Tool == l.Tool })
		if !assert.GreaterOrEqual(t, i, 0, "%s: the intercept output's widening is a finding", l.Tool) {
			continue
		}
		f := second.Findings[i]
		for _, w := range extra {
			assert.Contains(t, f.Summary, w+" (in the intercept output)")
		}
		assert.Equal(t, recommend.OpWiden, f.Action.Op)
		assert.True(t, widen[l.Tool], "%s: listed among the open widenings", l.Tool)
	}
	assert.Positive(t, silent, "caps raised by the intercept output alone")

}

// currentWithRule is a copy of first's proposed policy, as the current one of
// a next run, with a rule (maybe empty) for tool, which it lists.
func currentWithRule(t *testing.T, first *recommend.Report, tool string) *policy.Policy {
	t.Helper()
	current := first.Policy.Clone()
	require.Contains(t, current.Tools, tool)
	if current.Tools[tool] == nil {
		current.Tools[tool] = &policy.ToolRule{}
	}
	return current
}

// A rule of the current policy that the Intercept output cannot carry over
// (left out under --allow-lossy) is a widening at the gateway: a loosening of
// its tool marked "(in the intercept output)", though policy.json keeps it.
func TestInterceptDroppedRulesAreLoosenings(t *testing.T) {
	store, opts, first := interceptRun(t)
	const tool = "get_vm_status"
	current := currentWithRule(t, first, tool)
	kept := policy.DenyRule{Conditions: []policy.Condition{{Path: "args.node", Op: "eq", Value: []byte(`"pve9"`)}}}
	twoConds := policy.DenyRule{Conditions: []policy.Condition{
		{Path: "args.node", Op: "eq", Value: []byte(`"pve1"`)}, {Path: "args.vmid", Op: "lt", Value: []byte(`100`)}}}
	current.Tools[tool].DenyIf = append(current.Tools[tool].DenyIf, kept, twoConds)
	require.NoError(t, current.Validate())
	opts.Current = current
	second, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)

	assert.Empty(t, recommend.Loosenings(current, second.Policy, tool), "policy.json keeps both rules")
	i := slices.IndexFunc(second.Findings, func(f recommend.Finding) bool { return f.Kind == recommend.KindLoosening && f.Tool == tool })
	require.GreaterOrEqual(t, i, 0, "the dropped rule is a loosening of %s", tool)
	f := second.Findings[i]
	assert.Contains(t, f.Summary, `condition removed: deny_if args.node eq "pve1" and args.vmid lt 100 (in the intercept output)`)
	assert.NotContains(t, f.Summary, "pve9", "the rule Intercept carries is not a widening")
	assert.Equal(t, recommend.OpWiden, f.Action.Op)
	assert.True(t, slices.ContainsFunc(recommend.OpenWidenings(second), func(w recommend.Widening) bool { return w.Tool == tool }),
		"--fail-on widen counts it")
}

// A field or tool of the current policy that the Intercept output leaves
// out (an unknown field, a tool named *) is a widening at the gateway too:
// "field removed: <pointer>", which --fail-on widen counts, though no rule
// of the enforced policy shows it missing.
func TestInterceptDroppedFieldsAreLoosenings(t *testing.T) {
	store, opts, first := interceptRun(t)
	const tool = "get_vm_status"
	current := currentWithRule(t, first, tool)
	current.Tools[tool].Extra = map[string]json.RawMessage{"max_payload": []byte(`1024`)}
	current.Tools["*"] = &policy.ToolRule{DenyIf: []policy.DenyRule{{OnDeny: "ask first"}}}
	require.NoError(t, current.Validate())
	opts.Current = current
	second, err := recommend.Recommend(context.Background(), store.DB(), opts)
	require.NoError(t, err)

	for want, changed := range map[string]string{
		tool: "field removed: /tools/get_vm_status/max_payload (in the intercept output)",
		"*":  "field removed: /tools/* (in the intercept output)",
	} {
		i := slices.IndexFunc(second.Findings, func(f recommend.Finding) bool { return f.Kind == recommend.KindLoosening && f.Tool == want })
		if !assert.GreaterOrEqual(t, i, 0, "the dropped %s is a loosening of %s", changed, want) {
			continue
		}
		f := second.Findings[i]
		assert.Contains(t, f.Summary, changed)
		assert.Contains(t, f.Evidence["changes"], changed)
		assert.True(t, slices.ContainsFunc(recommend.OpenWidenings(second), func(w recommend.Widening) bool { return w.Tool == want }),
			"--fail-on widen counts %s", want)
	}
	other := slices.IndexFunc(second.Findings, func(f recommend.Finding) bool {
		return f.Kind == recommend.KindLoosening && f.Tool == "list_vms" && strings.Contains(f.Summary, "field removed")
	})
	assert.Negative(t, other, "a tool's field concerns that tool only")
}
