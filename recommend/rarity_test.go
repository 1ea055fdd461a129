package recommend_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// loadScaled stores a scenario with each event repeated times over: the same
// agents doing the same, in that many times more sessions.
func loadScaled(t *testing.T, scenario string, times int) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "r.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var batch []audit.Event
	flush := func() error {
		_, err := store.Append(context.Background(), ingest.Batch{Events: batch})
		batch = batch[:0]
		return err
	}
	_, err = simulate.Generate(context.Background(), simulate.Options{Scenario: scenario, Seed: 1, Now: now},
		func(e audit.Event) error {
			for k := range times {
				c := e
				c.ID = fmt.Sprintf("%s#%d", e.ID, k)
				if e.Session != "" {
					c.Session = fmt.Sprintf("%s#%d", e.Session, k)
				}
				batch = append(batch, c)
			}
			if len(batch) >= 20000 {
				return flush()
			}
			return nil
		})
	require.NoError(t, err)
	require.NoError(t, flush())
	return store
}

// The same agents' traffic five times over gives every risky tool the same
// verdict: rarity is a share of the scope's sessions, not a count (with
// counts, a tool used once flipped from "behind approval" to "regular use").
func TestRarityDoesNotFlipWithVolume(t *testing.T) {
	verdicts := func(times int) map[string]string {
		store := loadScaled(t, "proxmox", times)
		r, err := recommend.Recommend(context.Background(), store.DB(),
			recommend.Options{Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)})
		require.NoError(t, err)
		out := map[string]string{}
		for tool, f := range findings(r, recommend.KindRiskyTool) {
			out[tool] = string(f.Action.Op) + " " + fmt.Sprint(f.Evidence["rarity_rule"])
		}
		return out
	}
	once, five := verdicts(1), verdicts(5)
	require.NotEmpty(t, once)
	assert.Equal(t, once, five)
	approval := 0
	for _, v := range once {
		if v == string(recommend.OpRequireApproval)+" session_share" {
			approval++
		}
	}
	assert.Positive(t, approval, "some rarely used risky tool goes behind approval: %v", once)
}
