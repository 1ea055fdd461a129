package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/api"
)

// ingestedDB makes a database of n simulated calls in a folder of its own.
func ingestedDB(t *testing.T, n int) (tmp, db string, env []string) {
	t.Helper()
	tmp = t.TempDir()
	db = filepath.Join(tmp, "mcptrail.duckdb")
	env = []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	for _, args := range [][]string{
		{"simulate", "--seed", "1", "--count", fmt.Sprint(n), "--out", filepath.Join(tmp, "e.jsonl")},
		{"ingest", filepath.Join(tmp, "e.jsonl"), "--db", db},
	} {
		out, code, errOut := runCLI(t, tmp, env, args)
		require.Zero(t, code, "%v: %s%s", args, out, errOut)
	}
	return tmp, db, env
}

func apiPost(t *testing.T, addr, path, token, contentType, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The requests that once ran `demo` (deleting the database), `ingest` of a
// host file and `simulate --out` inside the daemon, and a cross-site POST,
// change nothing now.
func TestDaemonRunsNoCommandLine(t *testing.T) {
	tmp, db, env := ingestedDB(t, 3000)
	addr := startDaemon(t, tmp, db)
	tokenFile := filepath.Join(tmp, api.TokenFileName)
	st, err := os.Stat(tokenFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the generated token file")
	token, err := api.ReadToken(tokenFile)
	require.NoError(t, err)

	for _, body := range []string{
		`{"args":["--dir","query","demo","--dir","` + tmp + `","--days","1"]}`,
		`{"args":["--server","query","ingest","/etc/passwd"]}`,
		`{"args":["simulate","--count","1","--out","` + filepath.Join(tmp, "planted") + `"]}`,
	} {
		code, _ := apiPost(t, addr, "/api/v1/run", token, "application/json", body, nil)
		assert.Equal(t, http.StatusNotFound, code, body)
	}
	// Typed fields cannot become commands or flags.
	code, body := apiPost(t, addr, api.PathQuery, token, "application/json", `{"name":"--dir","format":"csv"}`, nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"exit":2`)
	code, _ = apiPost(t, addr, api.PathQuery, token, "application/json", `{"args":["demo"]}`, nil)
	assert.Equal(t, http.StatusBadRequest, code)
	// A page in a browser: a simple POST, a foreign origin, a rebound host name.
	suppress := `{"finding_id":"unused_tool:proxmox-mcp:*:create_vm","reason":"x","until":"2027-01-01","by":"mallory"}`
	code, _ = apiPost(t, addr, api.PathSuppress, token, "text/plain", suppress, nil)
	assert.Equal(t, http.StatusUnsupportedMediaType, code)
	code, _ = apiPost(t, addr, api.PathSuppress, token, "application/json", suppress, map[string]string{"Origin": "https://evil.example"})
	assert.Equal(t, http.StatusForbidden, code)
	code, _ = apiPost(t, addr, api.PathSuppress, "", "application/json", suppress, nil)
	assert.Equal(t, http.StatusUnauthorized, code)

	env = append(env, "MCPTRAIL_HTTP_LISTEN="+addr)
	out, code, errOut := runCLI(t, tmp, env, []string{"suppressions", "--format", "json", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, "[]\n", out, "no suppression was made")
	out, code, errOut = runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, "n\n3000\n", out, "every call is still there")
	_, err = os.Stat(filepath.Join(tmp, "planted"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// ingest asks the daemon (with the token) which database it holds.
	_, code, errOut = runCLI(t, tmp, env, []string{"ingest", filepath.Join(tmp, "e.jsonl"), "--db", db})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "mcptrail serve is running and holds "+db)
	// A command that runs on the file alone names the daemon that holds it.
	_, code, errOut = runCLI(t, tmp, env, []string{"recluster", "--db", db})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "mcptrail serve at "+addr+" (http.listen) holds it, and this command runs on the file alone: stop serve first")
	assert.NotContains(t, errOut, "No daemon answered")
}

// A process that took http.listen and answers like the daemon gets no token;
// the CLI runs on its database file (which no daemon holds), warning.
func TestCLIGivesNoTokenToASquatter(t *testing.T) {
	tmp, db, env := ingestedDB(t, 100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var sawToken atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawToken.Store(true)
		}
		w.Header().Set(api.IdentHeader, "1")
		fmt.Fprint(w, `{"service":"mcptrail","api":"v1","proof":"00"}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+ln.Addr().String(), "MCPTRAIL_HTTP_TOKEN=the-real-token-0123456789")
	out, code, errOut := runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--format", "csv", "--db", db})
	assert.Equal(t, 0, code, errOut)
	assert.Equal(t, "n\n100\n", out, "answered from the file")
	assert.Contains(t, errOut, "did not prove that it holds this CLI's token")
	assert.False(t, sawToken.Load())
}

// A daemon this CLI has no token for may hold another project's database:
// the CLI runs on its own file; only for the file the daemon holds does it
// say that the daemon cannot be used, and why.
func TestCLIWithoutTheTokenRunsOnItsOwnFile(t *testing.T) {
	tmp, db, env := ingestedDB(t, 100)
	addr := startDaemon(t, tmp, db)
	_, other, _ := ingestedDB(t, 50) // another project's, in a folder of its own
	noToken := append(env, "MCPTRAIL_HTTP_LISTEN="+addr, "MCPTRAIL_HTTP_TOKEN_FILE="+filepath.Join(t.TempDir(), "none.token"))
	out, code, errOut := runCLI(t, tmp, noToken, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--format", "csv", "--db", other})
	assert.Equal(t, 0, code, errOut)
	assert.Equal(t, "n\n50\n", out)
	_, code, errOut = runCLI(t, tmp, noToken, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--db", db})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no API token")
}

// Through the daemon a huge result stops at query.max_rows with a note, and
// a long query stops at query.timeout.
func TestDaemonBoundsQueries(t *testing.T) {
	tmp, db, env := ingestedDB(t, 100)
	addr := startDaemon(t, tmp, db, "MCPTRAIL_QUERY_TIMEOUT=2s", "MCPTRAIL_QUERY_MAX_ROWS=1000")
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+addr)
	out, code, errOut := runCLI(t, tmp, env, []string{"query", "--sql", "SELECT range AS i FROM range(20000000)", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, 1001, strings.Count(out, "\n"), "the header and max_rows rows")
	assert.Contains(t, errOut, "result truncated after 1000 rows (query.max_rows)")

	_, code, errOut = runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) FROM range(3000000000) a, range(100) b", "--db", db})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "query timed out after 2s (query.timeout)")
	// The daemon still answers.
	out, code, errOut = runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, "n\n100\n", out)
}

// A 20M-row result through the daemon, with the default limits, is cut at
// query.max_rows and streamed: the daemon's peak memory stays under the
// 512 MiB it is held to (the whole result once took it to 3.3 GB).
func TestDaemonAnswersAHugeQueryWithinItsMemory(t *testing.T) {
	tmp, db, env := ingestedDB(t, 100)
	addr, pid := startServe(t, tmp, db, nil, func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+addr)
	out, code, errOut := runCLI(t, tmp, env, []string{"query", "--sql",
		"SELECT range AS i, repeat('x', 100) || range AS s FROM range(20000000)", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, 100001, strings.Count(out, "\n"), "the header and query.max_rows rows")
	assert.Contains(t, errOut, "result truncated after 100000 rows (query.max_rows)")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skip("no /proc on this system")
	}
	var peakKiB int
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			_, err := fmt.Sscanf(strings.TrimPrefix(line, "VmHWM:"), "%d", &peakKiB)
			require.NoError(t, err)
		}
	}
	require.Positive(t, peakKiB)
	t.Logf("daemon peak RSS %d MiB", peakKiB/1024)
	assert.Less(t, peakKiB, 512<<10, "peak RSS in KiB")
}

// With http.tls.cert and key the API speaks HTTPS, and the CLI, given the
// same settings, trusts that certificate.
func TestDaemonOverTLS(t *testing.T) {
	tmp, db, env := ingestedDB(t, 100)
	cert, key := selfSigned(t, tmp)
	tlsEnv := []string{"MCPTRAIL_HTTP_TLS_CERT=" + cert, "MCPTRAIL_HTTP_TLS_KEY=" + key}
	addr := startDaemonTLS(t, tmp, db, tlsEnv)
	env = append(append(env, "MCPTRAIL_HTTP_LISTEN="+addr), tlsEnv...)
	out, code, errOut := runCLI(t, tmp, env, []string{"query", "--sql", "SELECT count(*) AS n FROM calls", "--format", "csv", "--db", db})
	require.Zero(t, code, errOut)
	assert.Equal(t, "n\n100\n", out)
	// Plain HTTP gets nothing from it.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}
}

// startDaemonTLS is startDaemon for a daemon that answers HTTPS only.
func startDaemonTLS(t *testing.T, tmp, db string, env []string) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only readiness
	addr, _ := startServe(t, tmp, db, env, func(addr string) bool {
		resp, err := client.Get("https://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mcptrail test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}
