package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/freeport"
)

// daemonGolden are the commands that run in the daemon when it holds the
// database.
var daemonGolden = map[string]bool{
	"query": true, "recommend": true, "replay": true, "report": true, "catalog": true,
	"suppress": true, "unsuppress": true, "suppressions": true, "policies": true, "findings": true, "backtest": true,
}

// TestGoldenThroughDaemon runs every golden case of a command that the
// daemon answers twice after the same setup: on the file, and through a
// running `mcptrail serve` that holds the database (so the CLI cannot open
// it). Standard output must equal the golden file both times, the exit codes
// and the output folders must be the same, byte for byte.
func TestGoldenThroughDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon per case")
	}
	cases, err := filepath.Glob("testdata/*/*/args")
	require.NoError(t, err)
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	ran := 0
	for _, argsFile := range cases {
		dir := filepath.Dir(argsFile)
		args := readLines(t, argsFile)
		if !daemonGolden[args[0]] {
			continue
		}
		ran++
		name := strings.TrimPrefix(dir, "testdata/")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var outs [2]string
			var trees [2]map[string]string
			var codes [2]int
			for i, viaDaemon := range []bool{false, true} {
				tmp := t.TempDir()
				db := filepath.Join(tmp, "mcptrail.duckdb")
				expand, env := setUpCase(t, dir, tmp, samples)
				if _, err := os.Stat(db); err != nil {
					t.Skip("the case has no database for a daemon to hold")
				}
				if viaDaemon {
					// The daemon gets the case's configuration too (storage.archive).
					var caseEnv []string
					for _, kv := range readLines(t, filepath.Join(dir, "env")) {
						caseEnv = append(caseEnv, expand(kv))
					}
					env = append(env, "MCPTRAIL_HTTP_LISTEN="+startDaemon(t, tmp, db, caseEnv...))
				}
				var cmdArgs []string
				for _, a := range args {
					cmdArgs = append(cmdArgs, expand(a))
				}
				stdout, code, stderr := runCLI(t, tmp, env, cmdArgs)
				outs[i] = strings.ReplaceAll(strings.ReplaceAll(stdout, tmp, "$TMP"), samples, "$SAMPLES")
				codes[i] = code
				trees[i] = outTree(t, cmdArgs)
				for _, want := range readLines(t, filepath.Join(dir, "stderr")) {
					assert.Contains(t, stderr, expand(want), "daemon=%v", viaDaemon)
				}
				assert.NotContains(t, stderr, "database is locked", "daemon=%v", viaDaemon)
			}
			want, err := os.ReadFile(filepath.Join(dir, "stdout"))
			require.NoError(t, err)
			assert.Equal(t, string(want), outs[1], "stdout through the daemon")
			assert.Equal(t, outs[0], outs[1])
			assert.Equal(t, codes[0], codes[1], "exit code")
			assert.Equal(t, trees[0], trees[1], "the --out folder")
		})
	}
	require.Positive(t, ran)
}

// startDaemon runs `mcptrail serve` on db until the test ends and returns
// its http.listen.
func startDaemon(t *testing.T, tmp, db string, env ...string) string {
	t.Helper()
	addr, _ := startServe(t, tmp, db, env, func(addr string) bool { return httpStatus(addr, "/readyz") == http.StatusOK })
	return addr
}

// startServe runs `mcptrail serve` with env added until the test ends, waits
// until ready says so, and returns its http.listen and process id.
func startServe(t *testing.T, tmp, db string, env []string, ready func(addr string) bool) (string, int) {
	t.Helper()
	return startServeLogTo(t, filepath.Join(t.TempDir(), "serve.log"), tmp, db, env, ready)
}

// startServeLogTo is startServe with serve's output written to logPath.
func startServeLogTo(t *testing.T, logPath, tmp, db string, env []string, ready func(addr string) bool) (string, int) {
	t.Helper()
	httpAddr := freeport.Addr(t)
	logs, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(binary, "serve", "--db", db)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"MCPTRAIL_NATS_EMBEDDED_LISTEN="+freeport.Addr(t),
		"MCPTRAIL_NATS_EMBEDDED_STORE_DIR="+filepath.Join(t.TempDir(), "nats"),
		"MCPTRAIL_HTTP_LISTEN="+httpAddr)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("serve log:\n%s", b)
		}
	})
	require.Eventually(t, func() bool { return ready(httpAddr) }, 30*time.Second, 20*time.Millisecond, "serve did not become ready")
	return httpAddr, cmd.Process.Pid
}

// outTree reads every file under the command's --out folder, with its mode.
func outTree(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := ""
	for i, a := range args {
		if a == "--out" && i+1 < len(args) {
			out = args[i+1]
		}
	}
	if out == "" {
		return nil
	}
	tree := map[string]string{}
	_ = filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		tree[rel] = info.Mode().Perm().String() + " " + strconv.Itoa(len(data)) + ":" + string(bytes.ReplaceAll(data, []byte(filepath.Dir(out)), []byte("$TMP")))
		return nil
	})
	return tree
}
