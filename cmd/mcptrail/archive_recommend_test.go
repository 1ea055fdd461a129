package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// archivedCLI runs the CLI on a new database with an archive folder and
// storage.retention keep; run fails the test on a non-zero exit.
func archivedCLI(t *testing.T, keep string) (tmp string, env []string, db string, run func(args ...string) string) {
	tmp = t.TempDir()
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o755))
	db = filepath.Join(tmp, "mcptrail.duckdb")
	env = []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1",
		"MCPTRAIL_STORAGE_ARCHIVE=" + dir, "MCPTRAIL_STORAGE_RETENTION=" + keep}
	run = func(args ...string) string {
		t.Helper()
		out, code, errOut := runCLI(t, tmp, env, append([]string{"--db", db}, args...))
		require.Zero(t, code, "%v: %s", args, errOut)
		return out
	}
	return tmp, env, db, run
}

// recommend and report over a window that reaches past storage.retention
// read the archived days: their output after the retention deleted the
// days equals their output before, and report without --server finds the
// servers there too; so do replay's and suppress --all-of's.
func TestRecommendAndReportReadArchivedDays(t *testing.T) {
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	tmp, env, db, run := archivedCLI(t, "20d")
	run("ingest", "--server", "proxmox-mcp", filepath.Join(samples, "native.jsonl"))
	recommendArgs := []string{"recommend", "--server", "proxmox-mcp", "--format", "json"}
	reportArgs := []string{"report", "--server", "proxmox-mcp", "--since", "30d", "--format", "json"}
	reportAllArgs := []string{"report", "--since", "30d", "--format", "json"} // every server with calls in the window
	policyFile, err := filepath.Abs("../../testdata/policies/proxmox-current.json")
	require.NoError(t, err)
	replayArgs := []string{"replay", "--server", "proxmox-mcp", "--policy", policyFile, "--since", "30d", "--format", "json"}
	recBefore, repBefore, allBefore, replayBefore := run(recommendArgs...), run(reportArgs...), run(reportAllArgs...), run(replayArgs...)
	pastBefore := run(append(slices.Clone(recommendArgs), "--since", "14d", "--now", "2026-11-05T00:00:00Z")...)

	run("archive")
	hot := run("query", "--format", "csv", "--sql", "SELECT count(*) AS n FROM calls")
	require.Equal(t, "n\n0\n", hot, "the retention deleted every sampled day")

	assert.Equal(t, recBefore, run(recommendArgs...))
	assert.Equal(t, repBefore, run(reportArgs...))
	assert.Equal(t, allBefore, run(reportAllArgs...), "the servers are found in the archived days too")
	assert.Equal(t, replayBefore, run(replayArgs...))
	assert.Contains(t, replayBefore, `"calls"`)
	// A window within the retention reads the hot store only.
	_, code, _ := runCLI(t, tmp, env, []string{"--db", db, "recommend", "--server", "proxmox-mcp", "--since", "14d"})
	assert.Equal(t, 1, code, "no calls in the last 14 days")
	// One as short that ends in the past, at a deleted day, reads the archive.
	past := append(slices.Clone(recommendArgs), "--since", "14d", "--now", "2026-11-05T00:00:00Z")
	assert.Equal(t, pastBefore, run(past...))

	// suppress --all-of runs the recommender as recommend does: over the archive too.
	out := run("suppress", "--all-of", "rate_limit", "--server", "proxmox-mcp", "--reason", "accepted", "--until", "90d")
	assert.Equal(t, strings.Count(recBefore, `"kind": "rate_limit"`), strings.Count(out, "suppressed rate_limit:"), out)
	assert.Positive(t, strings.Count(out, "suppressed rate_limit:"))
}

// backtest, whose training and test windows reach past storage.retention,
// reads the archived days: its output after the retention deleted them
// equals its output before.
func TestBacktestReadsArchivedDays(t *testing.T) {
	tmp, _, _, run := archivedCLI(t, "14d")
	events := filepath.Join(tmp, "events.jsonl")
	run("simulate", "--count", "20000", "--duration", "40d", "--out", events)
	run("ingest", events)
	backtestArgs := []string{"backtest", "--server", "proxmox-mcp", "--train", "21d", "--test", "7d", "--folds", "2", "--format", "json"}
	before := run(backtestArgs...)
	require.Contains(t, before, `"folds"`)

	run("archive")
	hot := run("query", "--format", "csv", "--sql", "SELECT count(*) FILTER (ts < TIMESTAMPTZ '2026-11-16 00:00:00+00') AS old FROM calls")
	require.Equal(t, "old\n0\n", hot, "the retention deleted the days before the last 14")
	assert.Equal(t, before, run(backtestArgs...))
}

// report's backtest trains on the recommendation's window before the
// report's: a report whose window is within storage.retention but whose
// training reaches past it reads the archived days for it, and its output
// after the retention deleted them equals its output before.
func TestReportBacktestReadsArchivedTrainingDays(t *testing.T) {
	tmp, _, _, run := archivedCLI(t, "32d")
	events := filepath.Join(tmp, "events.jsonl")
	run("simulate", "--count", "20000", "--duration", "40d", "--out", events)
	run("ingest", events)
	reportArgs := []string{"report", "--server", "proxmox-mcp", "--since", "7d", "--format", "json"}
	run(reportArgs...) // recorded: the next ones compare with it alike
	before := run(reportArgs...)
	require.Contains(t, before, `"backtest"`)

	run("archive")
	hot := run("query", "--format", "csv", "--sql", "SELECT count(*) FILTER (ts < TIMESTAMPTZ '2026-10-29 00:00:00+00') AS old FROM calls")
	require.Equal(t, "old\n0\n", hot, "the retention deleted the days before the last 32")
	assert.Equal(t, before, run(reportArgs...))
}
