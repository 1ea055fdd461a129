package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve with storage.archive counts its archive runs on /metrics, and
// without it has no such metrics.
func TestServeReportsArchiveMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	for _, archived := range []bool{true, false} {
		tmp := t.TempDir()
		var env []string
		if archived {
			dir := filepath.Join(tmp, "archive")
			require.NoError(t, os.Mkdir(dir, 0o755))
			env = append(env, "MCPTRAIL_STORAGE_ARCHIVE="+dir, "MCPTRAIL_STORAGE_RETENTION=90d")
		}
		addr := startDaemon(t, tmp, filepath.Join(tmp, "mcptrail.duckdb"), env...)
		metrics := metricsText(t, addr)
		for _, m := range []string{"mcptrail_archive_errors_total 0", "mcptrail_archive_rows_total 0", "mcptrail_archive_deleted_rows_total 0"} {
			if archived {
				assert.Contains(t, metrics, m)
			} else {
				assert.NotContains(t, metrics, m)
			}
		}
	}
}
