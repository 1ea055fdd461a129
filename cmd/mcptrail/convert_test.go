package main

import (
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
)

// convert only reads the database, but a daemon holding it for writing
// keeps every other process out: the message says what to stop, and no
// copy is left behind.
func TestConvertWhileTheDaemonHoldsTheDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	env := []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z"}
	samples, err := filepath.Abs("../../testdata/samples/native.jsonl")
	require.NoError(t, err)
	_, code, stderr := runCLI(t, tmp, env, []string{"ingest", "--db", db, "--server", "proxmox-mcp", samples})
	require.Zero(t, code, stderr)
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+startDaemon(t, tmp, db))
	out := filepath.Join(tmp, "new.duckdb")
	stdout, code, stderr := runCLI(t, tmp, env, []string{"convert", "--db", db, "--out", out})
	assert.Equal(t, 1, code, stdout)
	assert.Contains(t, stderr, "stop mcptrail serve (or the ingest holding it) first")
	assert.NoFileExists(t, out)
}

// serve names the storage format of the file it opens and, for a file of
// an older format, the command that copies it into the current one.
func TestServeTellsOfAnOlderStorageFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	for _, tc := range []struct {
		name, createdIn, format string
		hint                    bool
	}{
		{"a file created before", "v1.0.0", "v1.0.0+", true},
		{"a new file", "", analytics.StorageVersion + "+", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "mcptrail.duckdb")
			if tc.createdIn != "" {
				raw, err := sql.Open("duckdb", db+"?storage_compatibility_version="+tc.createdIn)
				require.NoError(t, err)
				require.NoError(t, raw.Ping())
				require.NoError(t, raw.Close())
			}
			logs := filepath.Join(dir, "serve.log")
			startServeLogTo(t, logs, dir, db, nil, func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
			b, err := os.ReadFile(logs)
			require.NoError(t, err)
			log := string(b)
			assert.Contains(t, log, `msg="database open" path=`+db+` format=`+tc.format)
			if tc.hint {
				assert.Contains(t, log, `command="mcptrail convert --db `+db+` --out NEW.duckdb"`)
			} else {
				assert.NotContains(t, log, "mcptrail convert")
			}
		})
	}
}
