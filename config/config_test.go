package config

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/spf13/viper"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The root config.yaml documents every key with exactly the defaults.
func TestRepositoryConfigMatchesDefaults(t *testing.T) {
	data, err := os.ReadFile("../config.yaml")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(data, &doc))
	flat := map[string]any{}
	flatten("", doc, flat)
	for key, want := range Defaults {
		got, ok := flat[key]
		require.True(t, ok, "config.yaml lacks %s", key)
		assert.Equal(t, normalise(want), normalise(got), key)
	}
	for key := range flat {
		_, ok := Defaults[key]
		assert.True(t, ok, "config.yaml documents %s, which has no default", key)
	}
}

func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			flatten(key, sub, out)
			continue
		}
		out[key] = v
	}
}

func normalise(v any) any {
	switch x := v.(type) {
	case int:
		return float64(x)
	case []string:
		if len(x) == 0 {
			return "[]"
		}
	case []any:
		if len(x) == 0 {
			return "[]"
		}
	}
	return v
}

func TestDefaultsLoad(t *testing.T) {
	c, err := Load(New())
	require.NoError(t, err)
	assert.Equal(t, "./mcptrail.duckdb", c.Storage.Path)
	assert.Equal(t, "127.0.0.1:4222", c.NATS.Listen)
	assert.True(t, c.NATS.JetStream)
	assert.Equal(t, 122880, c.Ingest.BatchSize)
	assert.Equal(t, 4096, c.Ingest.FetchSize)
	assert.Equal(t, 2*time.Second, c.Ingest.FlushInterval)
	assert.Equal(t, 30*24*time.Hour, c.Recommend.Window)
	assert.Equal(t, 14*24*time.Hour, c.Recommend.Grace)
	assert.Equal(t, 1.5, c.Recommend.Headroom)
	assert.Empty(t, c.NATS.Servers)
	assert.Zero(t, c.NATS.StreamMaxBytes, "no size limit")
	assert.Equal(t, Query{Timeout: 30 * time.Second, MaxRows: 100000, MaxBytes: 64 << 20}, c.Query)
}

func TestQueryLimits(t *testing.T) {
	v := New()
	v.Set("query.timeout", "2m")
	v.Set("query.max_rows", "500")
	v.Set("query.max_bytes", "1GB")
	c, err := Load(v)
	require.NoError(t, err)
	assert.Equal(t, Query{Timeout: 2 * time.Minute, MaxRows: 500, MaxBytes: 1e9}, c.Query)
}

func TestOTLP(t *testing.T) {
	c, err := Load(New())
	require.NoError(t, err)
	assert.Equal(t, OTLP{MaxRequestBytes: 4 << 20}, c.OTLP, "off by default")
	v := New()
	v.Set("otlp.listen", "127.0.0.1:4318")
	v.Set("otlp.max_request_bytes", "16MiB")
	v.Set("otlp.server", "proxmox-mcp")
	v.Set("otlp.token", "exporters-token-0123456789")
	v.Set("otlp.token_file", "/etc/mcptrail/otlp.token")
	c, err = Load(v)
	require.NoError(t, err)
	assert.Equal(t, OTLP{Listen: "127.0.0.1:4318", MaxRequestBytes: 16 << 20, Server: "proxmox-mcp",
		Token: "exporters-token-0123456789", TokenFile: "/etc/mcptrail/otlp.token"}, c.OTLP)
}

