package backtest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/backtest"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// The test window is replayed as recommend replays its own: with the
// grant's current policy, whose conditional refusals of calls without
// stored arguments the proposal's same conditions refuse again. Without it
// every such refusal counted as newly allowed, a widening the proposal
// does not make.
func TestBacktestReplaysWithTheCurrentPolicy(t *testing.T) {
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "b.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var evs []audit.Event
	for d := range 28 {
		for i := range 7 {
			e := audit.Event{ID: fmt.Sprintf("e-%d-%d", d, i), TS: now.Add(-time.Duration(d)*day - time.Duration(i+1)*time.Minute),
				Server: "srv", Grant: "g", Session: fmt.Sprintf("s-%d", d), Tool: "refund", Decision: audit.Allowed, Status: "ok", PolicyVersion: "v1"}
			if i < 3 {
				e.Decision, e.Status, e.Rule = audit.Denied, "", "/tools/refund/deny_if/0"
			}
			evs = append(evs, e)
		}
	}
	_, err = store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	current, err := policy.Parse([]byte(`{"version":"1","default":"deny","tools":{
		"refund":{"deny_if":[{"conditions":[{"path":"args.amount","op":"gte","value":500}],"on_deny":"no"}]}}}`), "current.json")
	require.NoError(t, err)
	inputs := func(context.Context, string) (recommend.Options, error) {
		return recommend.Options{Current: current}, nil
	}

	res, err := backtest.Run(ctx, store.DB(), backtest.Options{Server: "srv", Grant: "g", Now: now,
		Train: 14 * day, Test: 7 * day, Params: recommend.DefaultParams(), Inputs: inputs})
	require.NoError(t, err)
	s := res.Folds[0].Grants[0]
	require.EqualValues(t, 7*7, s.TestCalls)
	assert.Zero(t, s.NewlyAllowed, "the kept deny_if refuses its calls again")
}
