// Package config loads mcptrail's configuration (SPEC §7) with viper: built-in
// defaults, then config.yaml, then MCPTRAIL_* environment variables, then flags.
// Every value is validated; an error names the key, the bad value and what is
// allowed.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/nats-io/nkeys"
	"github.com/spf13/viper"

	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/internal/redact"
)

// EnvPrefix prefixes every environment variable: MCPTRAIL_NATS_EMBEDDED_LISTEN.
const EnvPrefix = "MCPTRAIL"

// Defaults are the values used when nothing else sets a key. config.yaml at
// the repository root documents exactly these; a test holds them equal.
var Defaults = map[string]any{
	"storage.path":                        "./mcptrail.duckdb",
	"storage.archive":                     "",
	"storage.retention":                   0,
	"storage.huge_pages":                  true,
	"nats.url":                            "",
	"nats.embedded.listen":                "127.0.0.1:4222",
	"nats.embedded.store_dir":             "./mcptrail-data/nats",
	"nats.embedded.users":                 []any{},
	"nats.embedded.gateway_password_file": "",
	"nats.subject":                        "mcp.audit.>",
	"nats.jetstream":                      true,
	"nats.stream":                         "MCP_AUDIT",
	"nats.consumer":                       "mcptrail",
	"nats.servers":                        []string{},
	"nats.queue":                          "",
	"nats.creds":                          "",
	"nats.nkey":                           "",
	"nats.token":                          "",
	"nats.user":                           "",
	"nats.password":                       "",
	"nats.tls.ca":                         "",
	"nats.tls.cert":                       "",
	"nats.tls.key":                        "",
	"nats.stream_max_age":                 "7d",
	"nats.stream_max_bytes":               0,
	"nats.stream_replicas":                1,
	"nats.startup_timeout":                "2m",
	"ingest.batch_size":                   122880,
	"ingest.fetch_size":                   4096,
	"ingest.flush_interval":               "2s",
	"ingest.max_event_bytes":              65536,
	"ingest.max_message_bytes":            1048576,
	"ingest.store_args":                   false,
	"http.listen":                         "127.0.0.1:8474",
	"http.token":                          "",
	"http.token_file":                     "",
	"http.allowed_hosts":                  []string{},
	"http.tls.cert":                       "",
	"http.tls.key":                        "",
	"otlp.listen":                         "",
	"otlp.grpc_listen":                    "",
	"otlp.token":                          "",
	"otlp.token_file":                     "",
	"otlp.max_request_bytes":              "4MiB",
	"otlp.server":                         "",
	"query.timeout":                       "30s",
	"query.max_rows":                      100000,
	"query.max_bytes":                     "64MiB",
	"recommend.window":                    "30d",
	"recommend.min_days":                  7,
	"recommend.min_sessions":              20,
	"recommend.headroom":                  1.5,
	"recommend.min_limit":                 5,
	"recommend.rare_max_calls":            5,
	"recommend.rare_max_days":             3,
	"recommend.rare_max_session_share":    0.01,
	"recommend.poll_min_calls":            3,
	"recommend.poll_max_interval":         "60s",
	"recommend.session_gap":               "30m",
	"recommend.poll_max_cv":               0.5,
	"recommend.runaway_factor":            3.0,
	"recommend.grace":                     "14d",
	"recommend.overrides":                 "",
	"alerts.enabled":                      true,
	"alerts.interval":                     "10s",
	"alerts.runaway_polls":                0,
	"alerts.subject_prefix":               "mcptrail.alerts.",
	"regression.enabled":                  true,
	"regression.interval":                 "1m",
	"regression.watch":                    "24h",
	"regression.baseline":                 "14d",
	"regression.min_refused":              1,
	"regression.min_share":                0.2,
	"reports":                             []any{},
}

// Config is the validated configuration.
type Config struct {
	Storage    Storage
	NATS       NATS
	Ingest     Ingest
	HTTP       HTTP
	OTLP       OTLP
	Query      Query
	Recommend  Recommend
	Alerts     Alerts
	Regression Regression
	Reports    []map[string]any // validated by the report package
	// File is the config file that was read, or "" when none.
	File string
}