func TestStreamMaxBytes(t *testing.T) {
	for in, want := range map[string]int64{"20GB": 20e9, "512MiB": 512 << 20, "1073741824": 1 << 30, "0": 0} {
		v := New()
		v.Set("nats.stream_max_bytes", in)
		c, err := Load(v)
		require.NoError(t, err, in)
		assert.Equal(t, want, c.NATS.StreamMaxBytes, in)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("storage:\n  path: /from/file.duckdb\ningest:\n  batch_size: 100\nnats:\n  servers: [a, b]\n"), 0o600))

	v := New()
	_, err := ReadFile(v, file)
	require.NoError(t, err)
	c, err := Load(v)
	require.NoError(t, err)
	assert.Equal(t, "/from/file.duckdb", c.Storage.Path, "file over default")
	assert.True(t, c.Storage.HugePages, "on by default")
	assert.Equal(t, []string{"a", "b"}, c.NATS.Servers)

	t.Setenv("MCPTRAIL_STORAGE_PATH", "/from/env.duckdb")
	t.Setenv("MCPTRAIL_NATS_SERVERS", "x, y")
	t.Setenv("MCPTRAIL_NATS_EMBEDDED_LISTEN", "127.0.0.1:5222")
	t.Setenv("MCPTRAIL_STORAGE_HUGE_PAGES", "false")
	v = New()
	_, err = ReadFile(v, file)
	require.NoError(t, err)
	c, err = Load(v)
	require.NoError(t, err)
	assert.Equal(t, "/from/env.duckdb", c.Storage.Path, "env over file")
	assert.Equal(t, []string{"x", "y"}, c.NATS.Servers, "lists are comma-separated in the environment")
	assert.Equal(t, "127.0.0.1:5222", c.NATS.Listen)
	assert.False(t, c.Storage.HugePages, "turned off in the environment")
	assert.Equal(t, 100, c.Ingest.BatchSize)

	v.Set("storage.path", "/from/flag.duckdb") // what a bound flag does
	c, err = Load(v)
	require.NoError(t, err)
	assert.Equal(t, "/from/flag.duckdb", c.Storage.Path, "flag over env")
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		key, val, want string
	}{
		{"ingest.batch_size", "lots", "ingest.batch_size = \"lots\": must be a whole number"},
		{"ingest.batch_size", "0", "from 1 to"},
		{"ingest.flush_interval", "soon", "ingest.flush_interval = \"soon\": must be a positive duration"},
		{"nats.embedded.listen", "4222", "must be host:port"},
		{"nats.url", "http://x:4222", "scheme must be nats"},
		{"nats.jetstream", "maybe", "must be true or false"},
		{"storage.huge_pages", "sometimes", "must be true or false"},
		{"recommend.headroom", "0.5", "must be a number from 1"},
		{"recommend.window", "-3d", "positive duration"},
		{"storage.path", "", "must not be empty"},
		{"nats.stream_max_bytes", "big", "must be a size such as 10GB"},
		{"query.timeout", "0s", "query.timeout = \"0s\": must be a positive duration"},
		{"query.max_rows", "0", "query.max_rows = \"0\": must be a whole number from 1 to"},
		{"query.max_bytes", "0", "query.max_bytes = \"0\": a positive size such as 64MiB"},
		{"query.max_bytes", "lots", "query.max_bytes = \"lots\": must be a size such as 10GB"},
		{"otlp.listen", ":4318", "name the host: 127.0.0.1:4318"},
		{"otlp.listen", "4318", "must be host:port"},
		{"otlp.listen", "127.0.0.1:8474", "not http.listen's"},
		{"otlp.grpc_listen", ":4317", "name the host: 127.0.0.1:4317"},
		{"otlp.grpc_listen", "127.0.0.1:8474", "not http.listen's or otlp.listen's"},
		{"otlp.max_request_bytes", "0", "a positive size up to 1GiB"},
		{"otlp.token", "short", "at least 16 random characters"},
	} {
		t.Run(tc.key+"="+tc.val, func(t *testing.T) {
			v := New()
			v.Set(tc.key, tc.val)
			_, err := Load(v)
			require.Error(t, err)
			var ce *Error
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), EnvName(tc.key), "names how to set it")
		})
	}
}

func TestUnknownKeyInFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("nats:\n  embeded:\n    listen: 1.2.3.4:1\n"), 0o600))
	_, err := ReadFile(New(), file)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown key nats.embeded.listen")
}

