package backtest_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/simulate"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// loadScenario stores a simulated scenario, then the extra events, in a
// fresh database file.
func loadScenario(t *testing.T, scenario string, extra ...audit.Event) *analytics.Store {
	t.Helper()
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "b.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var batch []audit.Event
	flush := func() error {
		_, err := store.Append(ctx, ingest.Batch{Events: batch})
		batch = batch[:0]
		return err
	}
	_, err = simulate.Generate(ctx, simulate.Options{Scenario: scenario, Seed: 1, Now: now},
		func(e audit.Event) error {
			batch = append(batch, e)
			if len(batch) == 20000 {
				return flush()
			}
			return nil
		})
	require.NoError(t, err)
	batch = append(batch, extra...)
	require.NoError(t, flush())
	return store
}
