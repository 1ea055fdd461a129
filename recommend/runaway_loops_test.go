package recommend_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// TestRunawayLoopsAreTheRecommendationsLoops: RunawayLoops, which a
// backtest scores a proposal against, finds the loops a whole
// recommendation of the same scope and window finds (Report.Runaway),
// including where it finds none because the polled tool goes behind
// approval: risky by the catalog given and rare under a session share of 1.
func TestRunawayLoopsAreTheRecommendationsLoops(t *testing.T) {
	store, opts := loopsScenario(t)
	ctx := context.Background()
	rep, err := recommend.Recommend(ctx, store.DB(), opts)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Runaway, "the scenario plants runaway loops")
	loops, err := recommend.RunawayLoops(ctx, store.DB(), opts)
	require.NoError(t, err)
	assert.Equal(t, rep.Runaway, loops)

	// The polled tools as exec tools, every risky tool rare: behind approval.
	for _, l := range rep.Runaway {
		opts.Catalog = append(opts.Catalog, catalog.Classification{Tool: l.Tool, Category: catalog.Exec, Source: catalog.SourceOverride, Why: "test"})
	}
	opts.Params.RareMaxSessionShare = 1
	rep, err = recommend.Recommend(ctx, store.DB(), opts)
	require.NoError(t, err)
	require.Empty(t, rep.Runaway, "no loop finding for a tool behind approval")
	loops, err = recommend.RunawayLoops(ctx, store.DB(), opts)
	require.NoError(t, err)
	assert.Empty(t, loops)

	_, err = recommend.RunawayLoops(ctx, store.DB(), recommend.Options{Server: "nobody", Now: now, Params: recommend.DefaultParams()})
	assert.ErrorIs(t, err, recommend.ErrNoCalls)
}

// TestProposalOnlyProposesTheSamePolicy: a recommendation that stops once
// the policy is proposed (a backtest's training run) proposes what the
// whole one does, with the same gates, confidence and runaway loops, and
// replays nothing.
func TestProposalOnlyProposesTheSamePolicy(t *testing.T) {
	store, opts := loopsScenario(t)
	ctx := context.Background()
	whole, err := recommend.Recommend(ctx, store.DB(), opts)
	require.NoError(t, err)
	require.NotEmpty(t, whole.Replay.ByTool, "the whole recommendation replays its proposal")
	opts.ProposalOnly = true
	only, err := recommend.Recommend(ctx, store.DB(), opts)
	require.NoError(t, err)
	assert.Equal(t, whole.Policy, only.Policy)
	assert.Equal(t, whole.Gates, only.Gates)
	assert.Equal(t, whole.Confidence, only.Confidence)
	assert.Equal(t, whole.Window, only.Window)
	assert.Equal(t, whole.Runaway, only.Runaway)
	assert.Empty(t, only.Replay.ByTool)
	// The findings that shape the policy, without those only reported.
	reported := []string{recommend.KindDeniedProbe, recommend.KindUnknownTool, recommend.KindAllowCandidate,
		recommend.KindRegression, recommend.KindLoosening}
	var shaping []recommend.Finding
	skipped := 0
	for _, f := range whole.Findings {
		if slices.Contains(reported, f.Kind) {
			skipped++
			continue
		}
		shaping = append(shaping, f)
	}
	require.Positive(t, skipped, "the scenario has findings that are only reported")
	assert.Equal(t, shaping, only.Findings)
}

// loopsScenario is the loops scenario's store and the options of a
// recommendation over its default window.
func loopsScenario(t *testing.T) (*analytics.Store, recommend.Options) {
	t.Helper()
	return loadScenario(t, "loops", 1), recommend.Options{Server: simulate.LoopsTruth.Server, Now: now, Params: recommend.DefaultParams()}
}