// Storage is storage.*.
type Storage struct {
	Path string
	// Archive is the Parquet archive's folder (SPEC §3); "" for none.
	Archive string
	// Retention deletes archived, verified days older than this from the
	// hot store; 0 keeps everything.
	Retention time.Duration
	// HugePages lets the commands that read ask the kernel for transparent
	// huge pages under DuckDB's memory (analytics.Options.NoHugePages).
	HugePages bool
}

// NATS is nats.*.
type NATS struct {
	URL      string
	Listen   string // nats.embedded.listen
	StoreDir string // nats.embedded.store_dir
	// Users are nats.embedded.users: the gateways' logins to the embedded
	// server. Their meaning (one of password file or NKey, valid server
	// names) is checked by the daemon that uses them.
	Users []NATSUser
	// GatewayPasswordFile is nats.embedded.gateway_password_file: empty
	// means nats-gateway.password beside storage.path.
	GatewayPasswordFile string
	Subject             string
	JetStream           bool
	Stream              string
	Consumer            string
	Servers             []string
	Queue               string
	Creds               string
	NKey                string
	Token               string
	User                string
	Password            string
	TLSCA               string
	TLSCert             string
	TLSKey              string
	StreamMaxAge        time.Duration
	// StreamMaxBytes bounds the stream's size (oldest events go first); 0
	// means no limit.
	StreamMaxBytes int64
	// StreamReplicas is the stream's replicas when serve creates it (an
	// existing stream with fewer is raised, one with more kept).
	StreamReplicas int
	// StartupTimeout is how long serve waits at start for the stream to
	// answer (a leader election, a cluster coming up) before it gives up.
	StartupTimeout time.Duration
}

// NATSUser is one entry of nats.embedded.users.
type NATSUser struct {
	User         string
	PasswordFile string   // password_file
	NKey         string   // nkey: the user's public NKey
	Servers      []string // servers it may publish for; empty or ["*"]: all
}

// Ingest is ingest.*.
type Ingest struct {
	BatchSize     int
	FetchSize     int
	FlushInterval time.Duration
	MaxEventBytes int
	// MaxMessageBytes is the largest NATS message (a batch of events) the
	// embedded server accepts and `publish` packs.
	MaxMessageBytes int
	StoreArgs       bool
}

// HTTP is http.*.
type HTTP struct {
	Listen       string
	Token        string
	TokenFile    string // empty: mcptrail.token beside the database
	AllowedHosts []string
	TLSCert      string
	TLSKey       string
}

// OTLP is otlp.*: the OTLP receiver of serve.
type OTLP struct {
	Listen          string // OTLP/HTTP; empty: none
	GRPCListen      string // OTLP/gRPC; empty: none
	MaxRequestBytes int64
	Server          string // names the server of every OTLP event
	// Token is what exporters send: it may only send telemetry (the API
	// token is accepted too). Empty: serve generates one into TokenFile.
	Token     string
	TokenFile string // empty: mcptrail-otlp.token beside the database
}

// Query is query.*: bounds on user SQL.
type Query struct {
	Timeout  time.Duration // every query, on the file and in the daemon
	MaxRows  int           // rows the daemon sends for one query
	MaxBytes int64         // bytes of values the daemon sends for one query
}

// Recommend is recommend.*.
type Recommend struct {
	Window              time.Duration
	MinDays             int
	MinSessions         int
	Headroom            float64
	MinLimit            int
	RareMaxCalls        int
	RareMaxDays         int
	RareMaxSessionShare float64
	PollMinCalls        int
	PollMaxInterval     time.Duration
	PollMaxCV           float64
	RunawayFactor       float64
	Grace               time.Duration
	Overrides           string
	// SessionGap splits the derived sessions of events that carry none
	// (analytics.Options.SessionGap); it applies as events are stored.
	SessionGap time.Duration
}

// Alerts is alerts.*: the daemon's live loop alarm (package alarm).
type Alerts struct {
	Enabled  bool
	Interval time.Duration // how often the store is checked
	// RunawayPolls is the absolute runaway threshold; 0 derives it per
	// server from recommend.runaway_factor and the loops' p95 length.
	RunawayPolls int
	// SubjectPrefix: an alert is published on it + the server's name.
	SubjectPrefix string
}

// Regression is regression.*: the regression watch after a policy version
// change (recommend's regression findings, and serve's policywatch).
type Regression struct {
	Enabled  bool          // serve checks every Interval
	Interval time.Duration // how often serve checks
	Watch    time.Duration // how long after a version appears its calls are compared
	Baseline time.Duration // with how much history before it
	// MinRefused refused calls, and a rise of at least MinShare in the share
	// of the tool's sessions with a refused call, make a regression.
	MinRefused int
	MinShare   float64
}

