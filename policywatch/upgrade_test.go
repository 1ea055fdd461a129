package policywatch

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

// A regression raised before alert ids left out the version's first call
// (recorded under the older id) is not raised again after the upgrade.
func TestARegressionRaisedUnderTheOlderIDIsNotRaisedAgain(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "w.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	pc := simulate.PolicyChange{Server: "pve.lab", Grant: "ops", Change: now.Add(-time.Hour), Refused: simulate.PolicyChangeUsedDaily,
		Days: 15, Silent: true}
	_, err = store.Append(ctx, ingest.Batch{Events: simulate.PolicyChangeEvents(pc, now)})
	require.NoError(t, err)
	current, err := policy.Parse([]byte(`{"version":"1","default":"deny","hide":["list_backups"],"tools":{"get_vm_status":{},"list_vms":{}}}`), "v2")
	require.NoError(t, err)
	regs, err := recommend.Regressions(ctx, store.DB(), recommend.RegressionScope{Server: "pve.lab", Grant: "ops", Now: now,
		Lookback: 30 * 24 * time.Hour, Current: current}, recommend.DefaultParams())
	require.NoError(t, err)
	require.Len(t, regs, 1)
	_, err = store.RecordAlert(ctx, analytics.AlertRecord{ID: sinceAlertID(regs[0]), Kind: KindRegression, Server: "pve.lab",
		Tool: regs[0].Tool, First: regs[0].Since, SentAt: now.Add(-time.Minute), EndedAt: &now})
	require.NoError(t, err)
	published := 0
	w := &Watch{Store: store, Config: Config{Params: recommend.DefaultParams()}, Now: func() time.Time { return now },
		Policy: func(context.Context, string, string) (*policy.Policy, error) { return current, nil },
		Record: func(context.Context, string, string, time.Time) ([]recommend.Finding, error) {
			t.Fatal("nothing to record: the regression was raised")
			return nil, nil
		},
		Publish: func(string, []byte) error { published++; return nil }}
	require.NoError(t, w.Check(ctx))
	assert.Zero(t, published)
}
