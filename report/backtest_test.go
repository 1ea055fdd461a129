package report

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/backtest"
	"github.com/mcptrail/mcptrail/recommend"
)

// TestBacktestSharesTheRecommendationsLoops: where the report's window is
// its recommendation's, the backtest scores against the runaway loops that
// recommendation found there instead of finding them again, and scores
// exactly what a backtest of its own does.
func TestBacktestSharesTheRecommendationsLoops(t *testing.T) {
	store := proxmoxStore(t)
	ctx := context.Background()
	ropts := inputs(t, store)
	ropts.Params.Window = week
	r, err := Build(ctx, store, Options{Server: server, Window: week, Now: fixedNow, GeneratedAt: fixedNow, Recommend: ropts})
	require.NoError(t, err)
	require.NotNil(t, r.Backtest)
	require.NotNil(t, r.Backtest.Result, r.Backtest.Note)
	var loops int
	for _, rec := range r.FullRecommendations() {
		assert.Equal(t, r.Window.From, rec.Window.From, "the recommendation reads the report's window")
		loops += len(rec.Runaway)
	}
	require.Positive(t, loops, "the window holds runaway loops")

	own, err := backtest.Run(ctx, store.DB(), backtest.Options{Server: server, Now: fixedNow, Train: week, Test: week, Folds: 1,
		Params: ropts.Params, Inputs: ropts.Inputs, GeneratedAt: fixedNow})
	require.NoError(t, err)
	assert.Equal(t, own, r.Backtest.Result)
	var polls int64
	for _, s := range own.Folds[0].Grants {
		polls += s.RunawayPolls
	}
	assert.Positive(t, polls, "scored against those loops")

	// Loops of another window are not the test window's: found again.
	var other []*recommend.Report
	for _, rec := range r.FullRecommendations() {
		o := *rec
		o.Window.From, o.Runaway = rec.Window.From.Add(-week), nil
		other = append(other, &o)
	}
	ropts.Server, ropts.GeneratedAt = server, fixedNow
	bt, err := backtestWindow(ctx, store.DB(), ropts, week, fixedNow, other)
	require.NoError(t, err)
	assert.Equal(t, own, bt.Result)
}
