package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
