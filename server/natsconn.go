package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/internal/redact"
)

// startEmbedded starts the in-process NATS server with JetStream on
// opts.EmbeddedListen and a file store in opts.EmbeddedStoreDir, with the
// users of auth.
func startEmbedded(opts Options, auth *embeddedAuth, log *slog.Logger) (*natsserver.Server, error) {
	host, portStr, err := net.SplitHostPort(opts.EmbeddedListen)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		return nil, &ConfigError{"nats.embedded.listen", opts.EmbeddedListen, "want host:port such as 127.0.0.1:4222"}
	}
	// nats-server reports a taken port only through its logger: probing
	// first gives the user a message that names the setting.
	if err := probeListen(opts.EmbeddedListen, port); err != nil {
		return nil, err
	}
	serverPort := port
	if port == 0 {
		serverPort = natsserver.RANDOM_PORT // nats-server takes 0 for its default, 4222
	}
	if err := os.MkdirAll(opts.EmbeddedStoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("nats.embedded.store_dir %s: %w", opts.EmbeddedStoreDir, err)
	}
	sopts := &natsserver.Options{
		ServerName: "mcptrail",
		Host:       host,
		Port:       serverPort,
		JetStream:  opts.JetStream,
		StoreDir:   opts.EmbeddedStoreDir,
		NoSigs:     true, // the daemon owns SIGTERM/SIGINT
		MaxPayload: embeddedMaxPayload(opts),
		// Clients are let in only once the daemon's account has its
		// stream back (below): before, a gateway's publish would cross
		// its account's import into an account that captures nothing.
		DontListen: true,
	}
	auth.apply(sopts)
	ns, err := natsserver.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	ns.SetLoggerV2(natsLogger{log.With("component", "nats-server")}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS server on %s (nats.embedded.listen) with store %s (nats.embedded.store_dir) did not start; see the log above",
			opts.EmbeddedListen, opts.EmbeddedStoreDir)
	}
	// With an account beside the global one, nats-server enables JetStream
	// only for accounts its configuration names, and the global account's
	// limits cannot be set through Options: enabling it here recovers the
	// stream the daemon has always kept there.
	if opts.JetStream && !ns.GlobalAccount().JetStreamEnabled() {
		if err := ns.GlobalAccount().EnableJetStream(nil, nil); err != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embedded NATS server: enable JetStream for the daemon's account (store %s, nats.embedded.store_dir): %w",
				opts.EmbeddedStoreDir, err)
		}
	}
	beforeListening(ns)
	// nats-server's own Start runs AcceptLoop when it listens; with
	// DontListen it is the way to listen once JetStream is ready.
	listening := make(chan struct{})
	go ns.AcceptLoop(listening)
	<-listening
	if ns.Addr() == nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		if err := probeListen(opts.EmbeddedListen, port); err != nil {
			return nil, err // taken since the first probe, while the stream came back
		}
		return nil, fmt.Errorf("embedded NATS server on %s (nats.embedded.listen) did not listen; see the log above", opts.EmbeddedListen)
	}
	log.Info("embedded NATS server started", "listen", ns.Addr().String(), "jetstream", opts.JetStream,
		"store_dir", opts.EmbeddedStoreDir)
	if !isLoopback(opts.EmbeddedListen) {
		log.Warn("nats.embedded.listen is reachable from other hosts and the embedded server speaks no TLS: "+
			"gateways' passwords and events cross the network in clear; listen on 127.0.0.1, "+
			"or run a NATS cluster with TLS and set nats.url", "listen", opts.EmbeddedListen)
	}
	auth.logGateways(log, ns.ClientURL())
	return ns, nil
}

