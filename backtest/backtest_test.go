package backtest_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/backtest"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

const day = 24 * time.Hour

// The loops scenario's planted ground truth falls on either side of the
// folds: over 23 days of training and 7 of test, ending a week ago (fold 1)
// and now (fold 2).
func TestBacktestFindsPlantedErrors(t *testing.T) {
	store := loadScenario(t, "loops")
	truth := simulate.LoopsTruth
	res, err := backtest.Run(context.Background(), store.DB(), backtest.Options{Server: truth.Server, Now: now,
		Train: 23 * day, Test: 7 * day, Folds: 2, Params: recommend.DefaultParams(), GeneratedAt: now})
	require.NoError(t, err)
	require.Len(t, res.Folds, 2)
	f1, f2 := res.Folds[0], res.Folds[1]
	assert.Equal(t, now.Add(-7*day), f1.TestTo)
	assert.Equal(t, f1.TestFrom, f1.TrainTo)
	assert.Equal(t, now, f2.TestTo)

	ops1, ops2 := grant(t, f1, "ops-bot"), grant(t, f2, "ops-bot")
	// The retry storm and the delete_vm are the first calls of their tools,
	// both in fold 1's test window: the proposal trained before never saw
	// them and refuses them.
	for _, planted := range []string{truth.RetryStorms[0].Tool, truth.RareRisky[0].Tool} {
		tu := toolUnder(ops1, planted)
		require.NotNil(t, tu, "%s is used first in the test window: under-privilege", planted)
		assert.Equal(t, []backtest.Cause{{Decision: "denied", Rule: "(default deny)", Calls: tu.Calls}}, tu.Causes)
	}
	assert.Equal(t, int64(truth.RetryStorms[0].Calls+truth.RareRisky[0].Calls), ops1.Under.Calls)
	require.NotNil(t, ops1.Under.Rate)
	assert.InDelta(t, float64(ops1.Under.Calls)/float64(ops1.LegitimateCalls), *ops1.Under.Rate, 1e-4)
	assert.NotEmpty(t, ops1.Under.Examples)

	// The tool used once 20 days ago is allowed and unused since.
	assert.Contains(t, ops1.Over.Tools, truth.UsedOnce.Tool)
	assert.Contains(t, ops2.Over.Tools, truth.UsedOnce.Tool)
	assert.InDelta(t, float64(ops2.Over.Count)/float64(ops2.Over.AllowedTools), *ops2.Over.Rate, 1e-4)

	// Each test window holds one planted runaway loop; the limits trained
	// on the weeks before cut most of its polls, and those polls are not
	// counted as under-privilege.
	assert.Equal(t, int64(truth.Runaway[0].Polls), ops1.RunawayPolls)
	assert.Equal(t, int64(truth.Runaway[1].Polls), ops2.RunawayPolls)
	assert.Positive(t, ops1.RunawayPollsCut)
	assert.Greater(t, ops2.RunawayPollsCut, int64(truth.Runaway[1].Polls/2))
	assert.Nil(t, toolUnder(ops2, "vm_agent_exec_status"), "runaway polls are cut, not under-privilege")
	assert.Zero(t, ops2.Under.Calls)

	// The summary spreads ops-bot's scores over both folds.
	var sum *backtest.Summary
	for i := range res.Summary {
		if res.Summary[i].Grant == "ops-bot" {
			sum = &res.Summary[i]
		}
	}
	require.NotNil(t, sum)
	assert.Equal(t, 2, sum.Folds)
	m := metric(t, *sum, "under_privilege_calls")
	assert.Equal(t, 0.0, m.Min)
	assert.Equal(t, float64(ops1.Under.Calls), m.Max)
}

