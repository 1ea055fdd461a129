package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIngestFavorsItsAppendingThread: while `ingest` runs, one of its
// threads (the one that appends) keeps the niceness it started with and
// every other is lowered by ingestFavor.
func TestIngestFavorsItsAppendingThread(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(binary, "ingest", "-", "--db", filepath.Join(tmp, "mcptrail.duckdb"))
	cmd.Dir, cmd.Env = tmp, append(os.Environ(), "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_, err = fmt.Fprintln(stdin, `{"v":1,"id":"e-1","ts":"2026-11-20T10:00:00Z","server":"pve","tool":"get_vm_status","decision":"allowed"}`)
	require.NoError(t, err)

	// The input stays open: ingest waits for more, its threads there.
	var favored, lowered, others int
	require.Eventually(t, func() bool {
		favored, lowered, others = 0, 0, 0
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid))
		if err != nil {
			return false
		}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
			if err != nil {
				continue
			}
			switch nice := 20 - prio; {
			case nice == selfNice(t):
				favored++
			case nice >= min(selfNice(t)+ingestFavor, 19):
				lowered++
			default:
				others++
			}
		}
		return favored == 1 && lowered >= 2 && others == 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, 1, favored, "the appending thread")
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
}

// selfNice is the test process's niceness, which ingest starts with.
func selfNice(t *testing.T) int {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	require.NoError(t, err)
	return 20 - prio
}
