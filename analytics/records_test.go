package analytics

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestImportCatalogKeepsFirstSeen(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	t1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(10 * 24 * time.Hour)
	tool := func(name, cat string) ToolRecord {
		return ToolRecord{Tool: name, Description: "d", InputSchema: []byte(`{"type":"object"}`), Category: cat, Severity: "info", RiskSource: "name"}
	}
	added, err := s.ImportCatalog(ctx, "srv", "a.json", t1, []ToolRecord{tool("get_a", "read"), tool("delete_b", "destructive")})
	require.NoError(t, err)
	assert.Equal(t, 2, added)
	added, err = s.ImportCatalog(ctx, "srv", "b.json", t2, []ToolRecord{tool("get_a", "write"), tool("new_c", "read")})
	require.NoError(t, err)
	assert.Equal(t, 1, added)

	tools, err := s.Tools(ctx, "srv")
	require.NoError(t, err)
	require.Len(t, tools, 3)
	byName := map[string]ToolRecord{}
	for _, tr := range tools {
		byName[tr.Tool] = tr
	}
	assert.True(t, byName["get_a"].FirstSeen.Equal(t1), "first_seen is kept")
	assert.True(t, byName["get_a"].LastSeen.Equal(t2), "last_seen moves")
	assert.Equal(t, "write", byName["get_a"].Category, "classification refreshed")
	assert.True(t, byName["new_c"].FirstSeen.Equal(t2))
	assert.True(t, byName["delete_b"].LastSeen.Equal(t1), "a tool no longer listed keeps its last import")
	assert.JSONEq(t, `{"type":"object"}`, string(byName["get_a"].InputSchema))
	first, ok, err := s.FirstCatalogImport(ctx, "srv")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, first.Equal(t1))
}

func TestPolicyHistory(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	changed, err := s.ImportPolicy(ctx, PolicyRecord{Server: "srv", Source: "p.json", ImportedAt: at, Document: []byte(`{"version":"1"}`)})
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = s.ImportPolicy(ctx, PolicyRecord{Server: "srv", Source: "p.json", ImportedAt: at.Add(time.Hour), Document: []byte(`{"version":"1"}`)})
	require.NoError(t, err)
	assert.False(t, changed, "the same document is recorded once")
	_, err = s.ImportPolicy(ctx, PolicyRecord{Server: "srv", Source: "p2.json", ImportedAt: at.Add(2 * time.Hour), Document: []byte(`{"version":"1","default":"deny"}`)})
	require.NoError(t, err)
	hist, err := s.PolicyHistory(ctx, "srv", "")
	require.NoError(t, err)
	require.Len(t, hist, 2)
	latest, err := s.LatestPolicy(ctx, "srv", "")
	require.NoError(t, err)
	assert.JSONEq(t, `{"version":"1","default":"deny"}`, string(latest.Document))
	none, err := s.LatestPolicy(ctx, "srv", "other-grant")
	require.NoError(t, err)
	assert.Nil(t, none)
}

func TestSuppressionsAreRecorded(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const f1 = "dead_tool:srv:*:delete_vm"
	action, err := s.Suppress(ctx, Suppression{FindingID: f1, Reason: "r1", Owner: "alice", Until: at.Add(24 * time.Hour), CreatedAt: at})
	require.NoError(t, err)
	assert.Equal(t, "suppress", action)
	action, err = s.Suppress(ctx, Suppression{FindingID: f1, Reason: "r2", Owner: "bob", Until: at.Add(48 * time.Hour), CreatedAt: at.Add(time.Hour)})
	require.NoError(t, err)
	assert.Equal(t, "update", action)
	require.NoError(t, s.Unsuppress(ctx, f1, "carol", at.Add(2*time.Hour)))
	assert.ErrorIs(t, s.Unsuppress(ctx, f1, "carol", at.Add(3*time.Hour)), ErrNoSuppression)
	// Another server's suppression is in its log, not in srv's.
	_, err = s.Suppress(ctx, Suppression{FindingID: "dead_tool:srv2:*:delete_vm", Reason: "theirs", Owner: "dave", Until: at.Add(24 * time.Hour), CreatedAt: at})
	require.NoError(t, err)

	sups, err := s.Suppressions(ctx)
	require.NoError(t, err)
	assert.Len(t, sups, 1, "srv2's")
	log, err := s.SuppressionLog(ctx, "srv", at)
	require.NoError(t, err)
	require.Len(t, log, 3)
	assert.Equal(t, []string{"suppress", "update", "unsuppress"}, []string{log[0].Action, log[1].Action, log[2].Action})
	assert.Equal(t, "carol", log[2].Owner)
	later, err := s.SuppressionLog(ctx, "srv", at.Add(90*time.Minute))
	require.NoError(t, err)
	assert.Len(t, later, 1)
	theirs, err := s.SuppressionLog(ctx, "srv2", at)
	require.NoError(t, err)
	require.Len(t, theirs, 1)
	assert.Equal(t, "dave", theirs[0].Owner)
}