// A training window too short for the data gates gives drafts that say
// which gate failed and why; a test window without calls is an error.
func TestBacktestGatesAndNoTestTraffic(t *testing.T) {
	store := loadScenario(t, "loops")
	ctx := context.Background()
	server := simulate.LoopsTruth.Server
	res, err := backtest.Run(ctx, store.DB(), backtest.Options{Server: server, Grant: "ops-bot", Now: now,
		Train: 2 * day, Test: 7 * day, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	s := res.Folds[0].Grants[0]
	assert.True(t, s.Draft)
	assert.Equal(t, "low", s.Confidence)
	assert.Contains(t, s.FailedGates[0], "min_days")

	_, err = backtest.Run(ctx, store.DB(), backtest.Options{Server: server, Now: now.Add(10 * day),
		Train: 60 * day, Test: 7 * day, Params: recommend.DefaultParams()})
	require.ErrorIs(t, err, backtest.ErrNoTestTraffic)
	assert.Contains(t, err.Error(), server)

	_, err = backtest.Run(ctx, store.DB(), backtest.Options{Server: server, Now: now.Add(90 * day),
		Train: 23 * day, Test: 7 * day, Params: recommend.DefaultParams()})
	require.ErrorIs(t, err, recommend.ErrNoCalls, "nothing to train on")
}

// Older folds that start before the history say so instead of failing.
func TestBacktestFoldsBeforeHistory(t *testing.T) {
	store := loadScenario(t, "loops")
	res, err := backtest.Run(context.Background(), store.DB(), backtest.Options{Server: simulate.LoopsTruth.Server, Grant: "helpdesk",
		Now: now, Train: 14 * day, Test: 7 * day, Folds: 5, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	require.Len(t, res.Folds, 5)
	assert.NotEmpty(t, res.Folds[0].Note)
	assert.Empty(t, res.Folds[0].Grants)
	assert.Empty(t, res.Folds[4].Note)
	require.Len(t, res.Summary, 1)
	assert.Equal(t, "helpdesk", res.Summary[0].Grant)
	assert.GreaterOrEqual(t, res.Summary[0].Folds, 2)
}

func grant(t *testing.T, f backtest.Fold, g string) backtest.Score {
	return find(t, f.Grants, func(s backtest.Score) bool { return s.Grant == g }, "grant "+g)
}

func metric(t *testing.T, s backtest.Summary, name string) backtest.Metric {
	return find(t, s.Metrics, func(m backtest.Metric) bool { return m.Name == name }, "metric "+name)
}

// find is the one item that matches, failing the test without one.
func find[T any](t *testing.T, items []T, match func(T) bool, what string) T {
	t.Helper()
	i := slices.IndexFunc(items, match)
	require.GreaterOrEqual(t, i, 0, "no %s", what)
	return items[i]
}

func toolUnder(s backtest.Score, tool string) *backtest.ToolUnder {
	for i := range s.Under.ByTool {
		if s.Under.ByTool[i].Tool == tool {
			return &s.Under.ByTool[i]
		}
	}
	return nil
}

// TestBacktestFindsTestLoopsWithTheGrantsInputs: a test window's runaway
// loops are found with the grant's inputs, as its recommendation there
// finds them: where the catalog makes the polled tool an exec tool and
// every risky tool is rare, it goes behind approval and has no runaway
// loop; without that catalog, the planted loop is one.
func TestBacktestFindsTestLoopsWithTheGrantsInputs(t *testing.T) {
	store := loadScenario(t, "loops")
	ctx := context.Background()
	truth := simulate.LoopsTruth
	planted := truth.Runaway[1] // the one in the last week
	p := recommend.DefaultParams()
	p.RareMaxSessionShare = 1
	cat := []catalog.Classification{{Tool: planted.PollTool, Category: catalog.Exec, Source: catalog.SourceOverride, Why: "test"}}
	inputs := func(context.Context, string) (recommend.Options, error) { return recommend.Options{Catalog: cat}, nil }

	week := p
	week.Window = 7 * day
	rec, err := recommend.Recommend(ctx, store.DB(), recommend.Options{Server: truth.Server, Grant: planted.Grant, Now: now, Params: week, Catalog: cat})
	require.NoError(t, err)
	require.Empty(t, rec.Runaway, "the recommendation of the test window has no loop finding for a tool behind approval")

	run := func(inputs func(context.Context, string) (recommend.Options, error)) backtest.Score {
		res, err := backtest.Run(ctx, store.DB(), backtest.Options{Server: truth.Server, Grant: planted.Grant, Now: now,
			Train: 23 * day, Test: 7 * day, Params: p, Inputs: inputs})
		require.NoError(t, err)
		return res.Folds[0].Grants[0]
	}
	assert.Zero(t, run(inputs).RunawayPolls, "the loops of the grant's own recommendation: none")
	assert.Equal(t, int64(planted.Polls), run(nil).RunawayPolls, "without the catalog, the planted loop")
}

// TestBacktestTakesTheLoopsItIsGiven: loops the caller found already for a
// grant's test window (KnownLoops) are the ones scored against; the
// backtest asks for every grant's window and finds the loops itself where
// the caller has none.
func TestBacktestTakesTheLoopsItIsGiven(t *testing.T) {
	store := loadScenario(t, "loops")
	truth := simulate.LoopsTruth
	planted := truth.Runaway[1]
	run := func(known func(string, time.Time, time.Time) ([]recommend.RunawayLoop, bool)) backtest.Fold {
		res, err := backtest.Run(context.Background(), store.DB(), backtest.Options{Server: truth.Server, Now: now,
			Train: 23 * day, Test: 7 * day, Params: recommend.DefaultParams(), KnownLoops: known})
		require.NoError(t, err)
		return res.Folds[0]
	}
	found := run(nil)
	var mu sync.Mutex // grants are scored two at a time
	var asked []string
	given := run(func(grant string, from, to time.Time) ([]recommend.RunawayLoop, bool) {
		assert.Equal(t, now.Add(-7*day), from)
		assert.Equal(t, now, to)
		mu.Lock()
		asked = append(asked, grant)
		mu.Unlock()
		return nil, grant == planted.Grant // none for its grant; the others' found
	})
	var grants []string
	for _, s := range found.Grants {
		grants = append(grants, s.Grant)
	}
	slices.Sort(asked)
	assert.Equal(t, grants, asked)
	assert.Equal(t, int64(planted.Polls), grant(t, found, planted.Grant).RunawayPolls)
	assert.Nil(t, toolUnder(grant(t, found, planted.Grant), planted.PollTool))
	s := grant(t, given, planted.Grant)
	assert.Zero(t, s.RunawayPolls, "no loop given, none scored")
	require.NotNil(t, toolUnder(s, planted.PollTool), "the polls the proposal cuts are under-privilege outside a loop")
	for i, s := range found.Grants {
		if s.Grant != planted.Grant {
			assert.Equal(t, s, given.Grants[i], "loops found as without KnownLoops")
		}
	}
}