// Error is a configuration error: exit code 2.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errorf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// New returns a viper instance with defaults and environment binding; the
// caller binds flags and then calls Load.
func New() *viper.Viper {
	v := viper.New()
	for k, val := range Defaults {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return v
}

// ReadFile reads the config file: path when given (it must exist), else
// ./config.yaml when present. It returns the file read, or "".
func ReadFile(v *viper.Viper, path string) (string, error) {
	explicit := path != ""
	if !explicit {
		path = "config.yaml"
		if _, err := os.Stat(path); err != nil {
			return "", nil
		}
	}
	if _, err := os.Stat(path); err != nil {
		return "", errorf("config file %s: %v: pass an existing file to --config", path, errors.Unwrap(err))
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return "", errorf("config file %s: %v", path, err)
	}
	if err := checkUnknownKeys(v, path); err != nil {
		return "", err
	}
	return path, nil
}

// checkUnknownKeys catches misspelt keys, which viper would silently ignore.
func checkUnknownKeys(v *viper.Viper, path string) error {
	var unknown []string
	for _, k := range v.AllKeys() {
		// reports is a list, checked by the report package; a mapping
		// there (reports.x) is refused by Load with a better message.
		if _, ok := Defaults[k]; ok || strings.HasPrefix(k, "reports.") {
			continue
		}
		if v.InConfig(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return errorf("config file %s: unknown key %s: see config.yaml at the repository root for every key", path, strings.Join(unknown, ", "))
}

// OtherEnv are the MCPTRAIL_ environment variables that set no config key.
var OtherEnv = map[string]string{
	"MCPTRAIL_NOW":        "an RFC 3339 time used instead of the clock (--now)",
	"MCPTRAIL_DEBUG":      "debug logging: per-stage and per-query timings",
	"MCPTRAIL_CPUPROFILE": "a file for a CPU profile of the run (bench/)",
	// Set by tests for the processes they start.
	"MCPTRAIL_MCPTEST_SERVE":      "internal/mcptest: the test binary serves MCP over stdio",
	"MCPTRAIL_HOLD_DB":            "analytics tests: a child that holds a database open",
	"MCPTRAIL_HUGE_PAGES_STORE":   "analytics tests: the huge pages child's database",
	"MCPTRAIL_HUGE_PAGES_OPTIONS": "analytics tests: the huge pages child's options",
	"MCPTRAIL_REPORT_SCREENSHOT":  "report tests: keep the browser's screenshot",
}

// CheckEnv refuses an MCPTRAIL_ variable of environ (os.Environ()) that
// is neither a config key's (EnvName) nor one of OtherEnv: a misspelt
// MCPTRAIL_HTTP_LISTN would otherwise be ignored without a word. Its value
// is never shown.
func CheckEnv(environ []string) error {
	known := make([]string, 0, len(Defaults)+len(OtherEnv))
	isKnown := map[string]bool{}
	for k := range Defaults {
		known = append(known, EnvName(k))
	}
	for name := range OtherEnv {
		known = append(known, name)
	}
	for _, name := range known {
		isKnown[name] = true
	}
	sort.Strings(known)
	var errs []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || isKnown[name] {
			continue
		}
		msg := fmt.Sprintf("config: environment variable %s is not one of mcptrail's", name)
		if near := nearest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		errs = append(errs, msg+": unset it, or spell the key as "+EnvPrefix+"_ + its path in upper case with _ for . (config.yaml lists every key)")
	}
	if len(errs) == 0 {
		return nil
	}
	sort.Strings(errs)
	return &Error{Msg: strings.Join(errs, "\n")}
}

// nearest is the first of names (sorted) closest to s by edit distance, or
// "" when none is close: within a third of s's length after the prefix, and
// at most 3.
func nearest(s string, names []string) string {
	limit := min(3, (len(s)-len(EnvPrefix)-1+2)/3)
	best, bestD := "", limit+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Load validates every key and returns the configuration.
func Load(v *viper.Viper) (*Config, error) {
	p := parser{v: v}
	c := &Config{File: v.ConfigFileUsed()}
	c.Storage.Path = p.str("storage.path", nonEmpty)
	c.Storage.Archive = p.str("storage.archive", nil)
	c.Storage.HugePages = p.boolean("storage.huge_pages")
	if r := fmt.Sprint(v.Get("storage.retention")); strings.TrimSpace(r) != "0" {
		c.Storage.Retention = p.duration("storage.retention")
		if c.Storage.Archive == "" {
			p.fail("storage.retention", r, "0 without storage.archive: calls are deleted only once archived and verified")
		}
	}
	c.NATS = NATS{
		URL: p.natsURL("nats.url"), Listen: p.str("nats.embedded.listen", hostPort),
		StoreDir: p.str("nats.embedded.store_dir", nonEmpty), Subject: p.str("nats.subject", nonEmpty),
		JetStream: p.boolean("nats.jetstream"), Stream: p.str("nats.stream", nonEmpty),
		Consumer: p.str("nats.consumer", nonEmpty), Servers: p.list("nats.servers"),
		Queue: p.str("nats.queue", nil), Creds: p.str("nats.creds", nil), NKey: p.str("nats.nkey", nil),
		Token: p.str("nats.token", nil), User: p.str("nats.user", nil), Password: p.str("nats.password", nil),
		TLSCA: p.str("nats.tls.ca", nil), TLSCert: p.str("nats.tls.cert", nil), TLSKey: p.str("nats.tls.key", nil),
		StreamMaxAge: p.duration("nats.stream_max_age"), StreamMaxBytes: p.size("nats.stream_max_bytes"),
		StreamReplicas: p.integer("nats.stream_replicas", 1, 5), StartupTimeout: p.duration("nats.startup_timeout"),
		Users: p.natsUsers("nats.embedded.users"), GatewayPasswordFile: p.str("nats.embedded.gateway_password_file", nil),
	}
	if c.NATS.URL == "" {
		// On the embedded server the daemon's own credential has every
		// permission (the JetStream API, every subject): as long as the
		// API's token at least.
		for _, kv := range [][2]string{{"nats.token", c.NATS.Token}, {"nats.password", c.NATS.Password}} {
			if kv[1] != "" && len(kv[1]) < 16 {
				p.fail(kv[0], kv[1], "use at least 16 random characters: with nats.url empty it is the daemon's credential on the embedded server, with every permission")
			}
		}
	}
	c.Ingest = Ingest{
		BatchSize: p.integer("ingest.batch_size", 1, 1_000_000), FetchSize: p.integer("ingest.fetch_size", 1, 100_000),
		FlushInterval: p.duration("ingest.flush_interval"),
		MaxEventBytes: p.integer("ingest.max_event_bytes", 1024, 64<<20), StoreArgs: p.boolean("ingest.store_args"),
		MaxMessageBytes: p.integer("ingest.max_message_bytes", 64<<10, 64<<20),
	}
	c.HTTP = HTTP{Listen: p.str("http.listen", hostPort), Token: p.str("http.token", apiToken),
		TokenFile: p.str("http.token_file", nil), AllowedHosts: p.list("http.allowed_hosts"),
		TLSCert: p.str("http.tls.cert", nil), TLSKey: p.str("http.tls.key", nil)}
	if (c.HTTP.TLSCert == "") != (c.HTTP.TLSKey == "") {
		p.fail("http.tls.key", c.HTTP.TLSKey, "http.tls.cert and http.tls.key go together (PEM files of the API's certificate and key)")
	}
	c.OTLP = OTLP{Listen: p.str("otlp.listen", otlpListen), GRPCListen: p.str("otlp.grpc_listen", otlpGRPCListen), MaxRequestBytes: p.size("otlp.max_request_bytes"),
		Server: p.str("otlp.server", nil), Token: p.str("otlp.token", otlpToken), TokenFile: p.str("otlp.token_file", nil)}
	if c.OTLP.MaxRequestBytes <= 0 || c.OTLP.MaxRequestBytes > 1<<30 {
		p.fail("otlp.max_request_bytes", v.Get("otlp.max_request_bytes"), "a positive size up to 1GiB such as 4MiB")
	}
	if c.OTLP.Listen != "" && c.OTLP.Listen == c.HTTP.Listen {
		p.fail("otlp.listen", c.OTLP.Listen, "an address of its own, not http.listen's (OTLP/HTTP's usual port is 4318)")
	}
	if g := c.OTLP.GRPCListen; g != "" && (g == c.HTTP.Listen || g == c.OTLP.Listen) {
		p.fail("otlp.grpc_listen", g, "an address of its own, not http.listen's or otlp.listen's (OTLP/gRPC's usual port is 4317)")
	}
	c.Query = Query{Timeout: p.duration("query.timeout"), MaxRows: p.integer("query.max_rows", 1, 1<<30),
		MaxBytes: p.size("query.max_bytes")}
	if c.Query.MaxBytes <= 0 {
		p.fail("query.max_bytes", v.Get("query.max_bytes"), "a positive size such as 64MiB")
	}
	c.Recommend = Recommend{
		Window: p.duration("recommend.window"), MinDays: p.integer("recommend.min_days", 0, 3650),
		MinSessions: p.integer("recommend.min_sessions", 0, 1<<30), Headroom: p.float("recommend.headroom", 1, 100),
		MinLimit: p.integer("recommend.min_limit", 1, 1<<30), RareMaxCalls: p.integer("recommend.rare_max_calls", 0, 1<<30),
		RareMaxDays: p.integer("recommend.rare_max_days", 0, 3650), RareMaxSessionShare: p.float("recommend.rare_max_session_share", 0, 1),
		PollMinCalls:    p.integer("recommend.poll_min_calls", 2, 1<<20),
		PollMaxInterval: p.duration("recommend.poll_max_interval"), PollMaxCV: p.float("recommend.poll_max_cv", 0.0001, 10),
		RunawayFactor: p.float("recommend.runaway_factor", 1, 1000), Grace: p.duration("recommend.grace"),
		Overrides: p.str("recommend.overrides", nil), SessionGap: p.duration("recommend.session_gap"),
	}
	c.Alerts = Alerts{Enabled: p.boolean("alerts.enabled"), Interval: p.duration("alerts.interval"),
		RunawayPolls: p.integer("alerts.runaway_polls", 0, 1<<30), SubjectPrefix: p.str("alerts.subject_prefix", nil)}
	if pre := c.Alerts.SubjectPrefix; pre == "" || !strings.HasSuffix(pre, ".") || strings.ContainsAny(pre, "*> \t") {
		p.fail("alerts.subject_prefix", pre, "a NATS subject prefix ending in '.', without wildcards or spaces, such as mcptrail.alerts.")
	}
	if c.Alerts.Interval > time.Minute {
		p.fail("alerts.interval", v.Get("alerts.interval"), "at most 1m (an alert is due within 60 s of the loop crossing its threshold), such as 10s")
	}
	c.Regression = Regression{Enabled: p.boolean("regression.enabled"), Interval: p.duration("regression.interval"),
		Watch: p.duration("regression.watch"), Baseline: p.duration("regression.baseline"),
		MinRefused: p.integer("regression.min_refused", 1, 1<<30), MinShare: p.float("regression.min_share", 0.001, 1)}
	if iv := c.Regression.Interval; iv > 0 && (iv < time.Second || iv > 30*time.Minute) {
		p.fail("regression.interval", v.Get("regression.interval"), "between 1s and 30m (a regression is due within the first hour under a new policy version), such as 1m")
	}
	if w := c.Regression.Watch; w > 0 && w < time.Hour {
		p.fail("regression.watch", v.Get("regression.watch"), "at least 1h, such as 24h")
	}
	if b := c.Regression.Baseline; b > 0 && b < time.Hour {
		p.fail("regression.baseline", v.Get("regression.baseline"), "at least 1h, such as 14d")
	}
	if raw := v.Get("reports"); raw != nil {
		list, ok := raw.([]any)
		if !ok {
			p.fail("reports", raw, "a list of report schedules")
		}
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				p.fail(fmt.Sprintf("reports[%d]", i), item, "a mapping with name, schedule, servers, window, formats, out_dir")
				continue
			}
			c.Reports = append(c.Reports, m)
		}
	}
	if len(p.errs) > 0 {
		return nil, &Error{Msg: strings.Join(p.errs, "\n")}
	}
	return c, nil
}

type parser struct {
	v    *viper.Viper
	errs []string
}

func (p *parser) fail(key string, val any, allowed string) {
	if secretKey(key) {
		val = "(hidden)" // errors never quote a credential
	}
	where := "config.yaml"
	if f := p.v.ConfigFileUsed(); f != "" {
		where = f
	}
	where += ", " + EnvName(key)
	if key == "storage.path" {
		where += " or --db" // the one key a flag of every command sets
	}
	p.errs = append(p.errs, fmt.Sprintf("config: %s = %q: %s (set it in %s)", key, fmt.Sprint(val), allowed, where))
}

// secretKey reports whether a key holds a credential.
func secretKey(key string) bool {
	return strings.HasSuffix(key, ".token") || strings.HasSuffix(key, ".password")
}

// EnvName is the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

type check func(string) string

func nonEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "must not be empty"
	}
	return ""
}