// probeListen fails, naming the setting, when addr cannot be listened on;
// port 0 (any free port) is not probed.
func probeListen(addr string, port int) error {
	if port == 0 {
		return nil
	}
	ln, err := listenSetting("nats.embedded.listen", "MCPTRAIL_NATS_EMBEDDED_LISTEN", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// beforeListening is called as the embedded server is about to take
// clients: a test's look at what they would find.
var beforeListening = func(*natsserver.Server) {}

// errDirLocked is a folder another process holds.
var errDirLocked = errors.New("in use by another process")

// lockStoreDir creates the embedded server's store folder and locks it for
// the daemon's lifetime: two servers on one JetStream store would corrupt it.
func lockStoreDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("nats.embedded.store_dir %s: %w", dir, err)
	}
	unlock, err = lockDir(dir)
	if errors.Is(err, errDirLocked) {
		return nil, fmt.Errorf("nats.embedded.store_dir %s: %w (perhaps another mcptrail serve): stop it, or give this daemon "+
			"a folder of its own with nats.embedded.store_dir (MCPTRAIL_NATS_EMBEDDED_STORE_DIR)", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("nats.embedded.store_dir %s: lock: %w", dir, err)
	}
	return unlock, nil
}

// natsLogger sends nats-server's log to slog. Fatalf must not exit: the
// daemon decides what a failure means.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(f string, v ...any) { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n natsLogger) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n natsLogger) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLogger) Errorf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLogger) Debugf(f string, v ...any)  {}
func (n natsLogger) Tracef(f string, v ...any)  {}

// connHooks lets the connection report to the metrics.
type connHooks struct {
	slowConsumer func()
	connected    func(bool)
	reconnected  func()
}

// connectOptions are the options every connection of the daemon shares:
// its replies (pull deliveries: the events; API answers) on its own inbox
// prefix, which gateways, allowed _INBOX.> for their acknowledgements, cannot
// read, on the embedded server or on nats.url; reconnect forever with capped
// exponential backoff and jitter; and log each state change.
func connectOptions(name string, log *slog.Logger, hooks connHooks) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.CustomInboxPrefix(daemonInboxPrefix),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := min(250*time.Millisecond<<min(attempts, 7), 30*time.Second)
			return d/2 + rand.N(d/2+1)
		}),
		nats.ReconnectBufSize(16 << 20),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close: the closed handler reports it
			}
			log.Warn("NATS disconnected; reconnecting", "server", redact.URL(nc.ConnectedUrl()), "err", err)
			if hooks.connected != nil {
				hooks.connected(false)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "server", redact.URL(nc.ConnectedUrl()))
			if hooks.connected != nil {
				hooks.connected(true)
			}
			if hooks.reconnected != nil {
				hooks.reconnected()
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info("NATS connection closed")
			if hooks.connected != nil {
				hooks.connected(false)
			}
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				subj := ""
				if sub != nil {
					subj = sub.Subject
				}
				log.Warn("NATS slow consumer: messages dropped (core mode is at-most-once)", "subject", subj)
				if hooks.slowConsumer != nil {
					hooks.slowConsumer()
				}
				return
			}
			log.Error("NATS error", "err", err)
		}),
	}
}

// Auth holds the credentials of a connection to an external NATS.
type Auth struct {
	Creds    string // credentials file (JWT + NKey seed)
	NKey     string // NKey seed file
	Token    string
	User     string
	Password string
	TLS      TLS
}

// AuthOptions are the nats.go options that sign in with a, for a client of
// the daemon's NATS (the CLI finding shards); file errors name the key.
func AuthOptions(a Auth) ([]nats.Option, error) { return authOptions(a) }

// authOptions turns Auth into nats options; file errors name the key.
func authOptions(a Auth) ([]nats.Option, error) {
	var out []nats.Option
	if a.Creds != "" {
		if _, err := os.Stat(a.Creds); err != nil {
			return nil, fmt.Errorf("nats.creds %s: %w", a.Creds, err)
		}
		out = append(out, nats.UserCredentials(a.Creds))
	}
	if a.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKey)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey %s: %w", a.NKey, err)
		}
		out = append(out, o)
	}
	if a.Token != "" {
		out = append(out, nats.Token(a.Token))
	}
	if a.User != "" || a.Password != "" {
		out = append(out, nats.UserInfo(a.User, a.Password))
	}
	if a.TLS.CA != "" {
		if _, err := os.Stat(a.TLS.CA); err != nil {
			return nil, fmt.Errorf("nats.tls.ca %s: %w", a.TLS.CA, err)
		}
		out = append(out, nats.RootCAs(a.TLS.CA))
	}
	if a.TLS.Cert != "" {
		for key, f := range map[string]string{"nats.tls.cert": a.TLS.Cert, "nats.tls.key": a.TLS.Key} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("%s %s: %w", key, f, err)
			}
		}
		out = append(out, nats.ClientCert(a.TLS.Cert, a.TLS.Key))
	}
	return out, nil
}

// connectExternal connects to nats.url. The first connection must succeed
// (a clear error otherwise); once connected the client reconnects forever.
func connectExternal(ctx context.Context, rawURL string, a Auth, log *slog.Logger, hooks connHooks) (*nats.Conn, error) {
	opts, err := authOptions(a)
	if err != nil {
		return nil, err
	}
	opts = append(opts, connectOptions("mcptrail serve", log, hooks)...)
	opts = append(opts, nats.Timeout(5*time.Second))
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(rawURL, opts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("connect to NATS at %s (nats.url): %w: check that the server is running and reachable, and the credentials", redact.URL(rawURL), redact.Error(r.err, rawURL))
		}
		log.Info("connected to NATS", "server", redact.URL(r.nc.ConnectedUrl()), "cluster", r.nc.ConnectedClusterName())
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// embeddedMaxPayload is the largest message the embedded server accepts: a
// batch of ingest.max_message_bytes or one event of ingest.max_event_bytes,
// with headroom for headers.
func embeddedMaxPayload(opts Options) int32 {
	largest := max(opts.MaxMessageBytes, opts.Decode.MaxEventBytes, 64<<10)
	return int32(min(largest+64<<10, 64<<20))
}
