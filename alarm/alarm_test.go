package alarm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/alarm"
	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/internal/freeport"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/server"
)

const testServer = "pve"

// env is one database and embedded NATS store that daemons start on, one
// after the other.
type env struct {
	t      testing.TB
	db     string
	opts   server.Options
	config alarm.Config
}

func newEnv(t testing.TB, cfg alarm.Config) *env {
	dir := t.TempDir()
	return &env{t: t, db: filepath.Join(dir, "mcptrail.duckdb"), config: cfg, opts: server.Options{
		EmbeddedListen: freeport.Addr(t), EmbeddedStoreDir: filepath.Join(dir, "nats"),
		GatewayPasswordFile: filepath.Join(dir, server.GatewayPasswordFileName),
		User:                "admin", Password: "admin-secret", JetStream: true,
		HTTPListen: freeport.Addr(t), BatchSize: 1000, FlushInterval: 50 * time.Millisecond,
	}}
}

// daemon is a running `serve` with its alarm (as cmd/mcptrail wires it).
type daemon struct {
	store  *analytics.Store
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start() *daemon {
	t := e.t
	store, err := analytics.Open(context.Background(), e.db, analytics.Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{store: store, cancel: cancel, done: make(chan error, 1)}
	opts := e.opts
	al := &alarm.Alarm{Store: store, Config: e.config, Log: slog.New(slog.DiscardHandler)}
	opts.Stored = al.Wake
	opts.Background = func(ctx context.Context, nc *nats.Conn) {
		al.Publish = func(subject string, data []byte) error { return nc.Publish(subject, data) }
		al.Run(ctx)
	}
	ready := make(chan struct{})
	go func() { d.done <- server.Run(ctx, store, opts, nil, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-d.done:
		t.Fatalf("daemon stopped before it was ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready after 20 s")
	}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) stop() {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	<-d.done
	_ = d.store.Close()
}

// collector subscribes to mcptrail.alerts.> as the daemon's user.
type collector struct {
	mu       sync.Mutex
	alerts   []alarm.Alert
	received []time.Time
}

func (c *collector) subscribe(t testing.TB, addr string) *nats.Conn {
	nc, err := nats.Connect("nats://"+addr, nats.UserInfo("admin", "admin-secret"))
	require.NoError(t, err)
	_, err = nc.Subscribe("mcptrail.alerts.>", func(m *nats.Msg) {
		var a alarm.Alert
		if json.Unmarshal(m.Data, &a) == nil && m.Subject == alarm.DefaultSubjectPrefix+a.Server {
			c.mu.Lock()
			c.alerts = append(c.alerts, a)
			c.received = append(c.received, time.Now())
			c.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return nc
}

// count is how many alerts of the session in that state arrived.
func (c *collector) count(session, kind, state string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.alerts {
		if a.Session == session && a.Kind == kind && a.State == state {
			n++
		}
	}
	return n
}

// arrival is when the session's first alert in that state arrived, or zero.
func (c *collector) arrival(session, state string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range c.alerts {
		if a.Session == session && a.State == state {
			return c.received[i]
		}
	}
	return time.Time{}
}

func (c *collector) sessions() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, a := range c.alerts {
		out[a.Session]++
	}
	return out
}

// gateway publishes calls through JetStream, as a gateway does, retrying
// while the daemon restarts.
type gateway struct {
	js jetstream.JetStream
	n  atomic.Int64
}

func newGateway(t testing.TB, addr string) *gateway {
	nc, err := nats.Connect("nats://"+addr, nats.UserInfo("admin", "admin-secret"),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &gateway{js: js}
}

func (g *gateway) call(session, tool string, vmid int, failed bool) error {
	status := "ok"
	if failed {
		status = "error"
	}
	ev := map[string]any{"id": fmt.Sprintf("ev-%d", g.n.Add(1)), "ts": time.Now().UTC().Format(time.RFC3339Nano),
		"server": testServer, "tool": tool, "decision": "allowed", "status": status, "grant": "ops", "agent": "a1",
		"session": session, "args": map[string]any{"vmid": vmid}}
	data, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := g.js.Publish(ctx, "mcp.audit."+testServer, data)
	return err
}

func liveConfig() alarm.Config {
	p := recommend.DefaultParams()
	p.PollMaxInterval = 5 * time.Second
	return alarm.Config{Interval: time.Second, RunawayPolls: 5, Params: p}
}

// A runaway loop published live through NATS is alerted once while it runs,
// also across a restart of the daemon in its middle, and once when it ends;
// a short loop is not alerted; a retry storm is, as a storm.
func TestLiveAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a polling loop in real time")
	}
	e := newEnv(t, liveConfig())
	d := e.start()
	var got collector
	sub := got.subscribe(t, e.opts.EmbeddedListen)
	defer func() { sub.Close() }()
	gw := newGateway(t, e.opts.EmbeddedListen)

	// A normal loop (3 polls) and a retry storm (8 failed calls, no start call).
	require.NoError(t, gw.call("short", "vm_agent_exec", 100, false))
	for range 3 {
		require.NoError(t, gw.call("short", "vm_agent_exec_status", 100, false))
	}
	for range 8 {
		require.NoError(t, gw.call("storm", "get_vm", 7, true))
	}

	// The runaway loop: a start call, then a poll every second until told.
	var stopLoop atomic.Bool
	loopDone := make(chan struct{})
	require.NoError(t, gw.call("runaway", "vm_agent_exec", 100, false))
	go func() {
		defer close(loopDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for !stopLoop.Load() {
			_ = gw.call("runaway", "vm_agent_exec_status", 100, false) // lost while the daemon restarts: the loop goes on
			<-tick.C
		}
	}()

	require.Eventually(t, func() bool { return got.count("runaway", alarm.KindRunawayLoop, alarm.StateRunning) == 1 },
		30*time.Second, 100*time.Millisecond, "the runaway loop is alerted while it runs")
	require.Eventually(t, func() bool { return got.count("storm", alarm.KindRetryStorm, alarm.StateEnded) == 1 },
		30*time.Second, 100*time.Millisecond, "the storm is alerted and closed")
	assert.Equal(t, 1, got.count("storm", alarm.KindRetryStorm, alarm.StateRunning))

	// Restart in the middle of the loop: the new daemon picks it up from the
	// stored calls and does not alert it again.
	d.stop()
	sub.Close()
	d = e.start()
	sub = got.subscribe(t, e.opts.EmbeddedListen)
	var stored int
	require.Eventually(t, func() bool {
		_ = d.store.DB().QueryRow(`SELECT count(*) FROM calls WHERE session = 'runaway' AND ingested_at > now() - INTERVAL 1 SECOND`).Scan(&stored)
		return stored > 0
	}, 20*time.Second, 100*time.Millisecond, "the loop goes on after the restart")
	stopLoop.Store(true)
	<-loopDone

	require.Eventually(t, func() bool { return got.count("runaway", alarm.KindRunawayLoop, alarm.StateEnded) == 1 },
		30*time.Second, 100*time.Millisecond, "the end of the loop is alerted")
	assert.Equal(t, 1, got.count("runaway", alarm.KindRunawayLoop, alarm.StateRunning), "one running alert per loop")
	assert.Equal(t, map[string]int{"runaway": 2, "storm": 2}, got.sessions(), "the short loop is not alerted")

	got.mu.Lock()
	var ended alarm.Alert
	for _, a := range got.alerts {
		if a.Session == "runaway" && a.State == alarm.StateEnded {
			ended = a
		}
	}
	got.mu.Unlock()
	assert.Equal(t, "vm_agent_exec", ended.StartTool)
	assert.Equal(t, "ops", ended.Grant)
	assert.Equal(t, "a1", ended.Agent)
	assert.Equal(t, 5.0, ended.Threshold)
	assert.Equal(t, "config", ended.ThresholdSource)
	assert.Greater(t, ended.Polls, int64(5))
	assert.InDelta(t, 60, ended.Rate, 20, "about one poll a second")
	assert.Nil(t, ended.Limit, "no policy recorded")

	var rows, open int
	require.NoError(t, d.store.DB().QueryRow(`SELECT count(*), count(*) FILTER (ended_at IS NULL) FROM alerts`).Scan(&rows, &open))
	assert.Equal(t, 2, rows)
	assert.Equal(t, 0, open)
}