// apiToken refuses a token short enough to guess.
func apiToken(s string) string {
	if s != "" && len(s) < 16 {
		return "use at least 16 random characters, or leave it empty for serve to generate one into http.token_file"
	}
	return ""
}

// otlpToken refuses an exporters' token short enough to guess.
func otlpToken(s string) string {
	if s != "" && len(s) < 16 {
		return "use at least 16 random characters, or leave it empty for serve to generate one into otlp.token_file"
	}
	return ""
}

// otlpListen is empty (no receiver) or host:port with the host written out,
// so that listening beyond this machine is always asked for by name.
func otlpListen(s string) string { return receiverAddress(s, "4318") }

func otlpGRPCListen(s string) string { return receiverAddress(s, "4317") }

// receiverAddress checks an OTLP receiver's address, whose usual port is
// port: empty (none), or a host and port.
func receiverAddress(s, port string) string {
	if s == "" {
		return ""
	}
	if why := hostPort(s); why != "" {
		return why
	}
	if host, _, _ := net.SplitHostPort(s); host == "" {
		return "name the host: 127.0.0.1:" + port + " for this machine only, or an address of an interface (0.0.0.0:" + port + " for all) to take spans from other hosts"
	}
	return ""
}

func hostPort(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "must be host:port, e.g. 127.0.0.1:4222"
	}
	_ = host
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "the port must be a number from 0 to 65535"
	}
	return ""
}

