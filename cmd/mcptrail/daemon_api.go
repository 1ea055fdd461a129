package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/config"
)

// daemonBackend answers the typed API inside `mcptrail serve` with the
// functions the CLI runs on the file, against the daemon's open store, so
// that the output is the same byte for byte.
type daemonBackend struct {
	store *analytics.Store
	cfg   config.Config // the daemon's; a request's settings replace recommend.*
	db    string
	level slog.Level
}

func newDaemonBackend(a *app, store *analytics.Store) *daemonBackend {
	db, err := filepath.Abs(store.Path())
	if err != nil {
		db = store.Path()
	}
	level := slog.LevelInfo
	if os.Getenv("MCPTRAIL_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return &daemonBackend{store: store, cfg: *a.cfg, db: filepath.Clean(db), level: level}
}

func (b *daemonBackend) Database() string { return b.db }

// Run executes one request. Its log lines go to the client's standard error,
// as they would on the file.
func (b *daemonBackend) Run(ctx context.Context, req api.Request, out api.Output) int {
	defer b.store.Boost(ctx)()
	cfg := b.cfg
	a := &app{stdout: out.Stdout, stderr: out.Stderr, store: b.store, cfg: &cfg, outDir: out.Dir, truncate: out.Truncate,
		log: newLogger(out.Stderr, b.level), now: time.Now().UTC()}
	if now := req.CommonFields().Now; now != nil {
		a.now, a.nowFixed = now.UTC(), true
	}
	var err error
	switch r := req.(type) {
	case *api.QueryRequest:
		a.cmdUsage = "mcptrail query"
		err = a.runQuery(ctx, b.store, r)
	case *api.QueriesRequest:
		a.cmdUsage = "mcptrail queries"
		err = a.runQueries(r)
	case *api.RecommendRequest:
		a.cmdUsage = "mcptrail recommend"
		a.applySettings(r.Settings)
		err = a.runRecommend(ctx, b.store, r)
	case *api.ReplayRequest:
		a.cmdUsage = "mcptrail replay"
		a.applySettings(r.Settings)
		err = a.runReplay(ctx, b.store, r)
	case *api.BacktestRequest:
		a.cmdUsage = "mcptrail backtest"
		a.applySettings(r.Settings)
		err = a.runBacktest(ctx, b.store, r)
	case *api.ReportRequest:
		a.cmdUsage = "mcptrail report"
		a.applySettings(r.Settings)
		err = a.runReportRequest(ctx, b.store, r)
	case *api.CatalogImportRequest:
		a.cmdUsage = "mcptrail catalog import"
		a.cfg.Recommend.Overrides = ""
		err = a.runCatalogImport(ctx, b.store, r)
	case *api.CatalogListRequest:
		a.cmdUsage = "mcptrail catalog list"
		err = a.runCatalogList(ctx, b.store, r)
	case *api.SuppressRequest:
		a.cmdUsage = "mcptrail suppress"
		err = a.runSuppress(ctx, b.store, r)
	case *api.UnsuppressRequest:
		a.cmdUsage = "mcptrail unsuppress"
		err = a.runUnsuppress(ctx, b.store, r)
	case *api.SuppressionsRequest:
		a.cmdUsage = "mcptrail suppressions"
		err = a.runSuppressions(ctx, b.store, r)
	case *api.PoliciesRequest:
		a.cmdUsage = "mcptrail policies"
		err = a.runPolicies(ctx, b.store, r)
	case *api.ForgetRequest:
		a.cmdUsage = "mcptrail policies forget"
		err = a.runForget(ctx, b.store, r)
	case *api.FindingsRequest:
		a.cmdUsage = "mcptrail findings"
		err = a.runFindings(ctx, b.store, r)
	default:
		err = fmt.Errorf("the daemon has no command for %T", req)
	}
	return a.finish(err)
}
