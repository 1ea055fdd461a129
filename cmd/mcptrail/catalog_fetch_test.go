package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/mcptest"
)

// fetchedList is `catalog list` of the fixture's five tools, fetched over
// three tools/list pages.
const fetchedList = "testdata/fetch/list.stdout"

// TestCatalogFetch reads the fixture MCP server (internal/mcptest, written
// with the same SDK, two tools a page) over stdio, as this test binary
// re-executed, and over streamable HTTP behind a bearer token; then checks
// what was stored, on the file and through a daemon that holds it.
func TestCatalogFetch(t *testing.T) {
	const token = "Bearer t0ken-never-stored"
	srv := httptest.NewServer(mcptest.HTTPHandler("Authorization", token))
	t.Cleanup(srv.Close)
	stdio := "'" + os.Args[0] + "' -test.run=^$"
	env := []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1", mcptest.EnvServe + "=stdio"}

	for name, tc := range map[string]struct {
		source    []string
		viaDaemon bool
	}{
		"stdio":                {[]string{"--command", stdio}, false},
		"http":                 {[]string{"--url", srv.URL, "--header", "Authorization: " + token}, false},
		"http through daemon":  {[]string{"--url", srv.URL, "--header", "Authorization: " + token}, true},
		"stdio through daemon": {[]string{"--command", stdio}, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			db := filepath.Join(tmp, "mcptrail.duckdb")
			env := append([]string(nil), env...)
			if tc.viaDaemon {
				// The daemon needs a database to hold.
				out, code, errOut := runCLI(t, tmp, env, []string{"catalog", "import", "--builtin", "proxmox-mcp", "--db", db})
				require.Zero(t, code, out+errOut)
				env = append(env, "MCPTRAIL_HTTP_LISTEN="+startDaemon(t, tmp, db))
			}
			out := filepath.Join(tmp, "vms.tools.json")
			args := append([]string{"catalog", "fetch", "--server", "vms", "--out", out, "--db", db}, tc.source...)
			stdout, code, stderr := runCLI(t, tmp, env, args)
			require.Zero(t, code, stderr)
			assert.Equal(t, "imported 5 tools for vms (5 new): read 1, write 2, destructive 1, exec 1, admin 0\n", stdout)
			assert.Contains(t, stderr, "pages=3")
			assert.NotContains(t, stderr, "t0ken")

			stdout, code, stderr = runCLI(t, tmp, env, []string{"catalog", "list", "--server", "vms", "--db", db})
			require.Zero(t, code, stderr)
			if *update && name == "stdio" {
				require.NoError(t, os.WriteFile(fetchedList, []byte(stdout), 0o644))
			}
			want, err := os.ReadFile(fetchedList)
			require.NoError(t, err)
			assert.Equal(t, string(want), stdout)

			// --out is a tools/list document that catalog import takes.
			stdout, code, stderr = runCLI(t, tmp, env, []string{"catalog", "import", out, "--db", db})
			require.Zero(t, code, stderr)
			assert.Equal(t, "imported 5 tools for vms (0 new): read 1, write 2, destructive 1, exec 1, admin 0\n", stdout)

			// The token is in no file the commands wrote.
			files, err := filepath.Glob(filepath.Join(tmp, "*"))
			require.NoError(t, err)
			for _, f := range files {
				if data, err := os.ReadFile(f); err == nil {
					assert.NotContains(t, string(data), "t0ken", f)
				}
			}
		})
	}
}

// TestCatalogFetchErrors: a server that is not there, not MCP, or wants a
// header it did not get fails with exit 1 and says what to do.
func TestCatalogFetchErrors(t *testing.T) {
	srv := httptest.NewServer(mcptest.HTTPHandler("Authorization", "Bearer right"))
	t.Cleanup(srv.Close)
	env := []string{"MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"missing header": {[]string{"--url", srv.URL}, "refused the request (HTTP 401): pass its credentials with --header"},
		"wrong header":   {[]string{"--url", srv.URL, "--header", "Authorization: Bearer wr0ng"}, "refused the request (HTTP 401)"},
		"timeout":        {[]string{"--command", "sleep 30", "--timeout", "500ms"}, "no answer to initialize before the timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			args := append([]string{"catalog", "fetch", "--server", "vms", "--db", filepath.Join(tmp, "mcptrail.duckdb")}, tc.args...)
			stdout, code, stderr := runCLI(t, tmp, env, args)
			assert.Equal(t, 1, code, stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "wr0ng")
			assert.False(t, strings.Contains(stderr, "panic"), stderr)
		})
	}
}

// What a server sends never reaches the terminal raw: a catalog whose
// server name holds an escape sequence is refused (the name is held to an
// event's server's rules), and the message shows the sequence escaped.
func TestCatalogTextReachesNoTerminalRaw(t *testing.T) {
	tmp := t.TempDir()
	doc := filepath.Join(tmp, "tools.json")
	require.NoError(t, os.WriteFile(doc, []byte(`{"server":"x\u001b]0;owned\u0007\u001b[2J","tools":[{"name":"a"}]}`), 0o600))
	_, code, errOut := runCLI(t, tmp, nil, []string{"catalog", "import", doc, "--db", filepath.Join(tmp, "m.duckdb")})
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "names the server")
	assert.NotContains(t, errOut, "\x1b", "no escape sequence reaches the terminal")
	assert.Equal(t, "mcptrail: a \\x1b[2J b\nsecond line", "mcptrail: "+terminalLines("a \x1b[2J b\nsecond line"), "line breaks kept")
}
