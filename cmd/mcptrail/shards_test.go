package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/shardsvc"
)

// shardEvents are n calls of one server, spread over two weeks.
func shardEvents(srv, tool string, n int) func() (audit.Event, bool, error) {
	base := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	i := 0
	return func() (audit.Event, bool, error) {
		if i >= n {
			return audit.Event{}, false, nil
		}
		e := audit.Event{
			ID: fmt.Sprintf("%s-%05d", srv, i), TS: base.Add(time.Duration(i) * 20 * time.Minute), Server: srv,
			Tool: tool, Decision: audit.Allowed, Status: "ok", Agent: "ops-agent", Session: fmt.Sprintf("%s-s%d", srv, i/20),
		}
		i++
		return e, true, nil
	}
}

// TestShardsThroughNATS: two serve daemons on one NATS, each owning one
// server (nats.servers) with its own consumer and database, register the
// service "mcptrail"; the CLI with --nats finds the one that owns --server
// and gets the answer the HTTP API gives, fans a query out to both (one
// section each), never sends its token to a shard that cannot prove it holds
// it, is refused without the token, is told when an answer is over
// max_payload, and, once a shard is killed, still prints the other and names
// the silent one.
func TestShardsThroughNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and two daemons")
	}
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(ns.Shutdown)
	require.True(t, ns.ReadyForConnections(10*time.Second))
	url := ns.ClientURL()

	// What a gateway allowed _INBOX.> for its acknowledgements (as the
	// README's permissions allow it) would read: the publish
	// acknowledgements, neither the events the shards pull nor the answers
	// the CLI gets.
	snoop, err := nats.Connect(url)
	require.NoError(t, err)
	defer snoop.Close()
	snooped, err := snoop.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, snooped.SetPendingLimits(-1, -1))
	require.NoError(t, snoop.Flush())

	const token = "shards-test-token-0123456789abcdef"
	now := "MCPTRAIL_NOW=2026-11-24T12:00:00Z"
	type shard struct{ db, http string }
	start := func(name, owns string) (shard, int) {
		tmp := t.TempDir()
		db := filepath.Join(tmp, "mcptrail.duckdb")
		addr, pid := startServe(t, tmp, db, []string{"MCPTRAIL_NATS_URL=" + url, "MCPTRAIL_NATS_CONSUMER=" + name,
			"MCPTRAIL_NATS_SERVERS=" + owns, "MCPTRAIL_HTTP_TOKEN=" + token},
			func(addr string) bool { return httpStatus(addr, "/readyz") == 200 })
		return shard{db: db, http: addr}, pid
	}
	a, _ := start("shard-a", "alpha")
	b, pidB := start("shard-b", "beta")

	ctx := context.Background()
	for srv, tool := range map[string]string{"alpha": "vm_status", "beta": "bucket_list"} {
		_, err := server.Publish(ctx, server.PublishOptions{URL: url}, shardEvents(srv, tool, 1000))
		require.NoError(t, err)
	}

	cli := func(env []string, args ...string) (string, int, string) {
		return runCLI(t, t.TempDir(), append([]string{now, "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}, env...), args)
	}
	withToken := []string{"MCPTRAIL_HTTP_TOKEN=" + token}
	count := []string{"--nats", url, "query", "--sql", "SELECT server, count(*) AS n FROM calls GROUP BY ALL ORDER BY 1", "--format", "csv"}

	// A fan-out: one section per shard, each with its own server's calls only.
	require.Eventually(t, func() bool {
		out, code, _ := cli(withToken, count...)
		return code == 0 && strings.Contains(out, "alpha,1000") && strings.Contains(out, "beta,1000")
	}, 30*time.Second, 200*time.Millisecond, "both shards store their server's events")
	out, code, stderr := cli(withToken, count...)
	require.Zero(t, code, stderr)
	assert.Equal(t, "shard,server,n\nshard-a,alpha,1000\nshard-b,beta,1000\n", out, "one CSV, each row naming its shard")
	// In JSON too: one array, the shards' rows merged, each naming its shard.
	countJSON := append(slices.Clone(count[:len(count)-1]), "json")
	out, code, stderr = cli(withToken, countJSON...)
	require.Zero(t, code, stderr)
	assert.Equal(t, "[\n  {\"shard\": \"shard-a\", \"server\": \"alpha\", \"n\": 1000},\n  {\"shard\": \"shard-b\", \"server\": \"beta\", \"n\": 1000}\n]\n", out)
	// A text format keeps one section per shard.
	out, code, stderr = cli(withToken, count[:len(count)-2]...)
	require.Zero(t, code, stderr)
	assert.Regexp(t, `^== shard shard-a \(\w+\), servers alpha ==\n(.+\n)+\n== shard shard-b \(\w+\), servers beta ==\n(.+\n)+$`, out)

	// Routed to the shard that owns beta: byte for byte what B's HTTP API answers.
	routed, code, stderr := cli(withToken, "--nats", url, "recommend", "--server", "beta", "--since", "30d")
	require.Zero(t, code, stderr)
	viaHTTP, code, stderr := cli(append(withToken, "MCPTRAIL_HTTP_LISTEN="+b.http), "--db", b.db, "recommend", "--server", "beta", "--since", "30d")
	require.Zero(t, code, stderr)
	assert.Equal(t, viaHTTP, routed)
	assert.Contains(t, routed, "bucket_list")
	assert.NotContains(t, routed, "vm_status")
	_, code, stderr = cli(withToken, "--nats", url, "recommend", "--server", "gamma")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, `no shard owns server "gamma"`)
	assert.Contains(t, stderr, "alpha")

	acks := 0
	for {
		m, err := snooped.NextMsg(100 * time.Millisecond)
		if err != nil {
			break
		}
		var ack struct {
			Stream    string `json:"stream"`
			Seq       uint64 `json:"seq"`
			Duplicate bool   `json:"duplicate"`
			Domain    string `json:"domain"`
		}
		dec := json.NewDecoder(strings.NewReader(string(m.Data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ack); err != nil || ack.Stream == "" || ack.Seq == 0 {
			t.Errorf("_INBOX.> carried more than publish acknowledgements: %s %.200q", m.Subject, m.Data)
			break
		}
		acks++
	}
	assert.Equal(t, 2000, acks, "the publishers' acknowledgements")

	// A finding id names its server: suppress and unsuppress go to the shard that owns it.
	id := "unused_tool:beta:*:bucket_delete"
	out, code, stderr = cli(withToken, "--nats", url, "suppress", id, "--reason", "kept for DR", "--until", "30d", "--force")
	require.Zero(t, code, stderr)
	assert.Contains(t, out, id)
	out, code, stderr = cli(append(withToken, "MCPTRAIL_HTTP_LISTEN="+b.http), "--db", b.db, "suppressions", "--format", "json")
	require.Zero(t, code, stderr)
	assert.Contains(t, out, id, "stored by the shard that owns beta")
	out, code, stderr = cli(withToken, "--nats", url, "unsuppress", id)
	require.Zero(t, code, stderr)
	assert.Equal(t, "unsuppressed "+id+"\n", out)

	// A CLI with another token does not send it: the shards cannot prove they hold it.
	_, code, stderr = cli([]string{"MCPTRAIL_HTTP_TOKEN=another-token-0123456789abcdef"}, "--nats", url, "recommend", "--server", "beta")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "did not prove that it holds this CLI's token")

	// The service itself refuses a request without the token or with a wrong one.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	shards, err := (&shardsvc.Client{Conn: nc}).Discover(ctx)
	require.NoError(t, err)
	require.Len(t, shards, 2)
	assert.Equal(t, []string{"beta"}, shards[1].Servers)
	assert.Equal(t, b.db, shards[1].Database)
	subject := shardsvc.SubjectPrefix + "." + shards[1].ID + ".recommend"
	for _, auth := range []string{"", "Bearer wrong-token-0123456789abcdef", "Bearer " + token + "x"} {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"server":"beta"}`)
		if auth != "" {
			msg.Header.Set(shardsvc.AuthHeader, auth)
		}
		resp, err := nc.RequestMsg(msg, 5*time.Second)
		require.NoError(t, err)
		assert.Equal(t, shardsvc.CodeUnauthorized, resp.Header.Get(micro.ErrorCodeHeader), "auth %q", auth)
		assert.Contains(t, resp.Header.Get(micro.ErrorHeader), "unauthorized")
		assert.Empty(t, resp.Data)
	}
	// Nor does it run, even with the token, a request about a server it
	// does not consume: discovery is not authenticated, so it checks too.
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`{"server":"alpha"}`)
	msg.Header.Set(shardsvc.AuthHeader, "Bearer "+token)
	resp, err := nc.RequestMsg(msg, 5*time.Second)
	require.NoError(t, err)
	assert.Equal(t, shardsvc.CodeConflict, resp.Header.Get(micro.ErrorCodeHeader))
	assert.Contains(t, resp.Header.Get(micro.ErrorHeader), `this shard consumes servers beta, not "alpha"`)
	assert.Empty(t, resp.Data)

	// A program that may serve mcptrail.api.> but lacks the token cannot
	// borrow a shard's proof: it relays the CLI's challenge to shard B's
	// hello, but B's proof names B's subject, so the token is not sent.
	impostorConfig := micro.Config{Name: shardsvc.Name, Version: "1.0.0", Metadata: map[string]string{
		shardsvc.MetaServers: "gamma", shardsvc.MetaDatabase: "/elsewhere.duckdb", shardsvc.MetaConsumer: "shard-z", shardsvc.MetaStream: "MCP_AUDIT"}}
	stolen := make(chan string, 1)
	steal := micro.HandlerFunc(func(req micro.Request) { // an impostor's recommend: keeps what it was sent
		select {
		case stolen <- req.Headers().Get(shardsvc.AuthHeader):
		default:
		}
		_ = req.Error("500", "impostor", nil)
	})
	recommendPath := micro.WithEndpointMetadata(map[string]string{shardsvc.MetaPath: "/api/v1/recommend"})
	tokenKept := func() {
		t.Helper()
		select {
		case auth := <-stolen:
			t.Errorf("the impostor received a request with %q", auth)
		default:
		}
	}
	impostor, err := micro.AddService(nc, impostorConfig)
	require.NoError(t, err)
	base := shardsvc.SubjectPrefix + "." + impostor.Info().ID
	require.NoError(t, impostor.AddEndpoint(shardsvc.HelloEndpoint, micro.HandlerFunc(func(req micro.Request) {
		resp, err := nc.Request(shardsvc.SubjectPrefix+"."+shards[1].ID+"."+shardsvc.HelloEndpoint, req.Data(), 5*time.Second)
		if err != nil {
			_ = req.Error("500", err.Error(), nil)
			return
		}
		_ = req.Respond(resp.Data)
	}), micro.WithEndpointSubject(base+"."+shardsvc.HelloEndpoint)))
	require.NoError(t, impostor.AddEndpoint("recommend", steal, micro.WithEndpointSubject(base+".recommend"), recommendPath))
	_, code, stderr = cli(withToken, "--nats", url, "recommend", "--server", "gamma")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "did not prove that it holds this CLI's token")
	tokenKept()
	require.NoError(t, impostor.Stop())

	// Nor can it list B's own hello as its hello, beside a request subject of
	// its own: B would prove, and the token would go to the impostor.
	impostor, err = micro.AddService(nc, impostorConfig)
	require.NoError(t, err)
	require.NoError(t, impostor.AddEndpoint(shardsvc.HelloEndpoint, micro.HandlerFunc(func(micro.Request) {}),
		micro.WithEndpointSubject(shardsvc.SubjectPrefix+"."+shards[1].ID+"."+shardsvc.HelloEndpoint), micro.WithEndpointQueueGroup("impostor")))
	require.NoError(t, impostor.AddEndpoint("recommend", steal, micro.WithEndpointSubject(shardsvc.SubjectPrefix+".impostor.recommend"), recommendPath))
	_, code, stderr = cli(withToken, "--nats", url, "recommend", "--server", "gamma")
	assert.NotZero(t, code)
	assert.NotContains(t, stderr, "impostor")
	tokenKept()
	require.NoError(t, impostor.Stop())

	// Nor can it answer discovery as B, with servers of its choosing: two
	// answers for one instance stop the CLI before any request.
	fake, err := nc.Subscribe("$SRV.INFO.mcptrail", func(m *nats.Msg) {
		info := micro.Info{ServiceIdentity: micro.ServiceIdentity{Name: shardsvc.Name, ID: shards[1].ID, Version: "1.0.0",
			Metadata: map[string]string{shardsvc.MetaServers: "gamma", shardsvc.MetaConsumer: "a", shardsvc.MetaStream: "MCP_AUDIT"}},
			Type: micro.InfoResponseType, Endpoints: []micro.EndpointInfo{
				{Name: shardsvc.HelloEndpoint, Subject: shardsvc.SubjectPrefix + "." + shards[1].ID + "." + shardsvc.HelloEndpoint},
				{Name: "recommend", Subject: shardsvc.SubjectPrefix + "." + shards[1].ID + ".recommend",
					Metadata: map[string]string{shardsvc.MetaPath: "/api/v1/recommend"}}}}
		data, _ := json.Marshal(info)
		_ = m.Respond(data)
	})
	require.NoError(t, err)
	_, code, stderr = cli(withToken, "--nats", url, "recommend", "--server", "gamma")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "two services answer as instance "+shards[1].ID)
	require.NoError(t, fake.Unsubscribe())

	// An answer over max_payload is refused with the limit, not cut.
	_, code, stderr = cli(withToken, "--nats", url, "query", "--sql", "SELECT repeat('x', 1000) AS x FROM range(2000)")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "max payload of 1048576 bytes")
	assert.Contains(t, stderr, "HTTP API")

	// report without --server: each shard's reports, its folders written here
	// (with --out a shard prints what it wrote, in words: sections, whatever the format).
	reports := filepath.Join(t.TempDir(), "reports")
	out, code, stderr = cli(withToken, "--nats", url, "report", "--since", "30d", "--format", "json", "--out", reports)
	require.Zero(t, code, stderr)
	assert.Regexp(t, `^== shard shard-a \(\w+\), servers alpha ==\n(.+\n)+\n== shard shard-b \(\w+\), servers beta ==\n`, out)
	for _, srv := range []string{"alpha", "beta"} {
		found, err := filepath.Glob(filepath.Join(reports, srv, "*", "report.json"))
		require.NoError(t, err)
		assert.Len(t, found, 1, srv)
	}
	// Reports in JSON: one list of the shards' reports, each naming its shard.
	out, code, stderr = cli(withToken, "--nats", url, "report", "--since", "30d", "--format", "json")
	require.Zero(t, code, stderr)
	var merged []struct{ Shard, Server string }
	require.NoError(t, json.Unmarshal([]byte(out), &merged), out)
	assert.Equal(t, []struct{ Shard, Server string }{{"shard-a", "alpha"}, {"shard-b", "beta"}}, merged)
	assert.Contains(t, out, "[\n  {\n    \"shard\": \"shard-a\",\n    \"version\": 1,\n", "laid out as the shard wrote it")

	// Another program's durable consumer on the stream is no shard.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, "MCP_AUDIT", jetstream.ConsumerConfig{Durable: "archiver", Description: "not mcptrail"})
	require.NoError(t, err)

	// B dies: the fan-out prints A, names B and exits 4; B's server is not found.
	require.NoError(t, syscall.Kill(pidB, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		s, err := (&shardsvc.Client{Conn: nc}).Discover(ctx)
		return err == nil && len(s) == 1
	}, 10*time.Second, 100*time.Millisecond)
	out, code, stderr = cli(withToken, count...)
	assert.Equal(t, exitShardSilent, code, stderr)
	assert.Equal(t, "shard,server,n\nshard-a,alpha,1000\n", out)
	assert.Contains(t, stderr, "shard shard-b (servers beta) did not answer")
	assert.NotContains(t, stderr, "archiver")
	_, code, stderr = cli(withToken, "--nats", url, "recommend", "--server", "beta")
	assert.Equal(t, exitShardSilent, code, stderr)
	assert.Contains(t, stderr, `shard shard-b owns server "beta" but did not answer`)

	// queries lists the built-in queries, which every shard shares; ingest runs here only.
	out, code, stderr = cli(nil, "--nats", url, "queries")
	require.Zero(t, code, stderr)
	assert.Contains(t, out, "calls_by_tool")
	_, code, stderr = cli(nil, "--nats", url, "ingest", "events.jsonl")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "mcptrail ingest runs here")

	// Without --nats nothing changes: the command goes to http.listen or the file.
	out, code, stderr = cli(append(withToken, "MCPTRAIL_HTTP_LISTEN="+a.http), "--db", a.db,
		"query", "--sql", "SELECT server, count(*) AS n FROM calls GROUP BY ALL", "--format", "csv")
	require.Zero(t, code, stderr)
	assert.Equal(t, "server,n\nalpha,1000\n", out)
}
