package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/freeport"
	"github.com/mcptrail/mcptrail/server"
)

// natsCluster is a JetStream cluster of nodes running in the test process,
// each on fixed ports and its own store, so that a node can be stopped and
// started again as itself.
type natsCluster struct {
	t     *testing.T
	opts  []*natsserver.Options
	nodes []*natsserver.Server
}

func newNATSCluster(t *testing.T, size int) *natsCluster {
	c := &natsCluster{t: t}
	var routes []string
	for i := range size {
		client, route := freeport.Port(t), freeport.Port(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", route))
		c.opts = append(c.opts, &natsserver.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: client,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: natsserver.ClusterOpts{Name: "mcptrail-test", Host: "127.0.0.1", Port: route},
		})
	}
	for _, o := range c.opts {
		o.Routes = natsserver.RoutesFromStr(strings.Join(routes, ","))
	}
	c.nodes = make([]*natsserver.Server, size)
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
	})
	return c
}

// start starts node i (again).
func (c *natsCluster) start(i int) {
	c.t.Helper()
	o := *c.opts[i]
	ns, err := natsserver.NewServer(&o)
	require.NoError(c.t, err)
	ns.Start()
	require.True(c.t, ns.ReadyForConnections(10*time.Second))
	c.nodes[i] = ns
}

// stop stops node i as a crash would look to its peers.
func (c *natsCluster) stop(i int) {
	if ns := c.nodes[i]; ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		c.nodes[i] = nil
	}
}

func (c *natsCluster) url() string {
	var urls []string
	for _, o := range c.opts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(urls, ",")
}

// node is the index of the node named name.
func (c *natsCluster) node(name string) int {
	for i, o := range c.opts {
		if o.ServerName == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}

func readyzBody(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeOnAThreeNodeCluster: serve starts before the cluster has a
// quorum and waits, saying why, instead of exiting; it creates the stream
// with 3 replicas; while a publisher that re-sends what was not
// acknowledged publishes, the stream leader's node is stopped and started
// again and serve is killed (SIGKILL) and started again; every acknowledged
// event is stored exactly once. A stream that cannot be placed is waited
// for, not refused at once.
func TestServeOnAThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a NATS cluster and kills nodes")
	}
	cl := newNATSCluster(t, 3)
	cl.start(0) // one node of three: no JetStream quorum yet
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	env := []string{"MCPTRAIL_NATS_URL=" + cl.url(), "MCPTRAIL_NATS_STREAM_REPLICAS=3", "MCPTRAIL_INGEST_FLUSH_INTERVAL=200ms"}
	waiting := func(addr string) bool {
		code, body := readyzBody(addr)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for stream MCP_AUDIT")
	}
	addr, pid := startServe(t, tmp, db, env, waiting)
	cl.start(1)
	cl.start(2)
	require.Eventually(t, func() bool { return httpStatus(addr, "/readyz") == http.StatusOK }, time.Minute, 100*time.Millisecond,
		"serve becomes ready once the cluster has a quorum")

	nc, err := nats.Connect(cl.url(), nats.MaxReconnects(-1))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	info, err := js.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	assert.Equal(t, 3, info.CachedInfo().Config.Replicas, "serve created the stream with nats.stream_replicas")

	const n = 30_000
	type result struct {
		st  server.PublishStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := server.Publish(ctx, server.PublishOptions{URL: cl.url(), Batch: 16, Rate: 5000, AckWait: 2 * time.Second},
			clusterEvents(n))
		done <- result{st, err}
	}()

	time.Sleep(1500 * time.Millisecond)
	si, err := js.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	leader := cl.node(si.CachedInfo().Cluster.Leader)
	t.Logf("stopping the stream leader %s", si.CachedInfo().Cluster.Leader)
	cl.stop(leader)
	time.Sleep(time.Second)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	time.Sleep(500 * time.Millisecond)
	cl.start(leader)
	addr, _ = startServe(t, tmp, db, env, func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })

	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("publishing did not end")
	}
	require.NoError(t, r.err)
	t.Logf("published %d events in %d messages, %d sent again, %d duplicates", r.st.Published, r.st.Messages, r.st.Resent, r.st.Duplicates)

	count := func() string {
		out, code, errOut := runCLI(t, tmp, []string{"MCPTRAIL_HTTP_LISTEN=" + addr},
			[]string{"query", "--sql", "SELECT count(*) AS n, count(DISTINCT id) AS d FROM calls", "--format", "csv", "--db", db})
		if code != 0 {
			return errOut
		}
		return out
	}
	require.Eventually(t, func() bool { return count() == fmt.Sprintf("n,d\n%d,%d\n", n, n) }, 2*time.Minute, 250*time.Millisecond,
		"every acknowledged event stored once: %s", count())

	// A stream asking for more replicas than the cluster has nodes cannot be
	// placed (code 400, no suitable peers): JetStream answers the same while
	// a cluster's nodes are still joining, so serve waits it out, and only at
	// nats.startup_timeout gives up, saying what the stream needs.
	other := t.TempDir()
	out, code, errOut := runCLI(t, other, []string{
		"MCPTRAIL_NATS_URL=" + cl.url(), "MCPTRAIL_NATS_STREAM=MCP_AUDIT_R5", "MCPTRAIL_NATS_SUBJECT=mcp.audit5.>",
		"MCPTRAIL_NATS_STREAM_REPLICAS=5", "MCPTRAIL_NATS_STARTUP_TIMEOUT=3s", "MCPTRAIL_HTTP_LISTEN=" + freeport.Addr(t),
	}, []string{"serve", "--db", filepath.Join(other, "r5.duckdb")})
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, errOut, "the stream does not answer yet; retrying", "serve waited before giving up")
	assert.Contains(t, errOut, "no suitable peers for placement")
	assert.Contains(t, errOut, "nats.stream_replicas is 5: the cluster needs that many JetStream servers online")
}

// clusterEvents are n distinct calls.
func clusterEvents(n int) func() (audit.Event, bool, error) {
	base := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	i := 0
	return func() (audit.Event, bool, error) {
		if i >= n {
			return audit.Event{}, false, nil
		}
		e := audit.Event{ID: fmt.Sprintf("cl-%06d", i), TS: base.Add(time.Duration(i) * time.Millisecond), Server: "proxmox-mcp",
			Tool: "get_vm_status", Decision: audit.Allowed, Status: "ok", Agent: "ops-bot", Session: fmt.Sprint("s", i%50)}
		i++
		return e, true, nil
	}
}

// TestServeGivesUpAfterTheStartupTimeout: a stream that stays unreachable
// (one node of three: no quorum) past nats.startup_timeout is fatal at
// start, with the servers tried named.
func TestServeGivesUpAfterTheStartupTimeout(t *testing.T) {
	cl := newNATSCluster(t, 3)
	cl.start(0)
	tmp := t.TempDir()
	env := []string{"MCPTRAIL_NATS_URL=" + cl.url(), "MCPTRAIL_NATS_STARTUP_TIMEOUT=3s", "MCPTRAIL_HTTP_LISTEN=" + freeport.Addr(t)}
	_, code, errOut := runCLI(t, tmp, env, []string{"serve", "--db", filepath.Join(tmp, "mcptrail.duckdb")})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "nats.stream")
	assert.Contains(t, errOut, "gave up after nats.startup_timeout (3s)")
	assert.Contains(t, errOut, fmt.Sprintf("nats://127.0.0.1:%d", cl.opts[0].Port), "names the servers tried")
}
