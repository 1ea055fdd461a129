package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIngestStoresABatchInItsStagedOrder: `ingest` stores a batch as it was
// staged, chunk by chunk of one server and grant (analytics/cluster.go), so
// the calls of a grant lie together along the table, every time. DuckDB on
// two threads read the chunks out of order (7 grant changes instead of 4 on
// 60k events), on one thread it keeps them.
func TestIngestStoresABatchInItsStagedOrder(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	grants := []string{"ci-runner", "helpdesk", "ops-bot", "readonly-dashboard"}
	var b strings.Builder
	const n = 40000 // many 2,048-row chunks per grant, interleaved call by call
	for i := range n {
		fmt.Fprintf(&b, `{"v":1,"id":"e-%d","ts":"2026-11-20T%02d:%02d:%02d.%03dZ","server":"proxmox-mcp","tool":"get_vm_status","method":"tools/call","decision":"allowed","grant":%q,"agent":"a","session":"s-%d"}`+"\n",
			i, i/3600000%24, i/60000%60, i/1000%60, i%1000, grants[i%len(grants)], i%97)
	}
	file := filepath.Join(tmp, "calls.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))
	env := []string{"MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	out, code, errOut := runCLI(t, tmp, env, []string{"ingest", file, "--db", db})
	require.Zero(t, code, "%s%s", out, errOut)

	out, code, errOut = runCLI(t, tmp, env, []string{"query", "--db", db, "--format", "csv", "--sql",
		`SELECT count(*), count(*) FILTER (changed) FROM (SELECT "grant" IS DISTINCT FROM lag("grant") OVER (ORDER BY rowid) AS changed FROM calls)`})
	require.Zero(t, code, "%s%s", out, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	assert.Equal(t, fmt.Sprintf("%d,%d", n, len(grants)), lines[len(lines)-1], "calls, and grant changes along the table")
}