// natsURL reads a NATS URL; an error shows it without its credentials.
func (p *parser) natsURL(key string) string {
	s, ok := p.text(key)
	if !ok {
		return ""
	}
	if msg := natsURL(s); msg != "" {
		p.fail(key, redact.URL(s), msg)
	}
	return s
}

func natsURL(s string) string {
	if s == "" {
		return ""
	}
	for _, one := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" {
			return "must be empty (embedded server) or nats://host:port[,nats://host:port...]"
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return "the scheme must be nats, tls, ws or wss"
		}
	}
	return ""
}

// notString is the error for a value of a string key that YAML read as
// something else: an unquoted 0000123456789012345678 is a float
// (1.2345678901234568e+17) and 0123 an octal 83, so taking its text would
// silently change a token, a password, a path or a name.
// The fix names the key as written in the file: example is `token: "…"`.
func notString(val any, example string) string {
	what := "a number"
	switch val.(type) {
	case bool:
		what = "true or false"
	case []any, []string:
		what = "a list"
	case map[string]any:
		what = "a mapping"
	}
	return fmt.Sprintf("must be a string, but YAML read it as %s, which may change it: quote it (%s)", what, example)
}

// leaf is a key's last part, as written in the file.
func leaf(key string) string { return key[strings.LastIndexByte(key, '.')+1:] }

