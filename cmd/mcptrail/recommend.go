package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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
			if _, err := parseFailOn(failOn); err != nil {
				return err
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
	fl.StringVar(&failOn, "fail-on", "", "exit 3 when a finding reaches this severity (info, low, medium, high, critical) or, with widen, when the proposal widens access; both: high,widen")
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
	gate, err := parseFailOn(req.FailOn)
	if err != nil {
		return err
	}
	if req.Baseline != nil {
		if req.FailOn == "" {
			return usageErrorf("--baseline only changes what --fail-on counts: give --fail-on too")
		}
		if gate.base, err = parseBaseline(req.Baseline, req.Server); err != nil {
			return err
		}
	}
	report, set, history, err := a.recommendAll(ctx, store, req.Server, req.Grant, req.Catalog, req.Policy, params, f)
	if err != nil {
		return err
	}
	// What goes to stdout is rendered while the finding history commits,
	// and written (as the PR folder) once it has.
	var out bytes.Buffer
	if set != nil {
		if f == "policy" || f == "intercept" {
			if err := history.wait(); err != nil {
				return err
			}
			return usageErrorf("--format %s prints one policy, and %s has %d grants in the window (%s): pass --grant G, or --out DIR for every grant's policy.json",
				f, req.Server, len(set.Grants), strings.Join(set.Grants, ", "))
		}
		if err := recommend.WriteSet(&out, set, f, req.Color); err != nil {
			return errors.Join(err, history.wait())
		}
		if err := history.wait(); err != nil {
			return err
		}
		if req.Out != "" {
			if err := recommend.WriteSetFolder(a.outPath(req.Out), set); err != nil {
				return err
			}
			if err := a.appendBacktest(ctx, store, a.outPath(req.Out), req.Server, req.Grant, params); err != nil {
				return err
			}
			a.log.Info("wrote the PR folder", "dir", req.Out, "grants", len(set.Grants))
		}
		if _, err := a.stdout.Write(out.Bytes()); err != nil {
			return err
		}
		return gate.check(set.Reports()...)
	}
	if f != recommend.FormatIntercept { // which warns on stderr as it writes
		if err := recommend.Write(&out, report, f, req.Color); err != nil {
			return errors.Join(err, history.wait())
		}
	}
	if err := history.wait(); err != nil {
		return err
	}
	if req.Out != "" {
		if err := recommend.WriteFolder(a.outPath(req.Out), report); err != nil {
			return err
		}
		if err := a.appendBacktest(ctx, store, a.outPath(req.Out), req.Server, req.Grant, params); err != nil {
			return err
		}
		a.log.Info("wrote the PR folder", "dir", req.Out)
	}
	if f == recommend.FormatIntercept {
		if err := recommend.WriteIntercept(a.stdout, a.stderr, report, req.AllowLossy); err != nil {
			return err
		}
	} else if _, err := a.stdout.Write(out.Bytes()); err != nil {
		return err
	}
	return gate.check(report)
}

// recommendAll proposes a server's policy (recommend.RecommendGrants): for
// one grant (or a server whose calls carry none) a single report, otherwise
// one report per grant seen in the window (a set). --catalog and --policy
// files are recorded first, the policy for the grant asked or, without one,
// as the server-wide policy (for every grant without one of its own). The
// run's finding history commits in the background (recordFindingsBeside):
// the caller renders, then waits for it before writing anything.
func (a *app) recommendAll(ctx context.Context, store *analytics.Store, server, grant string, catalogFile, policyFile *api.File,
	params recommend.Params, target string) (*recommend.Report, *recommend.Set, *pendingHistory, error) {
	given, err := a.recordGivenPolicy(ctx, store, server, grant, catalogFile, policyFile)
	if err != nil {
		return nil, nil, nil, err
	}
	o := a.grantsOptions(store, server, params, target, "recommend", given)
	o.Grant = grant
	var history *pendingHistory
	o.Record, history = a.recordFindingsBeside(store, "recommend")
	calls, done, err := a.callsDB(ctx, store, a.now, params.Window)
	if err != nil {
		return nil, nil, nil, err
	}
	defer done()
	r, set, err := recommend.RecommendGrants(ctx, calls, o)
	if err != nil && !errors.Is(err, recommend.ErrNoCalls) {
		err = fmt.Errorf("recommend: %w", err)
	}
	if set != nil && policyFile != nil && grant == "" {
		a.log.Info("recorded the given policy as the server-wide policy: the current policy of every grant without one of its own",
			"server", server, "grants", len(set.Grants))
	}
	return r, set, history, err
}

