//go:build linux || darwin

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `ingest` reads a named pipe (or `<(zcat old.jsonl.gz)`, a pipe too) from
// what it sniffed on: a pipe is neither mapped nor read at an offset.
func TestIngestReadsANamedPipe(t *testing.T) {
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "events.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, `{"v":1,"id":"p-%d","ts":"2026-11-20T10:00:00Z","server":"proxmox-mcp","tool":"get_vm_status","method":"tools/call","decision":"allowed"}`+"\n", i)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		_, _ = w.WriteString(b.String())
	}()
	out, code, errOut := runCLI(t, tmp, []string{"MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}, []string{"ingest", fifo, "--db", filepath.Join(tmp, "m.duckdb")})
	require.Zero(t, code, "%s%s", out, errOut)
	assert.Contains(t, out, "ingested 500, duplicates 0, rejected 0")
}
