package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recommend and report over a window that reaches past storage.retention
// read the archived days: their output after the retention deleted the
// days equals their output before.
func TestRecommendAndReportReadArchivedDays(t *testing.T) {
	tmp := t.TempDir()
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o755))
	db := filepath.Join(tmp, "mcptrail.duckdb")
	env := []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1",
		"MCPTRAIL_STORAGE_ARCHIVE=" + dir, "MCPTRAIL_STORAGE_RETENTION=20d"}
	run := func(args ...string) string {
		t.Helper()
		out, code, errOut := runCLI(t, tmp, env, append([]string{"--db", db}, args...))
		require.Zero(t, code, "%v: %s", args, errOut)
		return out
	}
	run("ingest", "--server", "proxmox-mcp", filepath.Join(samples, "native.jsonl"))
	recommendArgs := []string{"recommend", "--server", "proxmox-mcp", "--format", "json"}
	reportArgs := []string{"report", "--server", "proxmox-mcp", "--since", "30d", "--format", "json"}
	recBefore, repBefore := run(recommendArgs...), run(reportArgs...)

	run("archive")
	hot := run("query", "--format", "csv", "--sql", "SELECT count(*) AS n FROM calls")
	require.Equal(t, "n\n0\n", hot, "the retention deleted every sampled day")

	assert.Equal(t, recBefore, run(recommendArgs...))
	assert.Equal(t, repBefore, run(reportArgs...))
	// A window within the retention reads the hot store only.
	_, code, _ := runCLI(t, tmp, env, []string{"--db", db, "recommend", "--server", "proxmox-mcp", "--since", "14d"})
	assert.Equal(t, 1, code, "no calls in the last 14 days")
}
