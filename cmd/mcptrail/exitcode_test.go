package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"

	"github.com/mcptrail/mcptrail/config"
)

// A usage error (exit 2, with a "Run ... --help" line) is what cobra refuses
// before the command runs, whatever its text; an error of the command itself
// is a failure (exit 1) even when it says "invalid argument" (EINVAL, a
// DuckDB conversion error) or "unknown command".
func TestUsageErrorsByWhereNotByText(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  error // what boom's RunE returns
		code int
		help bool // a "Run 'mcptrail boom --help'" line
	}{
		{name: "EINVAL", args: []string{"boom"}, err: &os.PathError{Op: "write", Path: "/x", Err: syscall.EINVAL}, code: exitFailure},
		{name: "text of a flag error", args: []string{"boom"}, err: errors.New(`unknown command "x"; invalid argument; accepts 1 arg(s); required flag; unknown flag: --x`), code: exitFailure},
		{name: "usage error of the command", args: []string{"boom"}, err: usageErrorf("--x is required"), code: exitUsage, help: true},
		// It names the key and where to set it: no usage line.
		{name: "configuration error", args: []string{"boom"}, err: &config.Error{Msg: `config: http.token = "(hidden)": too short`}, code: exitUsage},
		{name: "too many arguments", args: []string{"boom", "a", "b"}, code: exitUsage},
		{name: "unknown command", args: []string{"frobnicate"}, code: exitUsage},
		{name: "unknown flag", args: []string{"boom", "--frob"}, code: exitUsage, help: true},
		{name: "bad flag value", args: []string{"boom", "--n", "many"}, code: exitUsage, help: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // no config.yaml
			var stdout, stderr bytes.Buffer
			a := &app{stdin: &bytes.Buffer{}, stdout: &stdout, stderr: &stderr}
			root := newRootCmd(a)
			boom := &cobra.Command{Use: "boom", Args: cobra.MaximumNArgs(1),
				RunE: func(*cobra.Command, []string) error { return tc.err }}
			boom.Flags().Int("n", 0, "a number")
			root.AddCommand(boom)
			a.markRun(boom)
			code := a.executeRoot(context.Background(), root, tc.args)
			assert.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			if tc.err != nil {
				assert.Contains(t, stderr.String(), fmt.Sprintf("mcptrail: %v\n", tc.err))
			}
			if tc.help {
				assert.Contains(t, stderr.String(), "Run 'mcptrail boom --help' for usage.")
			} else {
				assert.NotContains(t, stderr.String(), "--help")
			}
		})
	}
}
