package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
	"github.com/mcptrail/mcptrail/internal/threadprio"
)

// favoredThreads counts the threads of process pid at the test process's
// niceness (the one favored) and those lowered by ingestFavor; others are
// neither.
func favoredThreads(pid int) (favored, lowered, others int) {
	base := selfNice()
	threads, err := threadprio.Niceness(pid)
	if err != nil {
		return 0, 0, 0
	}
	for _, nice := range threads {
		switch {
		case nice == base:
			favored++
		case nice >= min(base+ingestFavor, 19):
			lowered++
		default:
			others++
		}
	}
	return favored, lowered, others
}

// selfNice is the test process's niceness, which the commands start with.
func selfNice() int {
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		panic(err)
	}
	return 20 - prio
}

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
	require.Eventually(t, func() bool {
		favored, lowered, others := favoredThreads(cmd.Process.Pid)
		return favored == 1 && lowered >= 2 && others == 0
	}, 10*time.Second, 20*time.Millisecond, "one thread favored, the others lowered")
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
}

// TestServeFavorsItsStoringThread: once `serve` stored a batch, the thread
// that stores them keeps the niceness the daemon started with and every
// other (NATS's, the decoders', the API's) is lowered by ingestFavor.
func TestServeFavorsItsStoringThread(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	tmp := t.TempDir()
	natsAddr := freeport.Addr(t)
	httpAddr, pid := startServe(t, tmp, filepath.Join(tmp, "mcptrail.duckdb"), []string{"MCPTRAIL_NATS_EMBEDDED_LISTEN=" + natsAddr},
		func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
	favored, _, _ := favoredThreads(pid)
	assert.Greater(t, favored, 1, "nothing lowered before a batch is stored")

	sim := exec.Command(binary, "simulate", "--count", "50", "--nats", "nats://"+natsAddr)
	sim.Dir = tmp
	out, err := sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return ingestedSoFar(httpAddr) == 50 }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		favored, lowered, others := favoredThreads(pid)
		return favored == 1 && lowered >= 2 && others == 0
	}, 10*time.Second, 20*time.Millisecond, "one thread favored, the others lowered")
}
