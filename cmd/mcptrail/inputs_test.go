package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/policy"
)

// A grant's first policy of its own follows the server-wide one that was
// in force for it when it was recorded: a regression's revert restores
// that policy's rule (the latest server-wide policy recorded before it,
// not one recorded after), and the server-wide scope's own previous is
// unchanged.
func TestGrantsFirstPolicyFollowsTheServerWideOne(t *testing.T) {
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "p.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	record := func(grant, doc string, at time.Time) {
		_, err := store.ImportPolicy(ctx, analytics.PolicyRecord{Server: "srv", Grant: grant, Source: "t", ImportedAt: at, Document: []byte(doc)})
		require.NoError(t, err)
	}
	const wide = `{"version":"1","default":"allow","tools":{"list_backups":{"limits":[{"counter":"b","window":"minute","max":5}]}}}`
	record("", wide, t0)
	record("ops", `{"version":"1","default":"allow","hide":["list_backups"]}`, t0.Add(24*time.Hour))
	record("", `{"version":"1","default":"deny"}`, t0.Add(48*time.Hour)) // later: not what preceded ops' own

	sp, err := scopePolicies(ctx, store, "srv", "ops")
	require.NoError(t, err)
	require.NotNil(t, sp.previous, "the server-wide policy before ops' own")
	assert.Equal(t, 5, sp.previous.Tools["list_backups"].Limits[0].Max)
	assert.False(t, sp.serverWide)

	sp, err = scopePolicies(ctx, store, "srv", "")
	require.NoError(t, err)
	assert.Equal(t, policy.DefaultAllow, sp.previous.Default, "the server-wide scope's own previous")
}

// A policy given again, the same as the scope's latest record (CI passes
// the same file every run), keeps that record's previous: it is not its
// own previous, which would make a regression's revert restore nothing.
func TestGivenPolicyAgainKeepsItsPrevious(t *testing.T) {
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "p.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	a := &app{}
	give := func(doc string, at time.Time) *givenPolicy {
		a.now = at
		g, err := a.recordGivenPolicy(ctx, store, "srv", "ops", nil, &api.File{Name: "p.json", Content: []byte(doc)})
		require.NoError(t, err)
		return g
	}
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	give(`{"version":"1","default":"allow","tools":{"x":{"limits":[{"counter":"x","window":"minute","max":5}]}}}`, t0)
	v2 := `{"version":"1","default":"allow","hide":["x"]}`
	g := give(v2, t0.Add(time.Hour))
	require.NotNil(t, g.previous)
	assert.Equal(t, 5, g.previous.Tools["x"].Limits[0].Max)
	g = give(v2, t0.Add(2*time.Hour))
	require.NotNil(t, g.previous, "given again: the previous of the record it repeats")
	require.Contains(t, g.previous.Tools, "x")
	assert.Equal(t, 5, g.previous.Tools["x"].Limits[0].Max)
}
