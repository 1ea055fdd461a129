package recommend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
)

// Intercept gives a call's quota back when its upstream answers with a
// JSON-RPC error (its proxy rolls the reservation back), so its
// per-instance counters, and the peaks they are sized from, count the
// other calls: of seven calls in a minute through one instance, two of
// them errors, a limit of 4 refuses only the last (the errors pass and
// take nothing), where counting every call refused the last three; a call
// the recording gateway refused, error code and all, would be forwarded
// and take quota. policy.json's counters keep every call.
func TestInterceptCountersGiveBackErroredCalls(t *testing.T) {
	ctx := context.Background()
	store := tempStore(t)
	minute := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	code := int64(-32603)
	var evs []audit.Event
	for i, failed := range []bool{false, false, false, true, true, false, false} {
		e := audit.Event{ID: fmt.Sprintf("c%d", i), TS: minute.Add(time.Duration(i) * time.Second), Server: "srv", Tool: "t",
			Method: "tools/call", Decision: audit.Allowed, Grant: "g", Gateway: "gw1", Status: "ok"}
		if failed {
			e.Status, e.ErrorCode = "error", &code
		}
		evs = append(evs, e)
	}
	// The recording gateway's own refusal, with its error code: forwarded
	// under the replayed limit it would take quota (and is the one refused).
	refusedCode := int64(-32029)
	evs = append(evs, audit.Event{ID: "c7", TS: minute.Add(7 * time.Second), Server: "srv", Tool: "t", Method: "tools/call",
		Decision: audit.RateLimited, Grant: "g", Gateway: "gw1", ErrorCode: &refusedCode})
	// Tool u: three calls through gw1, two errors through gw2, which take
	// no quota: gw2 is no instance its peaks are sized over.
	for i, gw := range []string{"gw1", "gw1", "gw1", "gw2", "gw2"} {
		e := audit.Event{ID: fmt.Sprintf("u%d", i), TS: minute.Add(time.Duration(i) * time.Second), Server: "srv", Tool: "u",
			Method: "tools/call", Decision: audit.Allowed, Grant: "g", Gateway: gw, Status: "ok"}
		if gw == "gw2" {
			e.Status, e.ErrorCode = "error", &code
		}
		evs = append(evs, e)
	}
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	q := query{db: store.DB(), server: "srv", from: minute.Add(-time.Hour), to: minute.Add(time.Hour)}

	limits := []GatewayLimit{{Tool: "t", Limit: policy.Limit{Counter: "t", Window: policy.WindowMinute, Max: 4, Scope: policy.ScopeInstance}}}
	require.NoError(t, q.refusedIn(ctx, policy.ScopeInstance, limits, nil))
	assert.EqualValues(t, 8, limits[0].Calls)
	assert.EqualValues(t, 2, limits[0].Refused, "the calls after the fourth that took quota are refused")
	assert.EqualValues(t, 2, limits[0].GivenBack, "the two errors, not the recorded refusal")

	names, err := q.toolNames(ctx, []string{"t"})
	require.NoError(t, err)
	perInstance, err := q.peaks(ctx, names, []string{"t"}, policy.ScopeInstance, policy.WindowMinute)
	require.NoError(t, err)
	assert.EqualValues(t, 6, perInstance["t"].Max, "the calls that took quota, the recorded refusal among them")
	names, err = q.toolNames(ctx, []string{"t", "u"})
	require.NoError(t, err)
	uPeaks, err := q.peaks(ctx, names, []string{"u"}, policy.ScopeInstance, policy.WindowMinute)
	require.NoError(t, err)
	assert.EqualValues(t, 1, uPeaks["u"].Scopes, "the instance whose calls took no quota is left out")
	assert.EqualValues(t, 3, uPeaks["u"].P50)
	perGrant, err := q.peaks(ctx, names, []string{"t"}, policy.ScopeGrant, policy.WindowMinute)
	require.NoError(t, err)
	assert.EqualValues(t, 8, perGrant["t"].Max, "policy.json counts every call")
}
