package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/config"
	"github.com/mcptrail/mcptrail/internal/goheap"
)

// app is the state one command line runs with.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	configFile string
	nowFlag    string

	v        *viper.Viper
	cfg      *config.Config
	now      time.Time
	nowFixed bool // --now or MCPTRAIL_NOW (or the request's now in the daemon)
	log      *slog.Logger

	// store is the daemon's open database when the command runs inside the
	// daemon's API; commands then use it instead of opening the file.
	store *analytics.Store
	// Inside the daemon: the folder the API made for this request's output
	// (sent back to the client as files), the mark for a truncated answer,
	// and the client's recommend.overrides file.
	outDir       string
	truncate     func()
	overridesDoc *api.File

	// --nats: the daemons found on this NATS answer the command (shards).
	shardsURL    string
	shardTimeout time.Duration

	forwardedCode *int   // set when a daemon answered the command for us
	cmdUsage      string // command path, for usage hints
	stage         stage  // how far cobra got with the command line
}

// stage is how far cobra got with a command line, so that an error is a
// usage error (exit 2) by where it came from, never by its text: a runtime
// error may well say "invalid argument" (EINVAL, a DuckDB conversion).
type stage int

const (
	// stageParse: finding the command (unknown command) and checking its
	// arguments (Args: "accepts 1 arg(s)", "requires at least 1 arg(s)");
	// flag errors go through the FlagErrorFunc.
	stageParse stage = iota
	// stageLoad: PersistentPreRunE, reading the configuration; its
	// errors say themselves whether they are usage errors.
	stageLoad
	// stageValidate: cobra's own checks after PersistentPreRunE (required
	// flags, flag groups).
	stageValidate
	// stageRun: the command's RunE; its errors say themselves.
	stageRun
)

// markRun makes every command's RunE record that it started (stageRun).
func (a *app) markRun(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			a.stage = stageRun
			return run(c, args)
		}
	}
	if run := cmd.Run; run != nil {
		cmd.Run = func(c *cobra.Command, args []string) {
			a.stage = stageRun
			run(c, args)
		}
	}
	for _, sub := range cmd.Commands() {
		a.markRun(sub)
	}
}

