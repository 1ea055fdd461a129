package alarm

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
)

// An alert names the limit of the policy in force for the run's grant: its
// own policy when it has one, though it sets no limit on the tool, and the
// server-wide policy only for a grant without one.
func TestAlertLimitIsTheGrantsOwnPolicys(t *testing.T) {
	ctx := context.Background()
	store, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "a.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	at := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for _, rec := range []analytics.PolicyRecord{
		{Server: "srv", Grant: "", ImportedAt: at, Document: []byte(`{"version":"1","default":"allow","tools":{"status":{"limits":[{"counter":"st","window":"minute","max":10}]}}}`)},
		{Server: "srv", Grant: "ops", ImportedAt: at, Document: []byte(`{"version":"1","default":"allow","tools":{"status":{}}}`)},
	} {
		_, err := store.ImportPolicy(ctx, rec)
		require.NoError(t, err)
	}
	a := &Alarm{Store: store}
	l, err := a.limit(ctx, &run{server: "srv", grant: "ops", tool: "status"})
	require.NoError(t, err)
	assert.Nil(t, l, "ops' own policy sets no limit on the tool")
	l, err = a.limit(ctx, &run{server: "srv", grant: "ci", tool: "status"})
	require.NoError(t, err)
	require.NotNil(t, l, "ci has no policy of its own: the server-wide one applies")
	assert.Equal(t, 10, l.Max)
}