// text reads a string key's value; a value YAML read as anything but a
// string is refused (notString), and nil is "".
func (p *parser) text(key string) (string, bool) {
	val := p.v.Get(key)
	switch s := val.(type) {
	case nil:
		return "", true
	case string:
		return s, true
	}
	p.fail(key, val, notString(val, leaf(key)+`: "…"`))
	return "", false
}

func (p *parser) str(key string, c check) string {
	s, ok := p.text(key)
	if !ok {
		return ""
	}
	if c != nil {
		if msg := c(s); msg != "" {
			p.fail(key, s, msg)
		}
	}
	return s
}

func (p *parser) boolean(key string) bool {
	switch val := p.v.Get(key).(type) {
	case bool:
		return val
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err == nil {
			return b
		}
		p.fail(key, val, "must be true or false")
	default:
		p.fail(key, val, "must be true or false")
	}
	return false
}

func (p *parser) integer(key string, lo, hi int) int {
	val := p.v.Get(key)
	var n int
	switch x := val.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case float64:
		if x != float64(int(x)) {
			p.fail(key, val, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
			return 0
		}
		n = int(x)
	case string:
		var err error
		n, err = strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			p.fail(key, val, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
			return 0
		}
	default:
		p.fail(key, val, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
		return 0
	}
	if n < lo || n > hi {
		p.fail(key, val, fmt.Sprintf("must be a whole number from %d to %d", lo, hi))
	}
	return n
}

func (p *parser) float(key string, lo, hi float64) float64 {
	val := p.v.Get(key)
	var f float64
	switch x := val.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case float64:
		f = x
	case string:
		var err error
		f, err = strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			p.fail(key, val, fmt.Sprintf("must be a number from %g to %g", lo, hi))
			return 0
		}
	default:
		p.fail(key, val, fmt.Sprintf("must be a number from %g to %g", lo, hi))
		return 0
	}
	if f < lo || f > hi {
		p.fail(key, val, fmt.Sprintf("must be a number from %g to %g", lo, hi))
	}
	return f
}