// usageError makes an error cobra returned before the command ran a usage
// error, unless it already carries an exit code.
func (a *app) usageError(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) || (a.stage != stageParse && a.stage != stageValidate) {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "mcptrail",
		Short: "Analytics and least-privilege policy from the audit trail of MCP gateways",
		Long: `mcptrail ingests one audit event per MCP tool call (from NATS or files) into DuckDB,
answers SQL over the whole call history, and recommends each server's policy.json.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.stage = stageLoad
			a.cmdUsage = cmd.CommandPath()
			if a.shardTimeout <= 0 {
				return usageErrorf("--nats-timeout %s: give how long a shard may take to answer, a positive duration such as 1m", a.shardTimeout)
			}
			if a.shardsURL != "" && !shardCommand[cmd.Name()] {
				return usageErrorf("--nats sends a command to the daemons on NATS; %s runs here (serve and ingest use nats.url)", cmd.CommandPath())
			}
			if err := a.load(cmd); err != nil {
				return err
			}
			a.stage = stageValidate
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "config file (default ./config.yaml when present)")
	pf.String("db", "", "DuckDB database file (storage.path)")
	pf.StringVar(&a.nowFlag, "now", "", "RFC 3339 time used instead of the clock, for reproducible output (or MCPTRAIL_NOW)")
	pf.StringVar(&a.shardsURL, "nats", "", "send the command to the mcptrail daemons found on this NATS (shards: the one owning --server, else each)")
	pf.DurationVar(&a.shardTimeout, "nats-timeout", time.Minute, "with --nats: how long a shard may take to answer")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		a.cmdUsage = cmd.CommandPath()
		return &exitError{code: exitUsage, err: err}
	})
	root.AddCommand(
		newIngestCmd(a),
		newPublishCmd(a),
		newQueryCmd(a),
		newQueriesCmd(a),
		newSimulateCmd(a),
		newRecommendCmd(a),
		newReportCmd(a),
		newReplayCmd(a),
		newBacktestCmd(a),
		newCatalogCmd(a),
		newSuppressCmd(a),
		newUnsuppressCmd(a),
		newSuppressionsCmd(a),
		newPoliciesCmd(a),
		newFindingsCmd(a),
		newServeCmd(a),
		newDemoCmd(a),
		newArchiveCmd(a),
		newRestoreCmd(a),
		newReclusterCmd(a),
		newConvertCmd(a),
	)
	a.markRun(root)
	return root
}

// load reads the configuration: defaults < config.yaml < MCPTRAIL_* < flags.
func (a *app) load(cmd *cobra.Command) error {
	a.v = config.New()
	if f := cmd.Flags().Lookup("db"); f != nil {
		if err := a.v.BindPFlag("storage.path", f); err != nil {
			return err
		}
	}
	if err := config.CheckEnv(os.Environ()); err != nil {
		return err
	}
	file, err := config.ReadFile(a.v, a.configFile)
	if err != nil {
		return err
	}
	_ = file
	cfg, err := config.Load(a.v)
	if err != nil {
		return err
	}
	a.cfg = cfg
	level := slog.LevelInfo
	if os.Getenv("MCPTRAIL_DEBUG") != "" {
		level = slog.LevelDebug
	}
	a.log = newLogger(a.stderr, level)
	now, err := a.parseNow()
	if err != nil {
		return err
	}
	a.now = now
	return nil
}

// shardCommand are the commands a daemon answers (typed requests), which
// --nats sends to the shards, and queries, whose built-in list every shard
// shares (it runs here). simulate and publish have a --nats of their own.
var shardCommand = map[string]bool{
	"query": true, "queries": true, "recommend": true, "replay": true, "backtest": true, "report": true,
	"import": true, "fetch": true, "list": true, "findings": true, "policies": true, "forget": true,
	"suppress": true, "unsuppress": true, "suppressions": true,
}

func (a *app) parseNow() (time.Time, error) {
	s := a.nowFlag
	src := "--now"
	if s == "" {
		s = os.Getenv("MCPTRAIL_NOW")
		src = "MCPTRAIL_NOW"
	}
	if s == "" {
		return time.Now().UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageErrorf("%s %q is not an RFC 3339 time (e.g. 2026-11-29T12:00:00Z)", src, s)
	}
	a.nowFixed = true
	return t.UTC(), nil
}

// nowIsFixed reports whether --now or MCPTRAIL_NOW set the time.
func (a *app) nowIsFixed() bool { return a.nowFixed }

func isConfigError(err error) bool {
	var ce *config.Error
	return errors.As(err, &ce)
}

// dbPath is the absolute database path the command works on.
func (a *app) dbPath() string {
	p := a.cfg.Storage.Path
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// openStore opens the database file, or returns the daemon's when running
// inside it. The caller closes it with the returned function.
func (a *app) openStore(ctx context.Context, readOnly bool) (*analytics.Store, func(), error) {
	return a.openStoreWith(ctx, analytics.Options{ReadOnly: readOnly})
}

// openStoreWith is openStore with the store's memory options.
func (a *app) openStoreWith(ctx context.Context, opts analytics.Options) (*analytics.Store, func(), error) {
	if a.store != nil {
		return a.store, func() {}, nil
	}
	opts.SessionGap = a.cfg.Recommend.SessionGap
	opts.ArchiveDir = a.cfg.Storage.Archive
	opts.StoreArgs = a.cfg.Ingest.StoreArgs
	opts.NoHugePages = !a.cfg.Storage.HugePages
	s, err := analytics.Open(ctx, a.cfg.Storage.Path, opts)
	if err != nil {
		if errors.Is(err, analytics.ErrLocked) {
			return nil, nil, fmt.Errorf("%w: %s", err, a.lockedHint(ctx))
		}
		return nil, nil, err
	}
	if a.log.Enabled(ctx, slog.LevelDebug) { // HugePagesInUse asks jemalloc about every arena
		attrs := []any{"path", a.cfg.Storage.Path, "huge_pages", analytics.HugePagesInUse()}
		if err := goheap.Refusal(); err != nil { // a hint the store opens without
			attrs = append(attrs, "go_heap_huge_pages", err)
		}
		a.log.Debug("database opened", attrs...)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			a.log.Error("close database", "path", a.cfg.Storage.Path, "err", err)
		}
	}, nil
}
