package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// startLogged runs a daemon like start, with its log in buf.
func startLogged(t *testing.T, opts Options, buf *syncBuffer) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{opts: opts, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() { d.done <- Run(ctx, openStore(t), opts, log, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-d.done:
		cancel()
		t.Fatalf("daemon stopped before it was ready: %v\n%s", err, buf.String())
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("daemon not ready after 20 s")
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

// asyncErrors collects a connection's asynchronous errors (permission
// violations arrive that way).
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrors) option() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.errs = append(a.errs, err)
	})
}

// denied waits until a permission violation that mentions what arrives.
func (a *asyncErrors) denied(t *testing.T, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, err := range a.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), what) {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "no permission violation for %s", what)
}

// Without nats.user or nats.token, the embedded server admits only the
// daemon (with a password made up in memory) and the default gateway user,
// whose password serve generates into a 0600 file at first start and reuses
// afterwards. serve says how a gateway connects, never the password.
func TestEmbeddedNATSRequiresAuthentication(t *testing.T) {
	opts := testOptions(t)
	opts.User, opts.Password = "", ""
	var log syncBuffer
	d := startLogged(t, opts, &log)

	info, err := os.Stat(opts.GatewayPasswordFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	pw, err := ReadPasswordFile(opts.GatewayPasswordFile)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, len(pw), 24)

	_, err = nats.Connect("nats://" + opts.EmbeddedListen)
	require.Error(t, err, "an anonymous connection must be refused")
	assert.ErrorIs(t, err, nats.ErrAuthorization)
	_, err = nats.Connect("nats://"+opts.EmbeddedListen, nats.UserInfo(DefaultGatewayUser, "wrong"))
	assert.ErrorIs(t, err, nats.ErrAuthorization)

	st, err := Publish(context.Background(), gateway(t, opts), events(0, 20, "pve"))
	require.NoError(t, err)
	assert.Equal(t, 20, st.Published)

	logs := log.String()
	for _, want := range []string{"user=gateway", "password_file=" + opts.GatewayPasswordFile, "url=nats://" + opts.EmbeddedListen} {
		assert.Contains(t, logs, want)
	}
	assert.NotContains(t, logs, pw, "the password is never logged")
	d.stop(t)

	// The next start reuses the password.
	startLogged(t, opts, &log)
	again, err := ReadPasswordFile(opts.GatewayPasswordFile)
	require.NoError(t, err)
	assert.Equal(t, pw, again)
	_, err = Publish(context.Background(), gateway(t, opts), events(20, 30, "pve"))
	require.NoError(t, err)
}

