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

// TestExcludedSpansMergeOverlappingRuns: runs of one session and tool that
// overlap, or share the millisecond where one ends and the next begins,
// become one span; runs of another session or tool, or a millisecond
// apart, stay apart.
func TestExcludedSpansMergeOverlappingRuns(t *testing.T) {
	runs := []run{
		{SessionHash: 1, Tool: "a", FirstMS: 50, LastMS: 60, Polls: 3},
		{SessionHash: 1, Tool: "a", FirstMS: 10, LastMS: 20},
		{SessionHash: 1, Tool: "a", FirstMS: 20, LastMS: 30}, // shares 20
		{SessionHash: 1, Tool: "a", FirstMS: 15, LastMS: 25}, // inside the two above
		{SessionHash: 1, Tool: "a", FirstMS: 31, LastMS: 40}, // a millisecond apart
		{SessionHash: 1, Tool: "b", FirstMS: 10, LastMS: 20},
		{SessionHash: 2, Tool: "a", FirstMS: 12, LastMS: 18},
	}
	assert.Equal(t, []run{
		{SessionHash: 1, Tool: "a", FirstMS: 10, LastMS: 30},
		{SessionHash: 1, Tool: "a", FirstMS: 31, LastMS: 40},
		{SessionHash: 1, Tool: "a", FirstMS: 50, LastMS: 60},
		{SessionHash: 1, Tool: "b", FirstMS: 10, LastMS: 20},
		{SessionHash: 2, Tool: "a", FirstMS: 12, LastMS: 18},
	}, excludedSpans(runs))
	assert.Equal(t, int64(20), runs[1].LastMS, "the runs given stay as they are")
}

// TestRefusedInCountsACallInTwoLoopsOnce: a per-instance limit's counts
// (refusedIn) join the calls to the runaway loops' spans; a call where one
// loop of its session ends and the next begins is still one call, counted
// once against the limit and once among those it refuses.
func TestRefusedInCountsACallInTwoLoopsOnce(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := end.Add(-2 * time.Hour)
	const tool = "vm_agent_exec_status"
	var evs []audit.Event
	for i := range 11 {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e%d", i), TS: at.Add(time.Duration(i) * time.Second), Server: "proxmox-mcp",
			Tool: tool, Method: "tools/call", Decision: audit.Allowed, Grant: "ops-bot", Agent: "bot", Session: "s1", Gateway: "gw1"})
	}
	store := tempStore(t)
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	db := store.DB()
	var skh uint64
	require.NoError(t, db.QueryRow(`SELECT hash('s1')`).Scan(&skh))
	ms := func(i int) int64 { return evs[i].TS.UnixMilli() }
	// Two loops sharing the sixth call; the eleventh is outside both.
	loops := []run{{SessionHash: skh, Tool: tool, FirstMS: ms(0), LastMS: ms(5)}, {SessionHash: skh, Tool: tool, FirstMS: ms(5), LastMS: ms(9)}}

	q := query{db: db, server: "proxmox-mcp", grant: "ops-bot", from: end.Add(-24 * time.Hour), to: end}
	limits := []GatewayLimit{{Tool: tool, Limit: policy.Limit{Counter: tool + "_rate", Window: policy.WindowDay, Max: 3, Scope: policy.ScopeInstance}}}
	require.NoError(t, q.refusedIn(ctx, policy.ScopeInstance, limits, loops))
	assert.Equal(t, int64(11), limits[0].Calls, "every call once")
	assert.Equal(t, int64(8), limits[0].Refused, "every call past the third")
	assert.Equal(t, int64(1), limits[0].Normal, "the one outside the loops")
}