func TestMissingExplicitFile(t *testing.T) {
	_, err := ReadFile(viper.New(), filepath.Join(t.TempDir(), "nope.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--config")
}

func TestEmbeddedUsers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`nats:
  embedded:
    gateway_password_file: /etc/mcptrail/gw.password
    users:
      - user: pve-gateway
        password_file: /etc/mcptrail/pve.password
        servers: [proxmox-mcp, pve]
      - user: all
        nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4
`), 0o600))
	v := New()
	_, err := ReadFile(v, file)
	require.NoError(t, err)
	c, err := Load(v)
	require.NoError(t, err)
	assert.Equal(t, []NATSUser{
		{User: "pve-gateway", PasswordFile: "/etc/mcptrail/pve.password", Servers: []string{"proxmox-mcp", "pve"}},
		{User: "all", NKey: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"},
	}, c.NATS.Users)
	assert.Equal(t, "/etc/mcptrail/gw.password", c.NATS.GatewayPasswordFile)

	for val, want := range map[string]string{
		"a,b":                       "nats.embedded.users = \"a,b\": a list of mappings",
		"[x]":                       "nats.embedded.users[0] = \"x\": a list of mappings",
		"[{user: a, password: p}]":  "nats.embedded.users[0].password = \"(hidden)\": unknown key", // a credential is never quoted
		"[{user: a, servers: pve}]": "nats.embedded.users[0].servers = \"pve\": must be a list",
		"[{user: [a], nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4}]": "nats.embedded.users[0].user = \"[a]\": must be a string",
		"[{user: a, nkey: UABC}]": "nats.embedded.users[0].nkey = \"U...xxxxx\": want a public user NKey",
	} {
		v := New()
		var doc any
		require.NoError(t, yaml.Unmarshal([]byte(val), &doc))
		v.Set("nats.embedded.users", doc)
		_, err := Load(v)
		require.Error(t, err, val)
		assert.Contains(t, err.Error(), want)
	}
}

// A bad nats.url is shown without its credentials.
func TestBadNATSURLHidesCredentials(t *testing.T) {
	v := New()
	v.Set("nats.url", "http://admin:s3cret-pw@nats-1:4222,http://t0ken@nats-2:4222")
	_, err := Load(v)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `nats.url = "http://admin:xxxxx@nats-1:4222,http://xxxxx@nats-2:4222": the scheme must be nats`)
	assert.NotContains(t, err.Error(), "s3cret-pw")
	assert.NotContains(t, err.Error(), "t0ken")
}

// alerts.* have working defaults and refuse what would break the alarm's promise.
func TestAlertsKeys(t *testing.T) {
	c, err := Load(New())
	require.NoError(t, err)
	assert.Equal(t, Alerts{Enabled: true, Interval: 10 * time.Second, SubjectPrefix: "mcptrail.alerts."}, c.Alerts)
	for key, val := range map[string]any{"alerts.interval": "2m", "alerts.runaway_polls": -1,
		"alerts.subject_prefix": "mcptrail.alerts.>", "alerts.subject_prefix ": "alerts"} {
		key = strings.TrimSpace(key)
		v := New()
		v.Set(key, val)
		_, err := Load(v)
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), key)
	}
}

func TestStorageRetentionNeedsArchive(t *testing.T) {
	v := New()
	v.Set("storage.retention", "90d")
	_, err := Load(v)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "storage.retention")
	assert.Contains(t, err.Error(), "storage.archive")

	v.Set("storage.archive", "/srv/mcptrail-archive")
	c, err := Load(v)
	require.NoError(t, err)
	assert.Equal(t, 90*24*time.Hour, c.Storage.Retention)

	v.Set("storage.retention", "soon")
	_, err = Load(v)
	assert.ErrorContains(t, err, "storage.retention")
}

// A seed pasted where the public NKey goes is refused at load, before any
// file is written, and never quoted: it is the gateway's private key.
func TestEmbeddedUserSeedNeverQuoted(t *testing.T) {
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("nats:\n  embedded:\n    users:\n      - user: gw\n        nkey: "+string(seed)+"\n"), 0o600))
	v := New()
	_, err = ReadFile(v, file)
	require.NoError(t, err)
	_, err = Load(v)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), `nats.embedded.users[0].nkey = "S...xxxxx": want a public user NKey`)
	assert.NotContains(t, err.Error(), string(seed[1:8]))
}