// Gateway users publish, with JetStream acks, to their own servers' subjects
// only; they cannot use the JetStream API, subscribe to the audit subjects
// or see the daemon's deliveries through _INBOX.>, and an event naming
// another server than its subject is dead-lettered.
func TestEmbeddedNATSGatewayPermissions(t *testing.T) {
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	seedFile := filepath.Join(dir, "all.nk")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	pveFile := filepath.Join(dir, "pve.password")
	require.NoError(t, os.WriteFile(pveFile, []byte("pve-secret\n"), 0o600))

	store := openStore(t)
	opts := testOptions(t)
	opts.EmbeddedUsers = []EmbeddedUser{
		{User: "pve-gw", PasswordFile: pveFile, Servers: []string{"pve"}},
		{User: "all-gw", NKey: pub, Servers: []string{"*"}},
	}
	start(t, store, opts)
	_, err = os.Stat(opts.GatewayPasswordFile)
	assert.ErrorIs(t, err, os.ErrNotExist, "no default gateway when users are configured")
	url := "nats://" + opts.EmbeddedListen
	ctx := context.Background()

	var pveErrs asyncErrors
	pve, err := nats.Connect(url, nats.UserInfo("pve-gw", "pve-secret"), pveErrs.option())
	require.NoError(t, err)
	defer pve.Close()
	pveJS, err := jetstream.New(pve)
	require.NoError(t, err)

	// Its own server, with a publish acknowledgement.
	ack, err := pveJS.Publish(ctx, "mcp.audit.pve", []byte(`{"id":"own","ts":"2026-01-02T03:04:05Z","server":"pve","tool":"t","decision":"allowed"}`))
	require.NoError(t, err)
	assert.Equal(t, "MCP_AUDIT", ack.Stream)

	// The default _INBOX.> is allowed for acks: a sniffer there must see
	// none of the events the daemon pulls.
	sniffed := make(chan *nats.Msg, 1024)
	sniff, err := pve.ChanSubscribe("_INBOX.>", sniffed)
	require.NoError(t, err)
	defer sniff.Unsubscribe()

	// Another server's subject.
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = pveJS.Publish(short, "mcp.audit.other", []byte(`{"id":"x","ts":"2026-01-02T03:04:05Z","server":"other","tool":"t","decision":"allowed"}`))
	cancel()
	require.Error(t, err)
	pveErrs.denied(t, `Publish to "mcp.audit.other"`)
	_, err = Publish(ctx, PublishOptions{URL: url, Auth: Auth{User: "pve-gw", Password: "pve-secret"}}, events(0, 5, "other"))
	require.ErrorIs(t, err, nats.ErrPermissionViolation, "Publish stops at the refusal")

	// The JetStream API.
	short, cancel = context.WithTimeout(ctx, time.Second)
	err = pveJS.DeleteStream(short, "MCP_AUDIT")
	cancel()
	require.Error(t, err)
	pveErrs.denied(t, `Publish to "$JS.API.STREAM.DELETE.MCP_AUDIT"`)
	short, cancel = context.WithTimeout(ctx, time.Second)
	_, err = pveJS.Stream(short, "MCP_AUDIT")
	cancel()
	require.Error(t, err)

	// The audit subjects.
	_, err = pve.SubscribeSync("mcp.audit.>")
	require.NoError(t, err)
	require.NoError(t, pve.Flush())
	pveErrs.denied(t, `Subscription to "mcp.audit.>"`)

	// The NKey user may publish for any server.
	all, err := nats.Connect(url, nkeyOption(t, seedFile))
	require.NoError(t, err)
	defer all.Close()
	allJS, err := jetstream.New(all)
	require.NoError(t, err)
	for _, m := range [][2]string{
		{"mcp.audit.other", `{"id":"other-1","ts":"2026-01-02T03:04:05Z","server":"other","tool":"t","decision":"allowed"}`},
		// The payload names another server than the subject.
		{"mcp.audit.pve", `{"id":"forged","ts":"2026-01-02T03:04:05Z","server":"other","tool":"t","decision":"allowed"}`},
	} {
		_, err = allJS.Publish(ctx, m[0], []byte(m[1]))
		require.NoError(t, err)
	}
	waitCount(t, store, `SELECT count(*) FROM calls`, 2)
	waitCount(t, store, `SELECT count(*) FROM dead_letters WHERE reason = 'subject_mismatch' AND source = 'mcp.audit.pve'`, 1)
	assert.Equal(t, 0, queryInt(t, store, `SELECT count(*) FROM calls WHERE id = 'forged'`))

	// The stream is intact, and the sniffer saw only publish acks.
	_, admin := connect(t, opts)
	_, err = admin.Stream(ctx, "MCP_AUDIT")
	require.NoError(t, err)
	for len(sniffed) > 0 {
		m := <-sniffed
		assert.NotContains(t, string(m.Data), `"decision"`, "an event reached a gateway on %s", m.Subject)
	}
}

func nkeyOption(t *testing.T, seedFile string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(seedFile)
	require.NoError(t, err)
	return o
}

