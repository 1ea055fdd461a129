package analytics

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// The calls' columns whose compression the schema declares (SPEC §3) keep
// it whatever their values: DuckDB's own choice, for these values, would
// differ (no dictionary for an agent per call, no FSST for random ids). A
// file this build creates is in StorageVersion and declares DICT_FSST; a
// file created empty in DuckDB's older default format (by an older build,
// or by DuckDB itself) declares the older methods, which DICT_FSST's format
// refuses and DuckDB 1.0's lacks.
func TestCallsKeepTheirDeclaredCompression(t *testing.T) {
	for _, tc := range []struct {
		name, createdIn, storage string
		id, fewValues            string
	}{
		{"created by this build", "", "v1.5.0+", "[DICT_FSST]", "[DICT_FSST]"},
		{"created empty in DuckDB's older format", "v1.0.0", "v1.0.0+", "[FSST]", "[Dictionary]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.duckdb")
			if tc.createdIn != "" {
				createEmptyIn(t, path, tc.createdIn)
			}
			s, err := Open(context.Background(), path, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			assert.Equal(t, tc.storage, readString(t, s, `SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()`))
			assertDeclaredCompression(t, s, tc.id, tc.fewValues)
		})
	}
}

// createEmptyIn creates an empty database file in storage format version,
// as DuckDB itself (or a build before StorageVersion) would.
func createEmptyIn(t *testing.T, path, version string) {
	t.Helper()
	db, err := sql.Open("duckdb", path+"?storage_compatibility_version="+version)
	require.NoError(t, err)
	require.NoError(t, db.Ping())
	require.NoError(t, db.Close())
}

func assertDeclaredCompression(t *testing.T, s *Store, id, fewValues string) {
	t.Helper()
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
	assert.Equal(t, id, got["id"])
	for _, col := range []string{"server", "tool", "method", "decision", "status", "gateway", "grant", "agent", "policy_version", "session_source"} {
		assert.Equal(t, fewValues, got[col], col)
	}
	// Declared compression changes nothing of what is read back.
	assert.Equal(t, 20000, count(t, s, `SELECT count(DISTINCT agent) FROM calls`))
	assert.Equal(t, 20000, count(t, s, `SELECT count(DISTINCT id) FROM calls WHERE gateway IS NULL`))
	assert.Equal(t, evs[7].Agent, readString(t, s, `SELECT agent FROM calls WHERE id = ?`, evs[7].ID))
}