// A string key whose value YAML reads as something else is refused, not
// turned into the text of that number: an unquoted 0000123456789012345678
// token would become "1.2345678901234568e+17", and 0123 the server 83.
func TestStringKeysMustBeStrings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`storage:
  path: 2024
http:
  token: 0000123456789012345678
  allowed_hosts: [mcptrail.example, 10]
nats:
  password: 98765432109876543210
  servers: [pve, 0123]
  embedded:
    users:
      - user: gw
        password_file: /etc/gw.password
        servers: [1.10]
otlp:
  server: true
`), 0o600))
	v := New()
	_, err := ReadFile(v, file)
	require.NoError(t, err)
	_, err = Load(v)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	msg := err.Error()
	for _, want := range []string{
		`storage.path = "2024": must be a string, but YAML read it as a number, which may change it: quote it (path: "…")`,
		`http.token = "(hidden)": must be a string, but YAML read it as a number, which may change it: quote it (token: "…")`,
		`http.allowed_hosts[1] = "10": must be a string`,
		`nats.password = "(hidden)": must be a string`,
		`nats.servers[1] = "83": must be a string, but YAML read it as a number, which may change it: quote it (servers: ["…"])`,
		`nats.embedded.users[0].servers[0] = "1.1": must be a string`,
		`otlp.server = "true": must be a string, but YAML read it as true or false`,
	} {
		assert.Contains(t, msg, want)
	}
	for _, secret := range []string{"1.2345678901234568e+17", "123456789", "9.876543210987654e+19", "98765"} {
		assert.NotContains(t, msg, secret, "a credential is never quoted")
	}

	// Quoted, they are taken as written.
	require.NoError(t, os.WriteFile(file, []byte("http:\n  token: \"0000123456789012345678\"\notlp:\n  server: \"0123\"\n"), 0o600))
	v = New()
	_, err = ReadFile(v, file)
	require.NoError(t, err)
	c, err := Load(v)
	require.NoError(t, err)
	assert.Equal(t, "0000123456789012345678", c.HTTP.Token)
	assert.Equal(t, "0123", c.OTLP.Server)
}

// On the embedded server nats.token and nats.password give every
// permission: they are held to the API token's 16 characters. Another
// server decides for itself.
func TestEmbeddedNATSCredentialLength(t *testing.T) {
	for _, key := range []string{"nats.token", "nats.password"} {
		v := New()
		v.Set("nats.user", "daemon")
		v.Set(key, "admin-secret")
		_, err := Load(v)
		var ce *Error
		require.ErrorAs(t, err, &ce, key)
		assert.Contains(t, err.Error(), key+` = "(hidden)": use at least 16 random characters`)
		assert.Contains(t, err.Error(), EnvName(key))
		assert.NotContains(t, err.Error(), "admin-secret")

		v.Set(key, "admin-secret-0123")
		_, err = Load(v)
		assert.NoError(t, err, key)

		v.Set(key, "admin-secret")
		v.Set("nats.url", "nats://nats-1:4222")
		_, err = Load(v)
		assert.NoError(t, err, "%s: an external server has its own rules", key)
	}
}

// A file key is only "reports" itself, not any key that starts so.
func TestReportsKeyIsExact(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("reports_dir: /srv/reports\nreportsx: [1]\n"), 0o600))
	_, err := ReadFile(New(), file)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "unknown key reports_dir, reportsx")

	require.NoError(t, os.WriteFile(file, []byte("reports:\n  - name: weekly\n    schedule: \"0 8 * * MON\"\n"), 0o600))
	v := New()
	_, err = ReadFile(v, file)
	require.NoError(t, err)
	c, err := Load(v)
	require.NoError(t, err)
	assert.Len(t, c.Reports, 1)
}

