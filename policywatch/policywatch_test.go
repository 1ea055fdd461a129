package policywatch_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/policywatch"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const v2Policy = `{"version":"1","default":"deny","hide":["list_backups"],"tools":{"get_vm_status":{},"list_vms":{}}}`

type sent struct {
	subject string
	alert   policywatch.Alert
}

// watch is a watch over a policy change in which backup-bot stops calling
// the tool v2 hides; the current policy is v2, and suppressions suppress.
func watch(t *testing.T, suppressions []analytics.Suppression) (*policywatch.Watch, *[]sent, *int) {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "w.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	pc := simulate.PolicyChange{Server: "pve.lab", Grant: "ops", Change: now.Add(-time.Hour), Refused: simulate.PolicyChangeUsedDaily,
		Days: 15, Silent: true}
	_, err = store.Append(context.Background(), ingest.Batch{Events: simulate.PolicyChangeEvents(pc, now)})
	require.NoError(t, err)
	current, err := policy.Parse([]byte(v2Policy), "v2")
	require.NoError(t, err)
	var out []sent
	records := 0
	w := &policywatch.Watch{Store: store, Config: policywatch.Config{Params: recommend.DefaultParams()},
		Now:    func() time.Time { return now },
		Policy: func(context.Context, string, string) (*policy.Policy, error) { return current, nil },
		Record: func(ctx context.Context, server, grant string, at time.Time) ([]recommend.Finding, error) {
			records++
			r, err := recommend.Recommend(ctx, store.DB(), recommend.Options{Server: server, Grant: grant, Now: at,
				Params: recommend.DefaultParams(), Current: current, Suppressions: suppressions})
			if err != nil {
				return nil, err
			}
			return r.Findings, nil
		},
		Publish: func(subject string, data []byte) error {
			var a policywatch.Alert
			require.NoError(t, json.Unmarshal(data, &a))
			out = append(out, sent{subject, a})
			return nil
		}}
	return w, &out, &records
}

// A tool that vanished under the new version, which the current policy
// hides, is raised once: recorded first, then published on the server's
// alert subject; the next checks send nothing and record nothing.
func TestWatchRaisesOnce(t *testing.T) {
	w, out, records := watch(t, nil)
	require.NoError(t, w.Check(context.Background()))
	require.Len(t, *out, 1)
	a := (*out)[0]
	assert.Equal(t, "mcptrail.alerts.pve_lab", a.subject)
	assert.Equal(t, "regression:pve.lab:ops:list_backups", a.alert.FindingID)
	assert.True(t, a.alert.Vanished)
	assert.InDelta(t, 4.0, a.alert.ExpectedCalls, 0.05, "four calls an hour, an hour under v2")
	assert.JSONEq(t, `[{"op":"remove","path":"/hide"},{"op":"add","path":"/tools/list_backups","value":{}}]`, string(a.alert.Revert), "the hide list held only it")
	assert.Equal(t, 1, *records)
	for range 3 {
		require.NoError(t, w.Check(context.Background()))
	}
	assert.Len(t, *out, 1, "raised once")
	assert.Equal(t, 1, *records, "recorded once")
}

// A regression whose finding is suppressed is remembered, never sent.
func TestWatchKeepsQuietAboutASuppressedRegression(t *testing.T) {
	w, out, records := watch(t, []analytics.Suppression{{FindingID: "regression:pve.lab:ops:list_backups", Reason: "planned",
		Until: now.Add(24 * time.Hour), CreatedAt: now.Add(-time.Hour)}})
	require.NoError(t, w.Check(context.Background()))
	require.NoError(t, w.Check(context.Background()))
	assert.Empty(t, *out)
	assert.Equal(t, 1, *records)
}
