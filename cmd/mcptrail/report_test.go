package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
)

// lockedBuffer collects a subprocess's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReportSchedulesInTheDaemon runs `mcptrail serve` with two report
// schedules: one missed while the daemon was down (it runs once at start)
// and one every few seconds (it publishes its JSON to NATS and keeps one
// report). Meanwhile `mcptrail report` runs through the daemon and prints
// the same bytes as on the file once the daemon is gone.
func TestReportSchedulesInTheDaemon(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	env := []string{"MCPTRAIL_NOW=", "MCPTRAIL_HTTP_LISTEN="}
	_, code, errOut := runCLI(t, tmp, env, []string{"simulate", "--scenario", "proxmox", "--seed", "1", "--out", "p.jsonl"})
	require.Zero(t, code, errOut)
	_, code, errOut = runCLI(t, tmp, env, []string{"ingest", "p.jsonl", "--db", db})
	require.Zero(t, code, errOut)

	// The weekly report last ran more than a week ago.
	weekly := filepath.Join(tmp, "weekly")
	require.NoError(t, os.MkdirAll(weekly, 0o755))
	last := time.Now().UTC().Add(-9 * 24 * time.Hour).Format(time.RFC3339)
	require.NoError(t, os.WriteFile(filepath.Join(weekly, ".mcptrail-schedule.json"),
		[]byte(fmt.Sprintf(`{"schedule":"weekly","spec":"0 8 * * MON","armed":%q,"last_run":%q,"last_ok":true}`, last, last)), 0o644))

	natsAddr, httpAddr := freeport.Addr(t), freeport.Addr(t)
	cfg := filepath.Join(tmp, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
storage:
  path: %s
nats:
  embedded:
    listen: %s
    store_dir: %s
  user: admin                  # the daemon's own user, which may read the reports' subjects
  password: admin-secret-pw16
http:
  listen: %s
reports:
  - name: weekly
    schedule: "0 8 * * MON"
    servers: [proxmox-mcp]
    formats: [json, html]
    out_dir: %s
  - name: often
    schedule: "@every 4s"
    window: 2d
    formats: [json]
    out_dir: %s
    keep: 1
`, db, natsAddr, filepath.Join(tmp, "nats"), httpAddr, weekly, filepath.Join(tmp, "often"))), 0o644))

	daemonLog := &lockedBuffer{}
	serve := exec.Command(binary, "serve", "--config", cfg)
	serve.Dir = tmp
	serve.Env = append(os.Environ(), env...)
	serve.Stdout, serve.Stderr = daemonLog, daemonLog
	require.NoError(t, serve.Start())
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = serve.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- serve.Wait() }()
		select {
		case err := <-done:
			assert.NoError(t, err, "serve exits 0 on SIGTERM")
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
			t.Error("serve did not stop within 20 s")
		}
	}
	defer func() {
		stop()
		if t.Failed() {
			t.Logf("daemon log:\n%s", daemonLog.String())
		}
	}()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 100*time.Millisecond)

	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo("admin", "admin-secret-pw16"))
	require.NoError(t, err)
	defer nc.Close()
	msgs := make(chan *nats.Msg, 16)
	_, err = nc.ChanSubscribe("mcptrail.reports.>", msgs)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	// The missed weekly run happens at start.
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(weekly, "proxmox-mcp", "*", "report.html"))
		return len(m) == 1
	}, 60*time.Second, 200*time.Millisecond, "the missed weekly report runs at start")

	// Each run publishes its JSON report; wait for the frequent one's.
	var schedules []string
	deadline := time.After(60 * time.Second)
	for len(schedules) == 0 || schedules[len(schedules)-1] != "often" {
		select {
		case m := <-msgs:
			assert.Equal(t, "mcptrail.reports.proxmox-mcp", m.Subject)
			var doc struct {
				Server   string `json:"server"`
				Schedule string `json:"schedule"`
			}
			require.NoError(t, json.Unmarshal(m.Data, &doc))
			assert.Equal(t, "proxmox-mcp", doc.Server)
			schedules = append(schedules, doc.Schedule)
		case <-deadline:
			t.Fatalf("no report of the frequent schedule published to mcptrail.reports.> (got %v)", schedules)
		}
	}

	_, metrics := get("/metrics")
	assert.Contains(t, metrics, `mcptrail_report_runs_total{report="weekly"} 1`)
	assert.Contains(t, metrics, `mcptrail_report_runs_total{report="often"}`)
	assert.Contains(t, metrics, `mcptrail_report_duration_seconds_count{report="weekly"} 1`)

	// The CLI reports through the daemon, which holds the database.
	now := "--now=" + time.Now().UTC().Truncate(time.Minute).Format(time.RFC3339)
	args := []string{"report", "--server", "proxmox-mcp", "--format", "json", "--config", cfg, now}
	viaDaemon, code, errOut := runCLI(t, tmp, env, args)
	require.Zero(t, code, errOut)
	_, code, errOut = runCLI(t, tmp, env, []string{"report", "--server", "nope-mcp", "--config", cfg, now})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `no calls for server "nope-mcp"`)

	// Retention: the frequent schedule keeps one report.
	// At least two runs (a slow machine may have made more by now: each
	// report also backtests its recommendation).
	require.Eventually(t, func() bool {
		_, metrics := get("/metrics")
		m := regexp.MustCompile(`mcptrail_report_runs_total\{report="often"\} (\d+)`).FindStringSubmatch(metrics)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n >= 2
	}, 30*time.Second, 200*time.Millisecond)
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(tmp, "often", "proxmox-mcp", "*", "report.json"))
		return len(m) == 1
	}, 30*time.Second, 200*time.Millisecond)

	stop()
	assert.Contains(t, daemonLog.String(), "running a report missed while the daemon was down")
	onFile, code, errOut := runCLI(t, tmp, env, args)
	require.Zero(t, code, errOut)
	// Each run is recorded in the finding history, and the schedule keeps
	// running between the two: the previous recorded run differs, the rest
	// must not.
	previous := regexp.MustCompile(`"previous_run_at": "[^"]*"`)
	assert.Equal(t, previous.ReplaceAllString(onFile, "PREVIOUS"), previous.ReplaceAllString(viaDaemon, "PREVIOUS"),
		"the daemon prints the same bytes as the file")
}
