package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/freeport"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/simulate"
)

// serve's regression watch, from events published live: fifteen days under
// policy version v1, then twenty minutes under v2, which hides the tool an
// agent calls every day. Within a few seconds the daemon publishes one
// regression alert with the revert, logs and counts it, and records the
// finding (open, source watch) before it does; a restarted daemon does not
// send it again.
func TestServeRaisesARegressionAfterAPolicyChange(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "mcptrail.duckdb")
	natsAddr, httpAddr := freeport.Addr(t), freeport.Addr(t)
	env := []string{
		"MCPTRAIL_STORAGE_PATH=" + db,
		"MCPTRAIL_NATS_EMBEDDED_LISTEN=" + natsAddr,
		"MCPTRAIL_NATS_EMBEDDED_STORE_DIR=" + filepath.Join(dir, "nats"),
		"MCPTRAIL_HTTP_LISTEN=" + httpAddr,
		"MCPTRAIL_NATS_USER=daemon", "MCPTRAIL_NATS_PASSWORD=daemon-secret-pw",
		"MCPTRAIL_REGRESSION_INTERVAL=1s",
	}
	var log lockedBuffer
	start := func() *exec.Cmd {
		serve := exec.Command(binary, "serve")
		serve.Env = append(os.Environ(), env...)
		serve.Stderr = &log
		require.NoError(t, serve.Start())
		t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
		require.Eventually(t, func() bool { return httpStatus(httpAddr, "/readyz") == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "serve did not become ready")
		return serve
	}
	stop := func(serve *exec.Cmd) {
		require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
		require.NoError(t, serve.Wait())
	}
	serve := start()

	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo("daemon", "daemon-secret-pw"))
	require.NoError(t, err)
	defer nc.Close()
	alerts := make(chan map[string]any, 10)
	_, err = nc.Subscribe("mcptrail.alerts.>", func(m *nats.Msg) {
		var a map[string]any
		if json.Unmarshal(m.Data, &a) == nil && a["kind"] == "regression" {
			a["subject"] = m.Subject
			alerts <- a
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	now := time.Now().UTC()
	pc := simulate.PolicyChange{Server: "proxmox-mcp", Grant: "ops", Change: now.Add(-20 * time.Minute),
		Refused: simulate.PolicyChangeUsedDaily, Days: 15}
	events := simulate.PolicyChangeEvents(pc, now)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := server.Publish(ctx, server.PublishOptions{URL: "nats://" + natsAddr, Batch: 64,
		Auth: server.Auth{User: "daemon", Password: "daemon-secret-pw"}}, func() (audit.Event, bool, error) {
		if len(events) == 0 {
			return audit.Event{}, false, nil
		}
		e := events[0]
		events = events[1:]
		return e, true, nil
	})
	require.NoError(t, err)
	require.Zero(t, st.Failed)

	var a map[string]any
	select {
	case a = <-alerts:
	case <-ctx.Done():
		t.Fatalf("no regression alert; serve log:\n%s", log.String())
	}
	assert.Equal(t, "mcptrail.alerts.proxmox-mcp", a["subject"])
	assert.Equal(t, []any{"raised", "proxmox-mcp", "ops", "list_backups", "v2", "v1", "regression:proxmox-mcp:ops:list_backups"},
		[]any{a["state"], a["server"], a["grant"], a["tool"], a["policy_version"], a["previous_version"], a["finding_id"]})
	// Raised with the first refused calls stored: one or two, as the
	// quarter hours fall in the 20 minutes.
	refused, _ := a["refused"].(float64)
	assert.True(t, refused == 1 || refused == 2, "refused %v", a["refused"])
	assert.Equal(t, map[string]any{"hidden": refused, "denied": 0.0, "approval_required": 0.0, "rate_limited": 0.0}, a["refused_by"])
	assert.Nil(t, a["revert"], "no policy is recorded: no patch")
	// stderr reaches the buffer through a pipe: it may trail the alert.
	assert.Eventually(t, func() bool { return strings.Contains(log.String(), "policywatch: regression") }, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, metricsText(t, httpAddr), "mcptrail_regressions_total 1")

	// A restarted daemon remembers: no second alert.
	stop(serve)
	serve = start()
	select {
	case again := <-alerts:
		t.Errorf("the regression was alerted twice: %v", again)
	case <-time.After(4 * time.Second):
	}
	stop(serve)

	out, code, errOut := runCLI(t, dir, env, []string{"findings", "--server", "proxmox-mcp", "--state", "open", "--format", "json"})
	require.Zero(t, code, errOut)
	assert.Contains(t, out, `"id": "regression:proxmox-mcp:ops:list_backups"`)
	out, code, errOut = runCLI(t, dir, env, []string{"query", "--sql", "SELECT source, count(*) AS runs FROM recommend_runs GROUP BY ALL"})
	require.Zero(t, code, errOut)
	assert.Contains(t, out, "watch", "the finding was recorded by the watch's run")
}
