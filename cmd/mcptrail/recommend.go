package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/recommend"
)

func newRecommendCmd(a *app) *cobra.Command {
	var server, grant, since, catalogFile, policyFile, format, out, failOn, baselineFile string
	var allowLossy bool
	cmd := &cobra.Command{
		Use:   "recommend --server S",
		Short: "Propose a least-privilege policy.json for a server from its call history",
		Long: `Analyse one server's call history and propose its policy: unused tools hidden,
rarely used risky tools behind approval, rate limits from observed peaks, polling
loops and retry storms, denied probes and unknown tools. Every finding carries its
evidence and confidence; the proposed policy is replayed over the same window.`,
		Example: `  mcptrail recommend --server proxmox-mcp
  mcptrail recommend --server proxmox-mcp --policy policy.json --format diff
  mcptrail recommend --server proxmox-mcp --out pr/ --fail-on high`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := recommend.ParseFormat(format); err != nil {
				return usageErrorf("%v", err)
			}
			if server == "" {
				return usageErrorf("--server is required: the MCP server to analyse (e.g. proxmox-mcp)")
			}
			if _, err := parseSince(since, 0, "30d, 2w or 72h"); err != nil {
				return err
			}
			if failOn != "" {
				if _, err := catalog.ParseSeverity(failOn); err != nil {
					return usageErrorf("--fail-on: %v", err)
				}
			}
			req := &api.RecommendRequest{Server: server, Grant: grant, Since: since, Format: format, Out: out,
				FailOn: failOn, Color: a.colorOut(), AllowLossy: allowLossy}
			var err error
			if catalogFile != "" {
				if req.Catalog, err = readInput("catalog", catalogFile); err != nil {
					return err
				}
			}
			if policyFile != "" {
				if req.Policy, err = readInput("policy", policyFile); err != nil {
					return err
				}
			}
			if baselineFile != "" {
				if req.Baseline, err = readInput("baseline", baselineFile); err != nil {
					return err
				}
			}
			if req.Settings, err = a.settings(); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runRecommend(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&server, "server", "", "MCP server to analyse (required)")
	fl.StringVar(&grant, "grant", "", "scope the analysis to one grant")
	fl.StringVar(&since, "since", "", "window of history to analyse (default recommend.window, 30d)")
	fl.StringVar(&catalogFile, "catalog", "", "MCP tools/list file of the server (imported, then used)")
	fl.StringVar(&policyFile, "policy", "", "the server's current policy.json (recorded, then used)")
	fl.StringVar(&format, "format", "text", "output: text, json, markdown, policy, diff or intercept")
	fl.StringVar(&out, "out", "", "also write the PR folder (policy.json, policy.diff, PR.md, recommendations.json) here")
	fl.BoolVar(&allowLossy, "allow-lossy", false, "with --format intercept: write the policy even when some rules cannot be carried over (listed on stderr and in its header)")
	fl.StringVar(&failOn, "fail-on", "", "exit 3 when a finding reaches this severity: info, low, medium, high, critical")
	fl.StringVar(&baselineFile, "baseline", "", "a previous recommendations.json: --fail-on counts only findings new or worse than there")
	return cmd
}

// runRecommend proposes the policy, writes the PR folder when asked and
// prints the chosen format.
func (a *app) runRecommend(ctx context.Context, store *analytics.Store, req *api.RecommendRequest) error {
	f, err := recommend.ParseFormat(req.Format)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if req.Server == "" {
		return usageErrorf("--server is required: the MCP server to analyse (e.g. proxmox-mcp)")
	}
	params := a.recommendParams()
	if params.Window, err = parseSince(req.Since, params.Window, "30d, 2w or 72h"); err != nil {
		return err
	}
	var threshold catalog.Severity
	if req.FailOn != "" {
		if threshold, err = catalog.ParseSeverity(req.FailOn); err != nil {
			return usageErrorf("--fail-on: %v", err)
		}
	}
	var base *baseline
	if req.Baseline != nil {
		if req.FailOn == "" {
			return usageErrorf("--baseline only changes what --fail-on counts: give --fail-on too")
		}
		if base, err = parseBaseline(req.Baseline, req.Server); err != nil {
			return err
		}
	}
	opts, err := a.recommendInputs(ctx, store, req.Server, req.Grant, req.Catalog, req.Policy)
	if err != nil {
		return err
	}
	opts.Params = params
	opts.Log = a.log
	opts.Target = f // limits in the target gateway's scope (recommend/intercept.go)
	report, err := recommend.Recommend(ctx, store.DB(), opts)
	if err != nil {
		if errors.Is(err, recommend.ErrNoCalls) {
			return err
		}
		return fmt.Errorf("recommend: %w", err)
	}
	if a.nowIsFixed() {
		report.GeneratedAt = a.now
	}
	if req.Out != "" {
		if err := recommend.WriteFolder(a.outPath(req.Out), report); err != nil {
			return err
		}
		a.log.Info("wrote the PR folder", "dir", req.Out)
	}
	write := func() error { return recommend.Write(a.stdout, report, f, req.Color) }
	if f == recommend.FormatIntercept {
		write = func() error { return recommend.WriteIntercept(a.stdout, a.stderr, report, req.AllowLossy) }
	}
	if err := write(); err != nil {
		return err
	}
	if threshold != "" {
		if n := reached(base.newOrWorse(report.Findings), threshold); n > 0 {
			return &exitError{code: exitFailOn, err: fmt.Errorf("%d finding(s) at or above %s%s (--fail-on)", n, threshold, base.describe())}
		}
	}
	return nil
}

func (a *app) recommendParams() recommend.Params {
	r := a.cfg.Recommend
	return recommend.Params{
		Window: r.Window, MinDays: r.MinDays, MinSessions: r.MinSessions, Headroom: r.Headroom, MinLimit: r.MinLimit,
		RareMaxCalls: r.RareMaxCalls, RareMaxDays: r.RareMaxDays, RareMaxSessionShare: r.RareMaxSessionShare, PollMinCalls: r.PollMinCalls,
		PollMaxInterval: r.PollMaxInterval, PollMaxCV: r.PollMaxCV, RunawayFactor: r.RunawayFactor, Grace: r.Grace,
	}
}

// reached counts unsuppressed findings at or above the threshold.
func reached(findings []recommend.Finding, threshold catalog.Severity) int {
	n := 0
	for _, f := range findings {
		if f.Suppressed == nil && catalog.Severity(f.Severity).Rank() >= threshold.Rank() {
			n++
		}
	}
	return n
}

// colorOut reports whether stdout is a terminal that takes colour.
func (a *app) colorOut() bool {
	f, ok := a.stdout.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && isatty.IsTerminal(f.Fd())
}
