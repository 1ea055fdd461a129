package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/freeport"
)

// startNATS starts a JetStream server on addr with its store in dir.
func startNATS(t *testing.T, addr, dir string) *natsserver.Server {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	ns, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: p, NoLog: true, NoSigs: true, JetStream: true, StoreDir: dir})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	return ns
}

// TestPublishBatchedAcrossAServerRestart: a batched publish goes on while
// the NATS server restarts; what was not acknowledged is sent again with the
// same Nats-Msg-Id, and the stream holds every event exactly once.
func TestPublishBatchedAcrossAServerRestart(t *testing.T) {
	addr, dir := freeport.Addr(t), t.TempDir()
	ns := startNATS(t, addr, dir)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	ctx := context.Background()
	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}, Duplicates: 10 * time.Minute})
	require.NoError(t, err)

	const n = 40_000
	type result struct {
		st  PublishStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := Publish(ctx, PublishOptions{URL: "nats://" + addr, Batch: 64, Rate: 20_000, AckWait: 500 * time.Millisecond}, events(0, n, "pve"))
		done <- result{st, err}
	}()
	time.Sleep(500 * time.Millisecond)
	ns.Shutdown()
	ns.WaitForShutdown()
	time.Sleep(300 * time.Millisecond)
	ns = startNATS(t, addr, dir)

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("publish did not end")
	}
	require.NoError(t, r.err)
	t.Logf("published %d events in %d messages, %d sent again, %d duplicates", r.st.Published, r.st.Messages, r.st.Resent, r.st.Duplicates)
	assert.GreaterOrEqual(t, r.st.Published, n)

	// Read the whole stream back: every event once.
	require.Eventually(t, nc.IsConnected, 10*time.Second, 20*time.Millisecond)
	cons, err := js.OrderedConsumer(ctx, "MCP_AUDIT", jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	seen := map[string]int{}
	lines := 0
	for lines < n {
		batch, err := cons.FetchNoWait(1000)
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			got++
			assert.Equal(t, ingest.BatchContentType, m.Headers().Get("Content-Type"))
			sc := bufio.NewScanner(bytes.NewReader(m.Data()))
			for sc.Scan() {
				var e struct{ ID string }
				require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
				seen[e.ID]++
				lines++
			}
		}
		if got == 0 {
			break
		}
	}
	assert.Equal(t, n, lines, "events in the stream")
	assert.Len(t, seen, n, "distinct events")
	for i := range n {
		if id := fmt.Sprintf("ev-%07d", i); seen[id] != 1 {
			t.Fatalf("%s is in the stream %d times", id, seen[id])
		}
	}
}
