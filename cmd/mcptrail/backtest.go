package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/backtest"
	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/recommend"
)

// defaultTest is the backtest's test window when --test is not given.
const defaultTest = 7 * 24 * time.Hour

func newBacktestCmd(a *app) *cobra.Command {
	var server, grant, train, test, format string
	var folds int
	cmd := &cobra.Command{
		Use:   "backtest --server S [--grant G] [--train 30d] [--test 7d] [--folds N]",
		Short: "Score recommend's proposals on the traffic that followed their training window",
		Long: `Propose each grant's policy from a training window only, as recommend would
have then, and replay it over the test window that follows: under-privilege
(legitimate calls it would refuse, by tool and rule), over-privilege (tools it
allows that nobody used), runaway polls cut and newly allowed calls. With
--folds N, N rolling windows each shifted back by the test length, and the
spread of the scores (SPEC §5 "Backtest").`,
		Example: `  mcptrail backtest --server proxmox-mcp --train 30d --test 7d
  mcptrail backtest --server proxmox-mcp --grant ops-bot --folds 4 --format markdown`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if folds < 1 {
				return usageErrorf("--folds %d: want 1 or more rolling windows", folds)
			}
			req := &api.BacktestRequest{Server: server, Grant: grant, Train: train, Test: test, Folds: folds, Format: format}
			if _, err := backtestOptions(req, 0); err != nil {
				return err
			}
			var err error
			if req.Settings, err = a.settings(); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runBacktest(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&server, "server", "", "MCP server to backtest (required)")
	fl.StringVar(&grant, "grant", "", "only this grant (default: every grant of the training window)")
	fl.StringVar(&train, "train", "", "training window (default recommend.window, 30d)")
	fl.StringVar(&test, "test", "", "test window that follows it (default 7d)")
	fl.IntVar(&folds, "folds", 1, "rolling (train, test) windows, each shifted back by --test")
	fl.StringVar(&format, "format", "text", "output: text, json or markdown")
	return cmd
}

// backtestOptions checks a request's flags and turns them into options;
// train is the default training window.
func backtestOptions(req *api.BacktestRequest, train time.Duration) (backtest.Options, error) {
	o := backtest.Options{Server: req.Server, Grant: req.Grant, Folds: req.Folds}
	if _, err := backtest.ParseFormat(req.Format); err != nil {
		return o, usageErrorf("%v", err)
	}
	if req.Server == "" {
		return o, usageErrorf("--server is required: the MCP server to backtest (e.g. proxmox-mcp)")
	}
	if req.Folds < 0 { // 0 is the default, 1
		return o, usageErrorf("--folds %d: want 1 or more rolling windows", req.Folds)
	}
	var err error
	if o.Train, err = windowFlag("--train", req.Train, train, "30d, 2w or 720h"); err != nil {
		return o, err
	}
	if o.Test, err = windowFlag("--test", req.Test, defaultTest, "7d, 1w or 48h"); err != nil {
		return o, err
	}
	return o, nil
}

// windowFlag reads a duration flag, naming it and the fix when bad.
func windowFlag(name, value string, def time.Duration, example string) (time.Duration, error) {
	if value == "" {
		return def, nil
	}
	d, err := duration.Parse(value)
	if err != nil || d <= 0 {
		return 0, usageErrorf("%s %q: want a positive duration such as %s", name, value, example)
	}
	return d, nil
}

// runBacktest backtests the request's server and prints the chosen format.
func (a *app) runBacktest(ctx context.Context, store *analytics.Store, req *api.BacktestRequest) error {
	params := a.recommendParams()
	o, err := backtestOptions(req, params.Window)
	if err != nil {
		return err
	}
	g := a.grantsOptions(store, req.Server, params, "", "", nil)
	o.Now, o.Params, o.Inputs, o.GeneratedAt = a.now, params, g.Inputs, g.GeneratedAt
	calls, done, err := a.callsDB(ctx, store, a.now, backtestReach(o))
	if err != nil {
		return err
	}
	defer done()
	res, err := backtest.Run(ctx, calls, o)
	if err != nil {
		return err // it names the flag to change
	}
	f, _ := backtest.ParseFormat(req.Format)
	return backtest.Write(a.stdout, res, f)
}

// backtestReach is how far back a backtest reads: its folds' test windows
// and the training window before the first.
func backtestReach(o backtest.Options) time.Duration {
	return o.Train + time.Duration(max(o.Folds, 1))*o.Test
}

// appendBacktest adds the latest backtest to a PR folder's PR.md: the
// proposal the recommender would have made one test window ago (the
// default, a week), scored on the calls since, so a reviewer sees how
// such proposals hold up before merging this one.
func (a *app) appendBacktest(ctx context.Context, store *analytics.Store, dir, server, grant string, params recommend.Params) error {
	g := a.grantsOptions(store, server, params, "", "", nil)
	o := backtest.Options{Server: server, Grant: grant, Now: a.now, Train: params.Window,
		Test: defaultTest, Folds: 1, Params: params, Inputs: g.Inputs, GeneratedAt: g.GeneratedAt}
	calls, done, err := a.callsDB(ctx, store, a.now, backtestReach(o))
	if err != nil {
		return err
	}
	defer done()
	res, err := backtest.Run(ctx, calls, o)
	var b bytes.Buffer
	switch {
	case errors.Is(err, recommend.ErrNoCalls), errors.Is(err, backtest.ErrNoTestTraffic):
		fmt.Fprintf(&b, "\n## Backtest\n\nNo backtest: the history has no calls in the %.0f days before the last %.0f to train a proposal on, or none since.\n",
			params.Window.Hours()/24, defaultTest.Hours()/24)
	case err != nil:
		return err
	default:
		b.WriteString("\n")
		if err := backtest.Write(&b, res, "markdown"); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "PR.md"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		_ = f.Close()
		return fmt.Errorf("--out: %w", err)
	}
	return f.Close()
}
