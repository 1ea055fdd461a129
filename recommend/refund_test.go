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
// take nothing), where counting every call refused the last three.
// policy.json's counters keep every call.
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
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	q := query{db: store.DB(), server: "srv", from: minute.Add(-time.Hour), to: minute.Add(time.Hour)}

	limits := []GatewayLimit{{Tool: "t", Limit: policy.Limit{Counter: "t", Window: policy.WindowMinute, Max: 4, Scope: policy.ScopeInstance}}}
	require.NoError(t, q.refusedIn(ctx, policy.ScopeInstance, limits, nil))
	assert.EqualValues(t, 7, limits[0].Calls)
	assert.EqualValues(t, 1, limits[0].Refused, "only the fifth call that takes quota is refused")
	assert.EqualValues(t, 2, limits[0].GivenBack)

	names, err := q.toolNames(ctx, []string{"t"})
	require.NoError(t, err)
	perInstance, err := q.peaks(ctx, names, []string{"t"}, policy.ScopeInstance, policy.WindowMinute)
	require.NoError(t, err)
	assert.EqualValues(t, 5, perInstance["t"].Max, "the calls that took quota")
	perGrant, err := q.peaks(ctx, names, []string{"t"}, policy.ScopeGrant, policy.WindowMinute)
	require.NoError(t, err)
	assert.EqualValues(t, 7, perGrant["t"].Max, "policy.json counts every call")
}
