package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// The daemon's schedule reclusters the sealed days after its first wait
// and says so in its log.
func TestReclusterDailyClustersSealedDays(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "calls.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	old := time.Now().UTC().Add(-20 * 24 * time.Hour)
	_, err = store.Append(ctx, ingest.Batch{Events: []audit.Event{
		{ID: "a", TS: old, Server: "pve", Tool: "list_vms", Decision: audit.Allowed, Grant: "ops"},
		{ID: "b", TS: old.Add(time.Minute), Server: "pve", Tool: "list_vms", Decision: audit.Allowed, Grant: "ci"},
	}})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		reclusterDaily(ctx, store, slog.New(slog.NewTextHandler(logs, nil)), time.Millisecond)
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "clustered 2 calls in 2 spans") },
		10*time.Second, 10*time.Millisecond, "the sealed weeks of the calls, logged")
	var until time.Time
	require.NoError(t, store.DB().QueryRowContext(ctx, `SELECT clustered_until FROM calls_clustered`).Scan(&until))
	assert.Equal(t, old.Truncate(24*time.Hour).Add(2*analytics.ReclusterSpan), until.UTC())
	cancel()
	<-done
	assert.NotContains(t, logs.String(), "level=ERROR")
}