// nats.token stays the daemon's own credential on the embedded server, with
// gateway users beside it.
func TestEmbeddedNATSTokenIsTheDaemonsCredential(t *testing.T) {
	opts := testOptions(t)
	opts.User, opts.Password, opts.Token = "", "", "daemon-token"
	store := openStore(t)
	start(t, store, opts)
	nc, err := nats.Connect("nats://"+opts.EmbeddedListen, nats.Token("daemon-token"))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.Stream(context.Background(), "MCP_AUDIT")
	require.NoError(t, err, "the token has full permissions")
	_, err = Publish(context.Background(), gateway(t, opts), events(0, 10, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 10)
}

func TestEmbeddedUsersValidation(t *testing.T) {
	_, pub := newKey(t, nkeys.CreateUser)
	for _, tc := range []struct {
		users []EmbeddedUser
		user  string // nats.user
		url   string
		key   string
	}{
		{users: []EmbeddedUser{{User: "", PasswordFile: "f"}}, key: "nats.embedded.users[0].user"},
		{users: []EmbeddedUser{{User: "a"}}, key: "nats.embedded.users[0]"},
		{users: []EmbeddedUser{{User: "a", PasswordFile: "f", NKey: pub}}, key: "nats.embedded.users[0]"},
		{users: []EmbeddedUser{{User: "a", NKey: "SUAseed"}}, key: "nats.embedded.users[0].nkey"},
		{users: []EmbeddedUser{{User: "a", PasswordFile: "f", Servers: []string{"a.b"}}}, key: "nats.embedded.users[0].servers"},
		{users: []EmbeddedUser{{User: "a", PasswordFile: "f"}, {User: "a", NKey: pub}}, key: "nats.embedded.users[1].user"},
		{users: []EmbeddedUser{{User: daemonUser, PasswordFile: "f"}}, key: "nats.embedded.users[0].user"},
		{users: []EmbeddedUser{{User: "admin", PasswordFile: "f"}}, user: "admin", key: "nats.embedded.users[0].user"},
		{users: []EmbeddedUser{{User: "a", PasswordFile: "f"}}, url: "nats://127.0.0.1:4222", key: "nats.embedded.users"},
	} {
		o := Options{EmbeddedUsers: tc.users, User: tc.user, Password: tc.user, URL: tc.url}.withDefaults()
		var ce *ConfigError
		require.ErrorAs(t, o.validate(), &ce, "%+v", tc)
		assert.Equal(t, tc.key, ce.Key, "%+v", tc)
		assert.NotContains(t, ce.Error(), "SUAseed", "a seed is never quoted")
	}
	var ce *ConfigError
	require.ErrorAs(t, Options{Password: "p"}.withDefaults().validate(), &ce)
	assert.Equal(t, "nats.user", ce.Key)
	// A user without a password would log in to the embedded server with
	// an empty one, with every permission.
	require.ErrorAs(t, Options{User: "ops"}.withDefaults().validate(), &ce)
	assert.Equal(t, "nats.password", ce.Key)
	assert.NoError(t, Options{User: "ops", URL: "nats://127.0.0.1:4222"}.withDefaults().validate(), "another server decides for itself")
	o := Options{EmbeddedUsers: []EmbeddedUser{{User: "a", PasswordFile: "f", Servers: []string{"*"}}, {User: "b", NKey: pub, Servers: []string{"pve", "x"}}}}.withDefaults()
	assert.NoError(t, o.validate())
}

// A gateway password file that every user may read is refused, with the
// fix named; one its group may read (a gateway of the group) is used with
// a warning, and one only its owner reads is used.
func TestGatewayPasswordFileEveryUserCanReadIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), GatewayPasswordFileName)
	require.NoError(t, os.WriteFile(path, []byte("a-gateway-password\n"), 0o600))
	require.NoError(t, os.Chmod(path, 0o644))
	_, err := ensurePasswordFile(path, "nats.embedded.gateway_password_file", slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "chmod 600")
	for _, mode := range []os.FileMode{0o640, 0o600} {
		require.NoError(t, os.Chmod(path, mode))
		var log syncBuffer
		pw, err := ensurePasswordFile(path, "nats.embedded.gateway_password_file", slog.New(slog.NewTextHandler(&log, nil)))
		require.NoError(t, err, "%04o", mode)
		assert.Equal(t, "a-gateway-password", pw)
		assert.Equal(t, mode == 0o640, strings.Contains(log.String(), "can be read by its group"), "%04o", mode)
	}
}

