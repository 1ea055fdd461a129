package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/freeport"
	"github.com/mcptrail/mcptrail/server"
)

// TestServeSurvivesSIGKILL runs `mcptrail serve` as a child process (its
// embedded NATS server inside it), publishes events through JetStream with
// publish acknowledgements, kills the daemon with SIGKILL while it ingests,
// restarts it, lets it drain, stops it with SIGTERM and checks that every
// acknowledged event is stored exactly once.
func TestServeSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	const n = 60000
	dir := t.TempDir()
	db := filepath.Join(dir, "mcptrail.duckdb")
	natsAddr, httpAddr := freeport.Addr(t), freeport.Addr(t)
	env := append(os.Environ(),
		"MCPTRAIL_STORAGE_PATH="+db,
		"MCPTRAIL_NATS_EMBEDDED_LISTEN="+natsAddr,
		"MCPTRAIL_NATS_EMBEDDED_STORE_DIR="+filepath.Join(dir, "nats"),
		"MCPTRAIL_HTTP_LISTEN="+httpAddr,
		// The daemon's own NATS user, which the test uses to inspect the
		// consumer; gateways publish as the default gateway user.
		"MCPTRAIL_NATS_USER=admin",
		"MCPTRAIL_NATS_PASSWORD=admin-secret-pw16",
		// Small batches make ingest slower than publishing, so that the
		// kill lands in the middle of it.
		"MCPTRAIL_INGEST_BATCH_SIZE=300",
		"MCPTRAIL_INGEST_FLUSH_INTERVAL=50ms",
	)
	logs := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logs)
	require.NoError(t, err)
	defer logf.Close()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logs)
			t.Logf("serve log:\n%s", b)
		}
	})
	serve := func() *exec.Cmd {
		cmd := exec.Command(binary, "serve")
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		require.Eventually(t, func() bool { return httpStatus(httpAddr, "/readyz") == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "serve did not become ready")
		return cmd
	}

	daemon := serve()
	ctx := context.Background()
	pw, err := server.ReadPasswordFile(filepath.Join(dir, server.GatewayPasswordFileName))
	require.NoError(t, err)
	st, err := server.Publish(ctx, server.PublishOptions{URL: "nats://" + natsAddr,
		Auth: server.Auth{User: server.DefaultGatewayUser, Password: pw}}, crashEvents(n))
	require.NoError(t, err)
	require.Equal(t, n, st.Published)

	// Kill twice in the middle of ingest, restarting each time. Each run's
	// metrics start from zero; the second kill waits for a third of what the
	// first run left.
	left := n
	for round := range 2 {
		at := max(left/20, 1)
		if round == 1 {
			at = max(left/3, 1)
		}
		var stored int
		require.Eventually(t, func() bool {
			stored = ingestedSoFar(httpAddr)
			return stored >= min(at, left)
		}, 30*time.Second, 5*time.Millisecond)
		require.NoError(t, daemon.Process.Signal(syscall.SIGKILL))
		_ = daemon.Wait()
		t.Logf("kill %d: this run had stored about %d of the %d events left", round+1, stored, left)
		left = max(left-stored, 0)
		daemon = serve()
	}
	nc, err := nats.Connect("nats://"+natsAddr, nats.UserInfo("admin", "admin-secret-pw16"))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	last := stream.CachedInfo().State.LastSeq
	require.Equal(t, uint64(n), last, "the stream holds each published event once")
	// The consumer acknowledges nothing (a limits stream): what the daemon
	// stored is its checkpoint, which /metrics shows.
	require.Eventually(t, func() bool { return metricSum(httpAddr, "mcptrail_stored_stream_sequence") == float64(last) },
		60*time.Second, 50*time.Millisecond, "the restarted daemon did not store the whole stream")
	nc.Close()

	start := time.Now()
	require.NoError(t, daemon.Process.Signal(syscall.SIGTERM))
	require.NoError(t, daemon.Wait(), "serve must exit 0 on SIGTERM")
	assert.Less(t, time.Since(start), 10*time.Second)

	store, err := analytics.Open(ctx, db, analytics.Options{ReadOnly: true})
	require.NoError(t, err)
	defer store.Close()
	var total, distinct int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*), count(DISTINCT id) FROM calls`).Scan(&total, &distinct))
	assert.Equal(t, n, total, "every acknowledged event is stored")
	assert.Equal(t, n, distinct, "and none twice")
}

// `simulate --nats` against `serve` needs no credentials on the command line:
// it signs in as the embedded server's default gateway, whose password file
// serve wrote beside the database. Without that file it is refused, and says
// how to sign in. It publishes on nats.subject (here not the default), which
// is all the gateway may publish to.
func TestSimulateNATSSignsInAsTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	dir := t.TempDir()
	natsAddr, httpAddr := freeport.Addr(t), freeport.Addr(t)
	env := append(os.Environ(),
		"MCPTRAIL_STORAGE_PATH="+filepath.Join(dir, "mcptrail.duckdb"),
		"MCPTRAIL_NATS_EMBEDDED_LISTEN="+natsAddr,
		"MCPTRAIL_NATS_EMBEDDED_STORE_DIR="+filepath.Join(dir, "nats"),
		"MCPTRAIL_HTTP_LISTEN="+httpAddr,
		"MCPTRAIL_NATS_SUBJECT=gw.audit.>",
	)
	serve := exec.Command(binary, "serve")
	var log strings.Builder
	serve.Env, serve.Stderr = env, &log
	require.NoError(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	require.Eventually(t, func() bool { return httpStatus(httpAddr, "/readyz") == http.StatusOK },
		30*time.Second, 20*time.Millisecond, "serve did not become ready")

	sim := exec.Command(binary, "simulate", "--count", "50", "--nats", "nats://"+natsAddr)
	sim.Env = env
	out, err := sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "published 50 events")

	sim = exec.Command(binary, "simulate", "--count", "5", "--nats", "nats://"+natsAddr, "--db", filepath.Join(t.TempDir(), "other.duckdb"))
	sim.Env = env
	out, err = sim.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "Authorization Violation")
	assert.Contains(t, string(out), "--nats-password-file")

	sim = exec.Command(binary, "simulate", "--count", "5", "--nats", "nats://"+natsAddr, "--nats-password-file", filepath.Join(dir, "nope"))
	sim.Env = env
	out, err = sim.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--nats-password-file")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode())
}

func crashEvents(n int) func() (audit.Event, bool, error) {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	i := 0
	return func() (audit.Event, bool, error) {
		if i >= n {
			return audit.Event{}, false, nil
		}
		e := audit.Event{
			ID: fmt.Sprintf("crash-%06d", i), TS: base.Add(time.Duration(i) * time.Second), Server: "proxmox-mcp",
			Tool: "vm_status", Decision: audit.Allowed, Status: "ok", Agent: "ops-agent", Session: fmt.Sprintf("s%d", i/100),
		}
		i++
		return e, true, nil
	}
}

func httpStatus(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metricsText is the daemon's /metrics page.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "/metrics: %s", body)
	return string(body)
}

// metricSum reads a metric from /metrics: the sum of its samples, every
// label set of it (0 when the daemon does not answer or has none).
func metricSum(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, "{") && !strings.HasPrefix(rest, " ")) {
			continue // another metric whose name starts with this one
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			total += v
		}
	}
	return total
}

// ingestedSoFar sums mcptrail_events_ingested_total from /metrics.
func ingestedSoFar(addr string) int { return int(metricSum(addr, "mcptrail_events_ingested_total")) }

// TestSimulateSendsOTLPToServe: simulate --otlp sends its traffic as OTLP/HTTP
// to serve's receiver with the exporters' token, which serve generated into
// otlp.token_file (mode 0600), and every event is stored; simulate --format otlp writes a file that ingest reads back as the
// same calls.
func TestSimulateSendsOTLPToServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	dir := t.TempDir()
	otlpAddr, db := freeport.Addr(t), filepath.Join(dir, "mcptrail.duckdb")
	httpAddr, _ := startServe(t, dir, db, []string{"MCPTRAIL_OTLP_LISTEN=" + otlpAddr},
		func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
	env := append(os.Environ(), "MCPTRAIL_STORAGE_PATH="+db, "MCPTRAIL_NOW=2026-11-30T00:00:00Z")

	sim := exec.Command(binary, "simulate", "--count", "1200", "--seed", "5", "--otlp", "http://"+otlpAddr)
	sim.Env = env
	out, err := sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "sent 1200 events")
	assert.Contains(t, string(out), ", 0 rejected")
	require.Eventually(t, func() bool { return ingestedSoFar(httpAddr) == 1200 }, 20*time.Second, 50*time.Millisecond)

	st, err := os.Stat(filepath.Join(dir, "mcptrail-otlp.token"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	sim = exec.Command(binary, "simulate", "--count", "5", "--otlp", "http://"+otlpAddr)
	sim.Env = append(env, "MCPTRAIL_OTLP_TOKEN=not-the-exporters-token")
	out, err = sim.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "401 Unauthorized")

	// The same traffic as an OTLP/JSON file, ingested into another database.
	// (TestSimulateSendsOTLPOverGRPC sends it over gRPC.)
	file := filepath.Join(dir, "traces.jsonl")
	sim = exec.Command(binary, "simulate", "--count", "1200", "--seed", "5", "--format", "otlp", "--out", file)
	sim.Env = env
	out, err = sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	other := filepath.Join(dir, "other.duckdb")
	ing := exec.Command(binary, "ingest", "--db", other, file)
	ing.Env = env
	out, err = ing.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "ingested 1200, duplicates 0, rejected 0")
}

// TestSimulateSendsOTLPOverGRPC: simulate --otlp-protocol grpc sends its
// traffic to serve's OTLP/gRPC receiver with the exporters' token, and
// every event is stored; a wrong token is refused by name.
func TestSimulateSendsOTLPOverGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the daemon as a child process")
	}
	dir := t.TempDir()
	grpcAddr, db := freeport.Addr(t), filepath.Join(dir, "mcptrail.duckdb")
	httpAddr, _ := startServe(t, dir, db, []string{"MCPTRAIL_OTLP_GRPC_LISTEN=" + grpcAddr},
		func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
	env := append(os.Environ(), "MCPTRAIL_STORAGE_PATH="+db, "MCPTRAIL_NOW=2026-11-30T00:00:00Z")

	sim := exec.Command(binary, "simulate", "--count", "1200", "--seed", "5", "--otlp", "http://"+grpcAddr, "--otlp-protocol", "grpc")
	sim.Env = env
	out, err := sim.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "sent 1200 events")
	require.Eventually(t, func() bool { return ingestedSoFar(httpAddr) == 1200 }, 20*time.Second, 50*time.Millisecond)

	sim = exec.Command(binary, "simulate", "--count", "5", "--otlp", "http://"+grpcAddr, "--otlp-protocol", "grpc")
	sim.Env = append(env, "MCPTRAIL_OTLP_TOKEN=not-the-exporters-token")
	out, err = sim.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "Unauthenticated")
}
