// Package server is the mcptrail daemon (`mcptrail serve`): it starts an
// embedded NATS server with JetStream or connects to an existing one, creates
// the MCP_AUDIT stream and the durable consumer, runs the ingest loop into the
// DuckDB store with exactly-once storage, and serves the HTTP API (health,
// readiness, Prometheus metrics, and the typed API of package api, which
// runs the CLI's commands against the open store). It also holds the two clients of that daemon:
// Publish (the simulator publishing like a gateway). The API's requests and
// the CLI's client are package api.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/redact"
)

// Defaults of SPEC §7.
const (
	DefaultEmbeddedListen = "127.0.0.1:4222"
	DefaultSubject        = "mcp.audit.>"
	DefaultStream         = "MCP_AUDIT"
	DefaultConsumer       = "mcptrail"
	DefaultHTTPListen     = "127.0.0.1:8474"
	DefaultStreamMaxAge   = ingest.DefaultStreamMaxAge
	DefaultBatchSize      = ingest.DefaultBatchSize
	DefaultFlushInterval  = ingest.DefaultMaxWait
)

// TLS names PEM files for a TLS connection to NATS.
type TLS struct {
	CA   string // nats.tls.ca: CA bundle that signed the server certificate
	Cert string // nats.tls.cert: client certificate (mutual TLS)
	Key  string // nats.tls.key: its private key
}

// Options configures the daemon. Each field mirrors a key of SPEC §7; zero
// values take the defaults above.
type Options struct {
	URL              string   // nats.url: empty starts the embedded server
	EmbeddedListen   string   // nats.embedded.listen
	EmbeddedStoreDir string   // nats.embedded.store_dir
	Subject          string   // nats.subject
	JetStream        bool     // nats.jetstream (the config default is true; the zero value here means core mode)
	Stream           string   // nats.stream
	Consumer         string   // nats.consumer
	Servers          []string // nats.servers: shard to these servers' subjects
	Queue            string   // nats.queue (core mode)
	Creds            string   // nats.creds: credentials file (JWT + seed)
	NKey             string   // nats.nkey: NKey seed file
	Token            string   // nats.token
	User             string   // nats.user
	Password         string   // nats.password
	TLS              TLS      // nats.tls.*
	// EmbeddedUsers (nats.embedded.users) may connect to the embedded server
	// as gateways; when empty, one user "gateway" may publish for every
	// server, with the password in GatewayPasswordFile.
	EmbeddedUsers []EmbeddedUser
	// GatewayPasswordFile (nats.embedded.gateway_password_file): empty means
	// GatewayPasswordFileName beside the database.
	GatewayPasswordFile string

	StreamMaxAge   time.Duration // nats.stream_max_age: 7 days when 0, unlimited when < 0
	StreamMaxBytes int64         // nats.stream_max_bytes: unlimited when <= 0
	StreamReplicas int           // nats.stream_replicas: 1 when <= 0
	// StartupTimeout is nats.startup_timeout: how long the start waits for
	// the stream to answer (DefaultStartupTimeout when <= 0).
	StartupTimeout time.Duration

	BatchSize     int           // ingest.batch_size
	FetchSize     int           // ingest.fetch_size (JetStream)
	FlushInterval time.Duration // ingest.flush_interval
	Decode        audit.Options // ingest.max_event_bytes, ingest.store_args (Format auto)
	// MaxMessageBytes is ingest.max_message_bytes: the embedded server's
	// max_payload, so that batched messages (SPEC §2) fit.
	MaxMessageBytes int

	HTTPListen       string   // http.listen
	HTTPToken        string   // the API's bearer token (http.token or the generated http.token_file)
	HTTPAllowedHosts []string // http.allowed_hosts
	HTTPTLSCert      string   // http.tls.cert: serve HTTPS with this certificate ...
	HTTPTLSKey       string   // http.tls.key: ... and key

	// OTLPListen (otlp.listen) serves the OTLP/HTTP receiver there; empty:
	// none. It needs OTLPToken.
	OTLPListen string
	// OTLPGRPCListen (otlp.grpc_listen) serves the OTLP/gRPC receiver
	// there; empty: none. It needs OTLPToken too.
	OTLPGRPCListen string
	// OTLPToken (otlp.token or the generated otlp.token_file) is the
	// exporters' bearer token, which may only send telemetry; HTTPToken is
	// accepted there too.
	OTLPToken string
	// OTLPMaxRequestBytes (otlp.max_request_bytes) bounds an OTLP request
	// body (4 MiB when 0).
	OTLPMaxRequestBytes int64
	// OTLPServer (otlp.server) names the server of every OTLP event.
	OTLPServer string
	// OTLPListening, when set, is called with the receiver's address once it
	// listens. Not a config key: tests listen on port 0.
	OTLPListening func(addr string)
	// OTLPGRPCListening is OTLPListening for the OTLP/gRPC receiver.
	OTLPGRPCListening func(addr string)

	// Backend runs the typed API's requests (api); nil serves no API. It
	// needs HTTPToken.
	Backend api.Backend

	// Collectors are registered on /metrics beside the daemon's own (e.g.
	// the scheduled reports' runs).
	Collectors []prometheus.Collector
	// Background, when set, starts once the daemon is ready, with its NATS
	// connection, and runs until the daemon stops (e.g. the report
	// schedules); Run waits for it to return before closing NATS.
	Background func(ctx context.Context, nc *nats.Conn)
	// Stored, when set, is told after every batch the ingest loop committed
	// (e.g. the live alarm looks at the new calls sooner than its interval).
	// It runs on the ingest path: it must return at once.
	Stored func()
	// StoreThread, when set, is called by the ingest's storing goroutine
	// as it starts, and what it returns as it ends (JetStream or core mode:
	// ingest.JetStreamSource.StoreThread, ingest.CoreSource.StoreThread):
	// serve gives that thread priority.
	StoreThread func() (release func())

	// HTTPReadTimeout replaces the HTTP read timeout (a minute) when set.
	// Not a config key: tests shorten it.
	HTTPReadTimeout time.Duration

	// Acks overrides how the consumer acknowledges (ingest.ChooseAcks picks
	// by default). Not a config key: tests and measurements set it.
	Acks ingest.Acks
}

