package analytics

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// The calls' columns whose compression the schema declares (SPEC §3) keep
// it whatever their values: DuckDB's own choice, for these values, would
// differ (no dictionary for an agent per call, no FSST for random ids).
func TestCallsKeepTheirDeclaredCompression(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	random := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	evs := sampleEvents(20000, time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
	for i := range evs {
		evs[i].ID = random(24)
		evs[i].Agent = fmt.Sprintf("agent-%s", random(16)) // one per call
		evs[i].Gateway = ""                                // every one NULL
	}
	_, err := s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, "CHECKPOINT")
	require.NoError(t, err)

	rows, err := s.DB().QueryContext(ctx, `SELECT column_name, list(DISTINCT compression ORDER BY compression)::VARCHAR
		FROM pragma_storage_info('calls') WHERE segment_type = 'VARCHAR' GROUP BY ALL`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var col, methods string
		require.NoError(t, rows.Scan(&col, &methods))
		got[col] = methods
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, "[FSST]", got["id"])
	for _, col := range []string{"server", "tool", "method", "decision", "status", "gateway", "grant", "agent", "policy_version", "session_source"} {
		assert.Equal(t, "[Dictionary]", got[col], col)
	}
	// Declared compression changes nothing of what is read back.
	assert.Equal(t, 20000, count(t, s, `SELECT count(DISTINCT agent) FROM calls`))
	assert.Equal(t, 20000, count(t, s, `SELECT count(DISTINCT id) FROM calls WHERE gateway IS NULL`))
	assert.Equal(t, evs[7].Agent, readString(t, s, `SELECT agent FROM calls WHERE id = ?`, evs[7].ID))
}
