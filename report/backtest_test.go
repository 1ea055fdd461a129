package report

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
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
	bt, err := backtestWindow(ctx, store.DB(), ropts, week, week, fixedNow, other)
	require.NoError(t, err)
	assert.Equal(t, own, bt.Result)
}

// A report whose window holds none of the grants the window before it
// proposed for (a credential rotated) says so in its backtest section
// instead of failing.
func TestBacktestOfRotatedGrantsIsANote(t *testing.T) {
	store := emptyStore(t)
	var evs []audit.Event
	for d := range 30 {
		grant := "ops-2025"
		if d < 7 {
			grant = "ops-2026"
		}
		for i := range 4 {
			evs = append(evs, audit.Event{ID: fmt.Sprintf("e-%d-%d", d, i), TS: fixedNow.Add(-time.Duration(d)*24*time.Hour - time.Duration(i+1)*time.Hour),
				Server: "srv", Grant: grant, Session: fmt.Sprintf("s-%d", d), Tool: "list_vms", Method: audit.DefaultMethod,
				Decision: audit.Allowed, Status: "ok"})
		}
	}
	appendEvents(t, store, evs...)
	p := recommend.DefaultParams()
	p.Window = 23 * 24 * time.Hour
	r, err := Build(context.Background(), store, Options{Server: "srv", Window: week, Now: fixedNow, GeneratedAt: fixedNow,
		Recommend: recommend.GrantsOptions{Params: p}})
	require.NoError(t, err)
	require.NotNil(t, r.Backtest)
	assert.Nil(t, r.Backtest.Result)
	assert.Contains(t, r.Backtest.Note, "the grants changed")
}

// A report longer than recommend.window backtests a proposal trained on
// recommend.window, as SPEC says, not on the report's longer window.
func TestReportBacktestTrainsOnTheRecommendationWindow(t *testing.T) {
	store := proxmoxStore(t)
	ropts := inputs(t, store)
	day := 24 * time.Hour
	ropts.Params.Window = 4 * day
	r, err := Build(context.Background(), store, Options{Server: server, Window: 9 * day, Now: fixedNow, GeneratedAt: fixedNow, Recommend: ropts})
	require.NoError(t, err)
	require.NotNil(t, r.Backtest)
	require.NotNil(t, r.Backtest.Result, r.Backtest.Note)
	f := r.Backtest.Result.Folds[0]
	assert.Equal(t, fixedNow.Add(-9*day), f.TestFrom)
	assert.Equal(t, f.TestFrom.Add(-4*day), f.TrainFrom, "trained on recommend.window")
}
