package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
)

// TestPublishReachesTheDaemon: while serve holds the database, ingest
// refuses and names `mcptrail publish`; that command sends the file through
// the embedded NATS server in batched messages, the daemon stores every
// valid event once (again: none twice), and the invalid line is named and
// fails the command.
func TestPublishReachesTheDaemon(t *testing.T) {
	tmp, db, env := ingestedDB(t, 1000)
	natsAddr := freeport.Addr(t)
	addr := startDaemon(t, tmp, db, "MCPTRAIL_NATS_EMBEDDED_LISTEN="+natsAddr)
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+addr, "MCPTRAIL_NATS_EMBEDDED_LISTEN="+natsAddr)

	more := filepath.Join(tmp, "more.jsonl")
	out, code, errOut := runCLI(t, tmp, env, []string{"simulate", "--seed", "2", "--count", "3000", "--out", more})
	require.Zero(t, code, out+errOut)
	f, err := os.OpenFile(more, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"v":1,"id":"bad-1","server":"proxmox-mcp","tool":"vm_list"}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, code, errOut = runCLI(t, tmp, env, []string{"ingest", more, "--db", db})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "`mcptrail publish "+more+"`", "ingest points at the command that works")

	for round := range 2 {
		out, code, errOut = runCLI(t, tmp, env, []string{"publish", "--batch", "64", more, "--db", db})
		assert.Equal(t, 1, code, "the invalid line fails the command")
		assert.Contains(t, out, "published 3000 events in 47 messages")
		assert.Contains(t, errOut, more+":3001: missing_ts")
		assert.Contains(t, errOut, "1 line(s) were not published")
		count := func() string {
			out, code, errOut := runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n, count(DISTINCT id) AS d FROM calls", "--format", "csv", "--db", db})
			require.Zero(t, code, errOut)
			return out
		}
		require.Eventually(t, func() bool { return count() == "n,d\n4000,4000\n" }, 30*time.Second, 100*time.Millisecond,
			"round %d: every event stored once: %s", round, count())
	}
	out, code, errOut = runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n FROM dead_letters", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, "n\n0\n", out, "nothing invalid was sent")
	assert.False(t, strings.Contains(errOut, "password"), "no secret in the output")
}
