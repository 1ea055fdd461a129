package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
)

// serve wires its alarm from alerts.*: a runaway loop sent through JetStream
// is alerted on alerts.subject_prefix + server, logged and counted in
// /metrics, and closed when it ends.
func TestServeAlertsRunawayLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	dir := t.TempDir()
	natsAddr, httpAddr := freeport.Addr(t), freeport.Addr(t)
	serve := exec.Command(binary, "serve")
	serve.Env = append(os.Environ(),
		"MCPTRAIL_STORAGE_PATH="+filepath.Join(dir, "mcptrail.duckdb"),
		"MCPTRAIL_NATS_EMBEDDED_LISTEN="+natsAddr,
		"MCPTRAIL_NATS_EMBEDDED_STORE_DIR="+filepath.Join(dir, "nats"),
		"MCPTRAIL_HTTP_LISTEN="+httpAddr,
		"MCPTRAIL_NATS_USER=daemon", "MCPTRAIL_NATS_PASSWORD=daemon-secret-pw",
		"MCPTRAIL_ALERTS_RUNAWAY_POLLS=4", "MCPTRAIL_ALERTS_INTERVAL=1s",
		"MCPTRAIL_ALERTS_SUBJECT_PREFIX=ops.alerts.", "MCPTRAIL_RECOMMEND_POLL_MAX_INTERVAL=3s",
	)
	var log lockedBuffer
	serve.Stderr = &log
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	require.Eventually(t, func() bool { return httpStatus(httpAddr, "/readyz") == http.StatusOK },
		30*time.Second, 20*time.Millisecond, "serve did not become ready")

	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo("daemon", "daemon-secret-pw"))
	require.NoError(t, err)
	defer nc.Close()
	alerts := make(chan map[string]any, 10)
	_, err = nc.Subscribe("ops.alerts.>", func(m *nats.Msg) {
		var a map[string]any
		if json.Unmarshal(m.Data, &a) == nil {
			a["subject"] = m.Subject
			alerts <- a
		}
	})
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(i int, tool string) {
		data, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("loop-%d", i), "ts": time.Now().UTC().Format(time.RFC3339Nano),
			"server": "pve.lab", "tool": tool, "decision": "allowed", "status": "ok", "agent": "a1", "session": "s1",
			"args": map[string]any{"vmid": 100}})
		_, err := js.Publish(ctx, "mcp.audit.pve_lab", data)
		require.NoError(t, err)
	}
	call(0, "vm_agent_exec")
	for i := 1; i <= 8; i++ {
		time.Sleep(300 * time.Millisecond)
		call(i, "vm_agent_exec_status")
	}
	next := func() map[string]any {
		select {
		case a := <-alerts:
			return a
		case <-ctx.Done():
			t.Fatalf("no alert; serve log:\n%s", log.String())
			return nil
		}
	}
	running, ended := next(), next()
	assert.Equal(t, "ops.alerts.pve_lab", running["subject"])
	assert.Equal(t, []any{"runaway_loop", "running", "pve.lab", "a1", "s1", "vm_agent_exec_status"},
		[]any{running["kind"], running["state"], running["server"], running["agent"], running["session"], running["tool"]})
	assert.Equal(t, "ended", ended["state"])
	assert.Equal(t, 8.0, ended["polls"])
	assert.Equal(t, running["id"], ended["id"])
	assert.Contains(t, log.String(), "alarm: runaway_loop running")
	metrics := metricsText(t, httpAddr)
	assert.Contains(t, metrics, `mcptrail_alerts_total{kind="runaway_loop",state="ended"} 1`)
	assert.Contains(t, metrics, `mcptrail_alerts_total{kind="runaway_loop",state="running"} 1`)
	select {
	case a := <-alerts:
		t.Errorf("one alert too many: %v", a)
	case <-time.After(2 * time.Second):
	}
}