func (p *parser) duration(key string) time.Duration {
	val := p.v.Get(key)
	d, err := duration.Parse(fmt.Sprint(val))
	if err != nil || d <= 0 {
		p.fail(key, val, "must be a positive duration such as 90s, 15m, 12h, 7d or 2w")
	}
	return d
}

// size reads a byte size such as 10GB, 512MiB or 1073741824; 0 is allowed.
func (p *parser) size(key string) int64 {
	val := p.v.Get(key)
	n, err := humanize.ParseBytes(strings.TrimSpace(fmt.Sprint(val)))
	if err != nil || n > math.MaxInt64 {
		p.fail(key, val, "must be a size such as 10GB, 512MiB or a number of bytes, or 0 for no limit")
		return 0
	}
	return int64(n)
}

// natsUsers reads nats.embedded.users, a list of mappings (in the file only).
func (p *parser) natsUsers(key string) []NATSUser {
	const want = "a list of mappings with user, password_file or nkey, and servers (set it in the config file)"
	var out []NATSUser
	list, ok := p.v.Get(key).([]any)
	if !ok {
		if val := p.v.Get(key); val != nil {
			p.fail(key, val, want)
		}
		return nil
	}
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			p.fail(fmt.Sprintf("%s[%d]", key, i), item, want)
			continue
		}
		var u NATSUser
		for k, val := range m {
			entry := fmt.Sprintf("%s[%d].%s", key, i, k)
			s, isString := val.(string)
			switch k {
			case "user", "password_file", "nkey":
				if !isString {
					p.fail(entry, val, "must be a string")
				}
				switch k {
				case "user":
					u.User = s
				case "password_file":
					u.PasswordFile = s
				default:
					u.NKey = s
					if isString && s != "" && !nkeys.IsValidPublicUserKey(s) {
						// Never quoted: it may be a pasted seed, the private key.
						p.fail(entry, redact.NKey(s), "want a public user NKey (56 characters starting with U), not a seed: the gateway signs in with the seed, which stays with it")
					}
				}
			case "servers":
				list, ok := val.([]any)
				if !ok {
					p.fail(entry, val, `must be a list of MCP server names, or ["*"] for all`)
				}
				for j, item := range list {
					s, ok := item.(string)
					if !ok {
						p.fail(fmt.Sprintf("%s[%d]", entry, j), item, notString(item, `servers: ["…"]`))
						continue
					}
					u.Servers = append(u.Servers, strings.TrimSpace(s))
				}
			default:
				p.fail(entry, val, "unknown key: the keys are user, password_file, nkey and servers")
			}
		}
		out = append(out, u)
	}
	return out
}

// list reads a string list; from the environment it is comma-separated.
func (p *parser) list(key string) []string {
	var out []string
	switch val := p.v.Get(key).(type) {
	case nil:
	case string:
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	case []string:
		out = append(out, val...)
	case []any:
		for i, item := range val {
			s, ok := item.(string)
			if !ok {
				p.fail(fmt.Sprintf("%s[%d]", key, i), item, notString(item, leaf(key)+`: ["…"]`))
				continue
			}
			out = append(out, strings.TrimSpace(s))
		}
	default:
		p.fail(key, val, "must be a list of names (comma-separated in the environment)")
	}
	return out
}