// A gateway that names a reply subject of the daemon's account, the alerts
// or another server's audit subject, gets the server to publish nothing
// there: gateways live in an account of their own, and across its import
// of the audit subjects the server hands JetStream's acknowledgement back
// to the gateway's account. The event is stored, and the acknowledgement
// reaches a subscriber of that subject in the gateways' own account.
func TestEmbeddedNATSGatewayReplySubjectStaysInItsAccount(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	start(t, store, opts)

	admin, _ := connect(t, opts)
	daemonSide := make(chan *nats.Msg, 16)
	for _, subj := range []string{"mcptrail.alerts.>", "mcp.audit.>"} {
		sub, err := admin.ChanSubscribe(subj, daemonSide)
		require.NoError(t, err)
		defer sub.Unsubscribe()
	}
	require.NoError(t, admin.Flush())

	gw := gateway(t, opts)
	var gwErrs asyncErrors
	nc, err := nats.Connect(gw.URL, nats.UserInfo(gw.Auth.User, gw.Auth.Password), gwErrs.option())
	require.NoError(t, err)
	defer nc.Close()
	// The gateway may subscribe only to _INBOX.>: the acknowledgements it
	// asks for on _INBOX.forged reach it there, in its own account.
	acks, err := nc.SubscribeSync("_INBOX.forged")
	require.NoError(t, err)
	for i, reply := range []string{"mcptrail.alerts.pve", "mcp.audit.other", "_INBOX.forged"} {
		id := fmt.Sprintf("reply-%d", i)
		require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "mcp.audit.pve", Reply: reply,
			Data: []byte(`{"id":"` + id + `","ts":"2026-01-02T03:04:05Z","server":"pve","tool":"t","decision":"allowed"}`)}))
	}
	require.NoError(t, nc.Flush())
	ack, err := acks.NextMsg(5 * time.Second)
	require.NoError(t, err, "the acknowledgement comes back to the gateway's account")
	assert.Contains(t, string(ack.Data), `"stream":"MCP_AUDIT"`)
	waitCount(t, store, `SELECT count(*) FROM calls WHERE id LIKE 'reply-%'`, 3)

	// The daemon's account saw the three events on mcp.audit.pve and nothing else.
	var subjects []string
	deadline := time.After(time.Second)
	for done := false; !done; {
		select {
		case m := <-daemonSide:
			subjects = append(subjects, m.Subject)
		case <-deadline:
			done = true
		}
	}
	assert.Equal(t, []string{"mcp.audit.pve", "mcp.audit.pve", "mcp.audit.pve"}, subjects,
		"the server published a gateway's acknowledgement in the daemon's account")
	assert.Equal(t, 0, queryInt(t, store, `SELECT count(*) FROM dead_letters`))
}