// misspeltEnv are the misspellings the tests and documents use on purpose.
var misspeltEnv = []string{"MCPTRAIL_HTTP_LISTN", "MCPTRAIL_NATS_PASWORD", "MCPTRAIL_FROBNICATE"}

// A misspelt MCPTRAIL_ variable is refused, naming it and the nearest
// known one, never its value; a config key's and the documented others
// pass.
func TestCheckEnv(t *testing.T) {
	ok := []string{"PATH=/bin", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1", "MCPTRAIL_NOW=2026-11-30T00:00:00Z",
		"MCPTRAIL_DEBUG=1", "MCPTRAIL_CPUPROFILE=/tmp/p", "MCPTRAIL_NATS_EMBEDDED_STORE_DIR=/x", "MCPTRAILX=1"}
	require.NoError(t, CheckEnv(ok))

	err := CheckEnv(append(ok, "MCPTRAIL_HTTP_LISTN=0.0.0.0:80", "MCPTRAIL_NATS_PASWORD=s3cret-value", "MCPTRAIL_FROBNICATE=1"))
	var ce *Error
	require.ErrorAs(t, err, &ce)
	msg := err.Error()
	assert.Contains(t, msg, "environment variable MCPTRAIL_HTTP_LISTN is not one of mcptrail's (did you mean MCPTRAIL_HTTP_LISTEN?)")
	assert.Contains(t, msg, "MCPTRAIL_NATS_PASWORD is not one of mcptrail's (did you mean MCPTRAIL_NATS_PASSWORD?)")
	assert.Contains(t, msg, "MCPTRAIL_FROBNICATE is not one of mcptrail's: unset it")
	assert.NotContains(t, msg, "s3cret-value")
	assert.NotContains(t, msg, "0.0.0.0:80")
}

// Every MCPTRAIL_ name the repository's code, scripts and documents use
// passes CheckEnv, so that no test, benchmark or documented setting is
// refused.
func TestCheckEnvKnowsTheRepositorysNames(t *testing.T) {
	re := regexp.MustCompile(`\bMCPTRAIL_[A-Z0-9_]*[A-Z0-9]`)
	seen := map[string]string{}
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// bench/out holds the benchmarks' generated files (git ignores it).
			if d.Name() == ".git" || d.Name() == "testdata" && filepath.Base(filepath.Dir(path)) == ".." || path == filepath.Join("..", "bench", "out") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sh", ".md", ".yaml", ".yml", "":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range re.FindAllString(string(data), -1) {
			seen[name] = path
		}
		return nil
	}))
	require.NotEmpty(t, seen)
	for _, misspelt := range misspeltEnv {
		delete(seen, misspelt)
	}
	for name, path := range seen {
		assert.NoError(t, CheckEnv([]string{name + "=x"}), "%s (in %s)", name, path)
	}
}

// config.yaml's comment on alerts.runaway_polls says what the alarm does
// when it is 0: its floor (alarm.DefaultFloor) applies only to a server
// with fewer than alarm.MinLoops loops, and is no lower bound of a derived
// threshold.
func TestRunawayPollsComment(t *testing.T) {
	code, err := os.ReadFile("../alarm/alarm.go")
	require.NoError(t, err)
	floor := regexp.MustCompile(`DefaultFloor = (\d+)`).FindSubmatch(code)
	loops := regexp.MustCompile(`MinLoops +\= (\d+)`).FindSubmatch(code)
	require.NotNil(t, floor)
	require.NotNil(t, loops)
	doc, err := os.ReadFile("../config.yaml")
	require.NoError(t, err)
	i := strings.Index(string(doc), "runaway_polls:")
	require.GreaterOrEqual(t, i, 0)
	comment := strings.Join(strings.Fields(strings.ReplaceAll(string(doc[i:i+400]), "#", " ")), " ")
	assert.Contains(t, comment, fmt.Sprintf("(%s with fewer than %s loops", floor[1], loops[1]))
	assert.NotContains(t, comment, "at least "+string(floor[1]))
}
