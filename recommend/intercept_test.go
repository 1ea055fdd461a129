package recommend_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
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
// (the evaluator's session scope keyed by the instance), and returns the
// calls per tool and how many the limits refused.
func refusedPerInstance(t *testing.T, store *analytics.Store, p *policy.Policy) (calls, refused map[string]int) {
	t.Helper()
	q := p.Clone()
	for _, r := range q.Tools {
		for i := range r.Limits {
			r.Limits[i].Scope = policy.ScopeSession
		}
	}
	rows, err := store.DB().Query(`SELECT ts, tool, coalesce(gateway, '') FROM calls
		WHERE ts > $1 AND ts <= $2 AND decision IN ('allowed', 'rate_limited') ORDER BY ts, id`, now.Add(-30*24*time.Hour), now)
	require.NoError(t, err)
	defer rows.Close()
	e := policy.NewEvaluator(q)
	calls, refused = map[string]int{}, map[string]int{}
	for rows.Next() {
		var c policy.Call
		require.NoError(t, rows.Scan(&c.TS, &c.Tool, &c.Session))
		calls[c.Tool]++
		if e.Evaluate(c).Decision == policy.RateLimited {
			refused[c.Tool]++
		}
	}
	require.NoError(t, rows.Err())
	return calls, refused
}

func TestInterceptLimitsPerInstance(t *testing.T) {
	store := tourStore(t, 100000)
	ctx := context.Background()
	opts := recommend.Options{Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t),
		Target: recommend.FormatIntercept}
	r, err := recommend.Recommend(ctx, store.DB(), opts)
	require.NoError(t, err)
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
	err = recommend.WriteIntercept(&bytes.Buffer{}, nil, r, false)
	var lossy *recommend.LossyError
	require.True(t, errors.As(err, &lossy), "%v", err)
	assert.Len(t, lossy.Dropped, len(g.Limits))
	assert.Contains(t, err.Error(), "/tools/"+polled+"/limits/"+polled+"_rate: ")
	var yaml, stderr bytes.Buffer
	require.NoError(t, recommend.WriteIntercept(&yaml, &stderr, r, true))
	assert.Equal(t, len(g.Limits), strings.Count(stderr.String(), "not carried over to Intercept (--allow-lossy)"))
	assert.Contains(t, yaml.String(), "# NOT CARRIED OVER: ")
}