// The stream of a store folder written before gateways had an account of
// their own (every user in the global account) is the daemon's after the
// upgrade: its events not yet acknowledged are stored, and gateways publish
// into it.
func TestEmbeddedNATSStoreFromTheGlobalAccountOnlyLayout(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	ctx := context.Background()

	old, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: opts.EmbeddedStoreDir})
	require.NoError(t, err)
	old.Start()
	require.True(t, old.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(old.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = ingest.EnsureStream(ctx, js, ingest.StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	require.NoError(t, err)
	_, err = Publish(ctx, PublishOptions{URL: old.ClientURL()}, events(0, 50, "pve"))
	require.NoError(t, err)
	nc.Close()
	old.Shutdown()
	old.WaitForShutdown()

	start(t, store, opts)
	waitCount(t, store, `SELECT count(*) FROM calls`, 50)
	_, err = Publish(ctx, gateway(t, opts), events(50, 60, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 60)
}

// The accounts SECURITY.md gives for a NATS server of one's own (nats.url)
// work as it says: the daemon in its account with the stream, a gateway in
// another that publishes its server's events with acknowledgements, and a
// reply subject the gateway names stays in the gateways' account.
func TestServeOnANATSServerWithTheDocumentedAccounts(t *testing.T) {
	doc, err := os.ReadFile("../SECURITY.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(doc), "On your own NATS server (`nats.url`)")
	require.True(t, ok, "SECURITY.md gives the accounts for nats.url")
	_, after, ok = strings.Cut(after, "```\n")
	require.True(t, ok)
	conf, _, ok := strings.Cut(after, "```")
	require.True(t, ok)
	t.Setenv("NATS_DAEMON_PW", "daemon-secret-0123456789")
	t.Setenv("NATS_PVE_GW_PW", "pve-gw-secret-0123456789")
	sopts := &natsserver.Options{}
	require.NoError(t, sopts.ProcessConfigString(conf))
	sopts.Host, sopts.Port, sopts.NoLog, sopts.NoSigs = "127.0.0.1", natsserver.RANDOM_PORT, true, true
	require.True(t, sopts.JetStream, "the configuration enables JetStream")
	sopts.StoreDir = t.TempDir()
	ns, err := natsserver.NewServer(sopts)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })

	store := openStore(t)
	opts := testOptions(t)
	opts.URL, opts.User, opts.Password = ns.ClientURL(), "mcptrail", "daemon-secret-0123456789"
	start(t, store, opts)
	daemon, err := nats.Connect(ns.ClientURL(), nats.UserInfo(opts.User, opts.Password))
	require.NoError(t, err)
	defer daemon.Close()
	leaked, err := daemon.SubscribeSync("mcptrail.alerts.>")
	require.NoError(t, err)
	require.NoError(t, daemon.Flush())

	gw := PublishOptions{URL: ns.ClientURL(), Auth: Auth{User: "pve-gw", Password: "pve-gw-secret-0123456789"}}
	_, err = Publish(context.Background(), gw, events(0, 20, "pve"))
	require.NoError(t, err)
	nc, err := nats.Connect(gw.URL, nats.UserInfo(gw.Auth.User, gw.Auth.Password))
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "mcp.audit.pve", Reply: "mcptrail.alerts.pve",
		Data: []byte(`{"id":"forged-reply","ts":"2026-01-02T03:04:05Z","server":"pve","tool":"t","decision":"allowed"}`)}))
	require.NoError(t, nc.Flush())
	waitCount(t, store, `SELECT count(*) FROM calls`, 21)
	_, err = leaked.NextMsg(500 * time.Millisecond)
	assert.ErrorIs(t, err, nats.ErrTimeout, "the gateway's reply subject reached the daemon's account")
}

// In core mode (nats.jetstream: false) on the embedded server, a gateway's
// plain publishes cross its account's import to the daemon's subscription.
func TestEmbeddedNATSCoreModeGatewayPublishes(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	opts.JetStream = false
	start(t, store, opts)
	publishCore(t, opts, 50, "")
	waitCount(t, store, `SELECT count(*) FROM calls`, 50)
}

// publishCore publishes n events for pve as the default gateway, without
// JetStream, each naming reply as its reply subject when set.
func publishCore(t *testing.T, opts Options, n int, reply string) {
	t.Helper()
	gw := gateway(t, opts)
	nc, err := nats.Connect(gw.URL, nats.UserInfo(gw.Auth.User, gw.Auth.Password))
	require.NoError(t, err)
	defer nc.Close()
	next := events(0, n, "pve")
	for e, ok, _ := next(); ok; e, ok, _ = next() {
		b, err := json.Marshal(&e)
		require.NoError(t, err)
		require.NoError(t, nc.PublishMsg(&nats.Msg{Subject: "mcp.audit.pve", Reply: reply, Data: b}))
	}
	require.NoError(t, nc.Flush())
}

