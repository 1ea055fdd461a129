package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/mcptest"
)

var update = flag.Bool("update", false, "rewrite the golden stdout files")

// binary is the mcptrail executable built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	// Re-executed as the MCP server that catalog fetch reads.
	mcptest.ServeIfAsked()
	flag.Parse()
	dir, err := os.MkdirTemp("", "mcptrail-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "mcptrail")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		panic("build mcptrail: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestGolden runs every case under testdata/<command>/<case>/:
//
//	args    the command line, one argument per line ($DB, $SAMPLES and $TMP expand)
//	setup   optional command lines run first, one per line, split on spaces
//	env     optional KEY=VALUE lines
//	stdout  the expected standard output (rewritten with -update)
//	exit    the expected exit code (default 0)
//	stderr  optional text the standard error must contain
func TestGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/*/*/args")
	require.NoError(t, err)
	require.NotEmpty(t, cases)
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	for _, argsFile := range cases {
		dir := filepath.Dir(argsFile)
		name := strings.TrimPrefix(dir, "testdata/")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			expand, env := setUpCase(t, dir, tmp, samples)
			var args []string
			for _, a := range readLines(t, argsFile) {
				args = append(args, expand(a))
			}
			stdout, code, stderr := runCLI(t, tmp, env, args)
			stdout = strings.ReplaceAll(stdout, tmp, "$TMP")
			stdout = strings.ReplaceAll(stdout, samples, "$SAMPLES")

			wantCode := 0
			if lines := readLines(t, filepath.Join(dir, "exit")); len(lines) > 0 {
				// Its own err: the cases run in parallel.
				n, err := strconv.Atoi(lines[0])
				require.NoError(t, err)
				wantCode = n
			}
			assert.Equal(t, wantCode, code, "exit code; stderr:\n%s", stderr)
			for _, want := range readLines(t, filepath.Join(dir, "stderr")) {
				assert.Contains(t, stderr, expand(want))
			}
			golden := filepath.Join(dir, "stdout")
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(stdout), 0o644))
				return
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "no golden file: run go test ./cmd/mcptrail -run TestGolden -update")
			assert.Equal(t, string(want), stdout)
		})
	}
}

// setUpCase runs a golden case's setup lines in tmp and returns how its
// arguments expand and the environment of its commands.
func setUpCase(t *testing.T, dir, tmp, samples string) (expand func(string) string, env []string) {
	t.Helper()
	expand = strings.NewReplacer("$DB", filepath.Join(tmp, "mcptrail.duckdb"), "$SAMPLES", samples, "$TMP", tmp).Replace
	env = []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	for _, kv := range readLines(t, filepath.Join(dir, "env")) {
		env = append(env, expand(kv))
	}
	for _, line := range readLines(t, filepath.Join(dir, "setup")) {
		out, code, errOut := runCLI(t, tmp, env, strings.Fields(expand(line)))
		require.Zero(t, code, "setup %q failed: %s%s", line, out, errOut)
	}
	return expand, env
}

func runCLI(t *testing.T, dir string, env, args []string) (string, int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), code, stderr.String()
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
