package policywatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
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

// A late call under the new version, older than its first call so far (a
// gateway replica that buffered through an outage), moves the version's
// first call back; the regression is the same, and is not raised again.
func TestWatchRaisesOnceThoughALateCallMovesTheVersionBack(t *testing.T) {
	w, out, _ := watch(t, nil)
	require.NoError(t, w.Check(context.Background()))
	require.Len(t, *out, 1)
	late := audit.Event{ID: "late-1", TS: now.Add(-70 * time.Minute), Server: "pve.lab", Tool: simulate.PolicyChangeStatus,
		Method: audit.DefaultMethod, Decision: audit.Allowed, Status: "ok", Gateway: "gw-2", Grant: "ops", Agent: "helpdesk",
		Session: "helpdesk-late", ArgsHash: "late", PolicyVersion: "v2"}
	_, err := w.Store.Append(context.Background(), ingest.Batch{Events: []audit.Event{late}})
	require.NoError(t, err)
	current, err := policy.Parse([]byte(v2Policy), "v2")
	require.NoError(t, err)
	regs, err := recommend.Regressions(context.Background(), w.Store.DB(), recommend.RegressionScope{Server: "pve.lab", Grant: "ops", Now: now,
		Lookback: 30 * 24 * time.Hour, Current: current}, recommend.DefaultParams())
	require.NoError(t, err)
	require.NotEmpty(t, regs)
	require.True(t, regs[0].Since.Equal(late.TS), "the version's first call moved back: %s", regs[0].Since)
	require.NoError(t, w.Check(context.Background()))
	assert.Len(t, *out, 1, "the same regression: raised once")
}

// A scope that fails (here its current policy cannot be read) is reported,
// and the other scopes are checked all the same: a regression of a server
// checked after it is raised.
func TestWatchChecksEveryScopeThoughOneFails(t *testing.T) {
	w, out, _ := watch(t, nil)
	other := simulate.PolicyChange{Server: "alpha", Grant: "ops", Change: now.Add(-time.Hour), Refused: simulate.PolicyChangeUsedDaily,
		Days: 15, Silent: true}
	evs := simulate.PolicyChangeEvents(other, now)
	for i := range evs {
		evs[i].ID = "alpha-" + evs[i].ID // the simulator's ids name no server
	}
	_, err := w.Store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
	current := w.Policy
	w.Policy = func(ctx context.Context, server, grant string) (*policy.Policy, error) {
		if server == "alpha" {
			return nil, errors.New("the recorded policy does not parse")
		}
		return current(ctx, server, grant)
	}
	err = w.Check(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "alpha")
	require.Len(t, *out, 1, "pve.lab's regression, checked after alpha's failure")
	assert.Equal(t, "pve.lab", (*out)[0].alert.Server)
}