// Gateways are let in only once the daemon's account has its stream back:
// a restarted daemon's embedded server takes no client before JetStream is
// enabled on the global account with the stored stream, and a gateway's
// plain publish right after start is stored.
func TestEmbeddedNATSTakesClientsOnceTheStreamIsBack(t *testing.T) {
	store := openStore(t)
	opts := testOptions(t)
	d := start(t, store, opts)
	_, err := Publish(context.Background(), gateway(t, opts), events(0, 10, "pve"))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 10)
	d.stop(t)

	var dialed error
	var streamBack bool
	t.Cleanup(func() { beforeListening = func(*natsserver.Server) {} })
	beforeListening = func(ns *natsserver.Server) {
		c, err := net.DialTimeout("tcp", opts.EmbeddedListen, time.Second)
		if err == nil {
			c.Close()
		}
		dialed = err
		streamBack = ns.GlobalAccount().JetStreamEnabled() && ns.GlobalAccount().JetStreamUsage().Streams == 1
	}
	start(t, store, opts)
	assert.Error(t, dialed, "a client could connect before the stream was back")
	assert.True(t, streamBack, "the stored stream is back before clients are let in")

	gw := gateway(t, opts)
	nc, err := nats.Connect(gw.URL, nats.UserInfo(gw.Auth.User, gw.Auth.Password))
	require.NoError(t, err)
	defer nc.Close()
	e, _, _ := events(10, 11, "pve")()
	b, err := json.Marshal(&e)
	require.NoError(t, err)
	require.NoError(t, nc.Publish("mcp.audit.pve", b))
	require.NoError(t, nc.Flush())
	waitCount(t, store, `SELECT count(*) FROM calls`, 11)
}

// In core mode nothing replies to a gateway's message that names a reply
// subject: the way back the server keeps for it is dropped after
// replyWaitLimit, not nats-server's default two minutes, so a gateway
// publishing requests does not hold the daemon's memory.
func TestEmbeddedNATSCoreModeKeepsNoRepliesWaiting(t *testing.T) {
	var ns *natsserver.Server
	t.Cleanup(func() { beforeListening = func(*natsserver.Server) {} })
	beforeListening = func(s *natsserver.Server) { ns = s }
	store := openStore(t)
	opts := testOptions(t)
	opts.JetStream = false
	start(t, store, opts)
	publishCore(t, opts, 100, "_INBOX.nobody")
	waitCount(t, store, `SELECT count(*) FROM calls`, 100)
	require.Positive(t, ns.GlobalAccount().NumPendingAllResponses(), "the server keeps their ways back")
	require.Eventually(t, func() bool { return ns.GlobalAccount().NumPendingAllResponses() == 0 },
		replyWaitLimit+10*time.Second, 100*time.Millisecond, "ways back still kept")
}

// nats.embedded.listen with port 0 listens on a free port, as a listen
// address of port 0 means, not on nats-server's default 4222; a port taken
// while the stream comes back is named as the setting's.
func TestEmbeddedNATSListenPorts(t *testing.T) {
	opts := testOptions(t)
	opts.EmbeddedListen = "127.0.0.1:0"
	auth, err := newEmbeddedAuth(opts, filepath.Join(t.TempDir(), "x.duckdb"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ns, err := startEmbedded(opts, auth, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ns.Addr().String())
	require.NoError(t, err)
	assert.NotEqual(t, "4222", port)
	assert.NotEqual(t, "0", port)
	ns.Shutdown()
	ns.WaitForShutdown()

	opts = testOptions(t)
	var taken net.Listener
	t.Cleanup(func() {
		beforeListening = func(*natsserver.Server) {}
		if taken != nil {
			taken.Close()
		}
	})
	beforeListening = func(*natsserver.Server) { taken, _ = net.Listen("tcp", opts.EmbeddedListen) }
	_, err = startEmbedded(opts, auth, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	assert.Contains(t, err.Error(), "nats.embedded.listen")
}