func (o Options) withDefaults() Options {
	if o.EmbeddedListen == "" {
		o.EmbeddedListen = DefaultEmbeddedListen
	}
	if o.EmbeddedStoreDir == "" {
		o.EmbeddedStoreDir = "./mcptrail-data/nats"
	}
	if o.Subject == "" {
		o.Subject = DefaultSubject
	}
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	if o.Consumer == "" {
		o.Consumer = DefaultConsumer
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.HTTPListen == "" {
		o.HTTPListen = DefaultHTTPListen
	}
	return o
}

// ConfigError is an invalid setting: it names the key, the bad value and
// what is allowed. cmd exits 2 on it.
type ConfigError struct {
	Key, Value, Want string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s: %q is not allowed: %s", e.Key, e.Value, e.Want)
}

// validate checks the options that Run cannot work with.
func (o Options) validate() error {
	if !strings.HasSuffix(o.Subject, ".>") || strings.ContainsAny(strings.TrimSuffix(o.Subject, ".>"), "*> \t") {
		return &ConfigError{"nats.subject", o.Subject, `want a subject prefix ending in ".>" such as mcp.audit.>`}
	}
	for _, s := range o.Servers {
		if s == "" || strings.ContainsAny(s, ".*> \t\r\n") {
			return &ConfigError{"nats.servers", s, "want MCP server names (one subject token each: no dots, spaces or wildcards)"}
		}
	}
	if len(o.Servers) > 0 && o.JetStream && o.Consumer == DefaultConsumer {
		return &ConfigError{"nats.consumer", o.Consumer, fmt.Sprintf(
			"a sharded daemon (nats.servers: %s) needs its own durable consumer name, e.g. mcptrail-%s; "+
				"each shard also needs its own storage.path", strings.Join(o.Servers, ","), o.Servers[0])}
	}
	if strings.ContainsAny(o.Stream, ".*> \t") {
		return &ConfigError{"nats.stream", o.Stream, "want a name without dots, spaces or wildcards"}
	}
	if strings.ContainsAny(o.Consumer, ".*> \t") {
		return &ConfigError{"nats.consumer", o.Consumer, "want a name without dots, spaces or wildcards"}
	}
	auth := 0
	for _, set := range []bool{o.Creds != "", o.NKey != "", o.Token != "", o.User != "" || o.Password != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		return &ConfigError{"nats.creds", "(several)", "set only one of nats.creds, nats.nkey, nats.token, or nats.user with nats.password"}
	}
	if o.URL == "" && (o.Creds != "" || o.NKey != "" || o.TLS != TLS{}) {
		return &ConfigError{"nats.url", "", "nats.creds, nats.nkey and nats.tls apply to an external server: set nats.url, or use nats.token / nats.user for the embedded one"}
	}
	if err := o.validateEmbeddedUsers(); err != nil {
		return err
	}
	if (o.TLS.Cert == "") != (o.TLS.Key == "") {
		return &ConfigError{"nats.tls.key", o.TLS.Key, "nats.tls.cert and nats.tls.key go together"}
	}
	if o.Backend != nil && o.HTTPToken == "" {
		return &ConfigError{"http.token", "", "the API is never served without a token: set http.token or let serve generate http.token_file"}
	}
	if o.otlpReceiver() && o.OTLPToken == "" {
		return &ConfigError{"otlp.token", "", "the OTLP receiver (otlp.listen, otlp.grpc_listen) is never served without a token: set otlp.token or let serve generate otlp.token_file"}
	}
	if o.OTLPServer != "" && audit.BadServerName(o.OTLPServer) != "" {
		return &ConfigError{"otlp.server", o.OTLPServer, "an MCP server name: " + audit.BadServerName(o.OTLPServer)}
	}
	if (o.HTTPTLSCert == "") != (o.HTTPTLSKey == "") {
		return &ConfigError{"http.tls.key", o.HTTPTLSKey, "http.tls.cert and http.tls.key go together"}
	}
	if o.Queue != "" && o.JetStream {
		return &ConfigError{"nats.queue", o.Queue, "queue groups apply to core mode only (nats.jetstream: false); JetStream shares work through the durable consumer"}
	}
	return nil
}

// validateEmbeddedUsers checks nats.embedded.users and the daemon's own
// credential on the embedded server.
func (o Options) validateEmbeddedUsers() error {
	if o.URL != "" {
		if len(o.EmbeddedUsers) > 0 {
			return &ConfigError{"nats.embedded.users", o.EmbeddedUsers[0].User, "applies to the embedded server only: leave nats.url empty, or give gateways users on your NATS server"}
		}
		return nil
	}
	if o.Password != "" && o.User == "" {
		return &ConfigError{"nats.user", "", "nats.password needs nats.user"}
	}
	if o.User != "" && o.Password == "" {
		// The embedded server would take an empty password for this
		// user, who has every permission.
		return &ConfigError{"nats.password", "", "nats.user needs nats.password (MCPTRAIL_NATS_PASSWORD) on the embedded server: without one, anybody could log in as " + o.User}
	}
	own := o.User
	if own == "" {
		own = daemonUser
	}
	seen := map[string]bool{}
	for i, u := range o.EmbeddedUsers {
		key := fmt.Sprintf("nats.embedded.users[%d]", i)
		switch {
		case u.User == "" || strings.ContainsAny(u.User, " \t\r\n"):
			return &ConfigError{key + ".user", u.User, "want a user name without spaces"}
		case u.User == own:
			return &ConfigError{key + ".user", u.User, fmt.Sprintf("%s is the daemon's own user (nats.user, or %s): name the gateway otherwise", own, daemonUser)}
		case seen[u.User]:
			return &ConfigError{key + ".user", u.User, "each user once"}
		case (u.PasswordFile == "") == (u.NKey == ""):
			return &ConfigError{key, u.User, "give either password_file or nkey (a public user NKey, U...)"}
		case u.NKey != "" && !nkeys.IsValidPublicUserKey(u.NKey):
			// Never quote it: it may be a pasted seed, the private key.
			return &ConfigError{key + ".nkey", redact.NKey(u.NKey), "want a public user NKey (56 characters starting with U), not a seed"}
		}
		seen[u.User] = true
		if u.allServers() {
			continue
		}
		for _, s := range u.Servers {
			if s == "" || strings.ContainsAny(s, ".*> \t\r\n") {
				return &ConfigError{key + ".servers", s, `want MCP server names (one subject token each), or ["*"] for all`}
			}
		}
	}
	return nil
}

// subjects returns the subjects this daemon consumes: the configured wildcard,
// or one subject per server of a shard.
func (o Options) subjects() []string {
	if len(o.Servers) == 0 {
		return []string{o.Subject}
	}
	prefix := strings.TrimSuffix(o.Subject, ">")
	out := make([]string, len(o.Servers))
	for i, s := range o.Servers {
		out[i] = prefix + s
	}
	return out
}

// listenSetting listens on addr, the value of the setting key (its
// variable env); a taken address is reported naming the setting.
func listenSetting(key, env, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, errAddrInUse(key, env, addr, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("%s %s: %w", key, addr, err)
	}
	return ln, nil
}

// errAddrInUse reports a listen address that is taken, naming the setting.
func errAddrInUse(key, env, addr string, err error) error {
	return fmt.Errorf("%s %s: %w: another process (perhaps another mcptrail serve) is listening there; "+
		"stop it or set %s (%s) to a free address", key, addr, err, key, env)
}

var errNotReady = errors.New("not ready")

// stored tells Stored about a batch that stored new events.
func (o Options) stored(r ingest.BatchReport) {
	if o.Stored != nil && r.Result.Ingested > 0 {
		o.Stored()
	}
}

// otlpReceiver reports whether serve receives OTLP, over HTTP or gRPC.
func (o Options) otlpReceiver() bool { return o.OTLPListen != "" || o.OTLPGRPCListen != "" }