// grantsOptions select a server's recommendation for every grant, as
// `recommend` and `report` (and the daemon's scheduled reports) make it:
// each grant's recorded inputs (recommendInputs) as of a.now, for the
// target format ("" for the report). Every run is recorded in the finding
// history as made by source (recommend, report, schedule), which marks its
// findings new or changed.
func (a *app) grantsOptions(store *analytics.Store, server string, params recommend.Params, target, source string, given *givenPolicy) recommend.GrantsOptions {
	o := recommend.GrantsOptions{Server: server, Now: a.now, Params: params,
		Inputs: func(ctx context.Context, g string) (recommend.Options, error) {
			opts, err := a.recommendInputs(ctx, store, server, g, given)
			// A grant's query timings, told apart from the others' running beside them.
			opts.Log = a.log.With("grant", g)
			opts.Target = target // limits in the target gateway's scope (recommend/intercept.go)
			return opts, err
		},
		Record: a.recordFindings(store, source), Log: a.log}
	if a.nowIsFixed() {
		o.GeneratedAt = a.now
	}
	return o
}

// failOn is what --fail-on stops CI for: findings at or above a severity,
// and (widen) any proposal that widens access; with a baseline, only those
// new or worse than there.
type failOn struct {
	threshold catalog.Severity
	widen     bool
	base      *baseline
}

// parseFailOn reads --fail-on: a severity, widen, or both separated by a comma.
func parseFailOn(s string) (failOn, error) {
	var f failOn
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
		case strings.EqualFold(item, "widen"):
			f.widen = true
		default:
			sev, err := catalog.ParseSeverity(item)
			if err != nil {
				return f, usageErrorf("--fail-on: %v, or widen", err)
			}
			f.threshold = sev
		}
	}
	return f, nil
}

// check returns the --fail-on exit error when the reports reach it.
func (f failOn) check(reports ...*recommend.Report) error {
	var msgs []string
	if f.threshold != "" {
		n := 0
		for _, r := range reports {
			n += reached(f.base.newOrWorse(r.Findings), f.threshold)
		}
		if n > 0 {
			msgs = append(msgs, fmt.Sprintf("%d finding(s) at or above %s", n, f.threshold))
		}
	}
	if f.widen {
		n := 0
		for _, r := range reports {
			for _, fd := range f.base.newOrWorse(r.Findings) {
				if fd.Suppressed == nil && fd.Kind == recommend.KindLoosening {
					n++
				}
			}
		}
		if n > 0 {
			msgs = append(msgs, fmt.Sprintf("%d unsuppressed loosening(s): the proposal widens access", n))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &exitError{code: exitFailOn, err: fmt.Errorf("%s%s (--fail-on)", strings.Join(msgs, "; "), f.base.describe())}
}

func (a *app) recommendParams() recommend.Params {
	r, g := a.cfg.Recommend, a.cfg.Regression
	return recommend.Params{
		Window: r.Window, MinDays: r.MinDays, MinSessions: r.MinSessions, Headroom: r.Headroom, MinLimit: r.MinLimit,
		RareMaxCalls: r.RareMaxCalls, RareMaxDays: r.RareMaxDays, RareMaxSessionShare: r.RareMaxSessionShare, PollMinCalls: r.PollMinCalls,
		PollMaxInterval: r.PollMaxInterval, PollMaxCV: r.PollMaxCV, RunawayFactor: r.RunawayFactor, Grace: r.Grace,
		RegressionWatch: g.Watch, RegressionBaseline: g.Baseline, RegressionMinRefused: g.MinRefused, RegressionMinShare: g.MinShare,
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
