// Command mcptrail turns the audit trail of MCP gateways into analytics and
// least-privilege policy. Each command lives in its own file.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/internal/goheap"
	"github.com/mcptrail/mcptrail/render"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// MCPTRAIL_CPUPROFILE=FILE writes a CPU profile of the whole run, for
	// the benchmarks under bench/.
	if path := os.Getenv("MCPTRAIL_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	pprof.StopCPUProfile()
	os.Exit(code)
}

// Exit codes of SPEC §6.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitFailOn  = 3
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// run executes one command line and returns its exit code. The daemon's API
// calls it too (with an open store), so output is the same either way.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	return a.execute(ctx, args)
}

func (a *app) execute(ctx context.Context, args []string) int {
	return a.executeRoot(ctx, newRootCmd(a), args)
}

func (a *app) executeRoot(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	err := a.usageError(root.ExecuteContext(ctx))
	if a.forwardedCode != nil {
		return *a.forwardedCode
	}
	return a.finish(err)
}

// finish prints a command's error as the CLI does and returns its exit code.
func (a *app) finish(err error) int {
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if code != exitFailOn || !errors.Is(err, errQuietFailOn) {
		fmt.Fprintf(a.stderr, "mcptrail: %s\n", terminalLines(err.Error()))
	}
	// A configuration error names the key and where to set it: the
	// command's usage would not help.
	if code == exitUsage && a.cmdUsage != "" && !isConfigError(err) {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", a.cmdUsage)
	}
	return code
}

// terminalLines is an error's text safe for a terminal, line by line: it
// may quote what a server, a file or a gateway sent (an MCP server's error
// message), whose escape sequences must not reach the terminal.
func terminalLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = render.Terminal(l)
	}
	return strings.Join(lines, "\n")
}

// errQuietFailOn marks a --fail-on exit whose findings were already printed.
var errQuietFailOn = errors.New("fail-on threshold reached")

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if isConfigError(err) {
		return exitUsage
	}
	return exitFailure
}

// softMemoryLimit caps the Go heap's growth (runtime/debug.SetMemoryLimit)
// unless GOMEMLIMIT says otherwise: the garbage collector then works harder
// instead of letting a long ingest double its live memory.
func softMemoryLimit(bytes int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(bytes)
	}
}

// goHeapHugePages advises storingGoHeapAdvised bytes of Go's heap for
// transparent huge pages (internal/goheap) unless storage.huge_pages is
// false: for `ingest` and `serve`, whose stores give DuckDB's memory back
// and so do not advise it when they open (the other commands' do).
func (a *app) goHeapHugePages() {
	if !a.cfg.Storage.HugePages {
		return
	}
	if err := goheap.AdviseHugePages(storingGoHeapAdvised); err != nil {
		a.log.Debug("Go heap in huge pages", "err", err)
	}
}

// storingGoHeapAdvised is how much of Go's heap `ingest` and `serve`
// advise: `ingest`'s staged batches keep ~115 MB of heap live and churn
// through more, 4 KiB a page fault where the kernel's mode is "madvise"
// (1M events: ~93,000 faults, ~55,000 with this); `serve`, under its 192
// MiB soft limit, 67–76k faults against 97–105k per 1M single events.
const storingGoHeapAdvised = 128 << 20

// extraProcs runs Go with n more Ps than it chose (runtime.GOMAXPROCS)
// unless GOMAXPROCS says otherwise.
func extraProcs(n int) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + n)
	}
}

// gcPercent sets the garbage collector's target (runtime/debug.SetGCPercent)
// unless GOGC says otherwise.
func gcPercent(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}

func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
