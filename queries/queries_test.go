package queries_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/queries"
)

func TestEveryQueryHasAHeaderAndRuns(t *testing.T) {
	all, err := queries.All()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, q := range all {
		names[q.Name] = true
	}
	for _, want := range []string{"calls_by_tool", "decisions_by_server", "top_agents", "denied_calls",
		"latency_by_tool", "hourly_volume", "last_call_per_tool", "top_sessions"} {
		assert.True(t, names[want], "missing named query %s", want)
	}

	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "q.duckdb"), analytics.Options{})
	require.NoError(t, err)
	defer store.Close()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	lat := 40.0
	var evs []audit.Event
	for i := 0; i < 50; i++ {
		d := audit.Allowed
		if i%10 == 0 {
			d = audit.Denied
		}
		evs = append(evs, audit.Event{ID: string(rune('a'+i%26)) + time.Duration(i).String(), TS: now.Add(-time.Duration(i) * time.Minute),
			Server: "proxmox-mcp", Tool: []string{"get_vm_status", "list_vms"}[i%2], Method: "tools/call",
			Decision: d, Agent: "agent-1", Session: "s1", LatencyMS: &lat})
	}
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)

	for _, q := range all {
		t.Run(q.Name, func(t *testing.T) {
			assert.NotEmpty(t, q.Description)
			args, err := q.Bind(nil, now)
			require.NoError(t, err)
			rows := 0
			err = store.Query(context.Background(), q.SQL, args, func([]analytics.Column) error { return nil },
				func([]any) error { rows++; return nil })
			require.NoError(t, err)
			if q.Name != "dead_letters" {
				assert.Positive(t, rows, "query returns rows on sample data")
			}
		})
	}
}

func TestBind(t *testing.T) {
	q, err := queries.Get("top_agents")
	require.NoError(t, err)
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

	_, err = q.Bind(map[string]string{"limit": "ten"}, now)
	assert.ErrorContains(t, err, "--param limit=ten: want a whole number")
	_, err = q.Bind(map[string]string{"since": "yesterday"}, now)
	assert.ErrorContains(t, err, "positive duration")
	_, err = q.Bind(map[string]string{"nope": "1"}, now)
	assert.ErrorContains(t, err, `no parameter "nope"`)
	args, err := q.Bind(map[string]string{"since": "7d", "server": "x"}, now)
	require.NoError(t, err)
	assert.Len(t, args, 4, "server, since, limit and now")

	_, err = queries.Get("nope")
	assert.ErrorContains(t, err, "calls_by_tool")
}

func TestParseRejectsBadHeaders(t *testing.T) {
	for name, text := range map[string]string{
		"no name":        "-- description: x\nSELECT 1",
		"unused param":   "-- name: a\n-- description: d\n-- param: x string = \"\" : y\nSELECT 1",
		"bad param type": "-- name: a\n-- description: d\n-- param: x float = 1 : y\nSELECT $x",
		"bad param decl": "-- name: a\n-- description: d\n-- param: x : y\nSELECT $x",
	} {
		_, err := queries.Parse(text)
		assert.Error(t, err, name)
	}
}
