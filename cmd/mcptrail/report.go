package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/report"
)

func newReportCmd(a *app) *cobra.Command {
	var server, since, format, out string
	cmd := &cobra.Command{
		Use:   "report [--server S] [--since 7d] [--format markdown,json,html] [--out DIR]",
		Short: "Report what agents did, what changed and what to tighten, per server",
		Long: `Report on one MCP server (or every server with calls in the window): volume by
day and decision, top tools and agents, latency percentiles, error and denial
rates, what changed since the previous report, and the recommendation with its
replay impact (as mcptrail recommend makes it: one policy per grant, each with
its loosenings and both sides of its replay), with charts.

With --out DIR the report is written to DIR/<server>/<window end>/ (report.json
always, report.md with its charts as SVG files beside it, report.html as one
self-contained page, and the PR-ready folder pr/, one pr/<grant>/ per grant),
compared with the newest report already in DIR/<server>/; without --out one
format is printed. Scheduled reports (the reports: section of config.yaml) run
the same report from mcptrail serve.`,
		Example: `  mcptrail report --server proxmox-mcp --out reports/
  mcptrail report --server proxmox-mcp --format json
  mcptrail report --since 30d --format html > report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := reportFormats(format, out); err != nil {
				return err
			}
			if _, err := parseSince(since, 0, "7d, 2w or 72h"); err != nil {
				return err
			}
			req := &api.ReportRequest{Server: server, Since: since, Format: format, Out: out}
			var err error
			if out != "" {
				if req.Previous, err = previousReports(out, a.now); err != nil {
					return err
				}
			}
			if req.Settings, err = a.settings(); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runReportRequest(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&server, "server", "", "MCP server to report on (default: every server with calls in the window)")
	fl.StringVar(&since, "since", "", "window of history to report on (default 7d)")
	fl.StringVar(&format, "format", "", "markdown, json, html, or several comma-separated with --out (default markdown; all three with --out)")
	fl.StringVar(&out, "out", "", "write the reports under this folder (DIR/<server>/<window end>/) instead of printing one")
	return cmd
}

// reportFormats reads --format: one format without --out, any with it.
func reportFormats(format, out string) ([]string, error) {
	formats, err := report.ParseFormats(format)
	if err != nil {
		return nil, usageErrorf("--format: %v", err)
	}
	if out == "" {
		switch {
		case format == "":
			formats = []string{"markdown"}
		case len(formats) > 1:
			return nil, usageErrorf("--format %s: several formats need --out DIR to write them; without --out one format is printed", format)
		}
	}
	return formats, nil
}

// runReportRequest checks a report request and runs it.
func (a *app) runReportRequest(ctx context.Context, store *analytics.Store, req *api.ReportRequest) error {
	formats, err := reportFormats(req.Format, req.Out)
	if err != nil {
		return err
	}
	window, err := parseSince(req.Since, report.DefaultWindow, "7d, 2w or 72h")
	if err != nil {
		return err
	}
	return a.runReport(ctx, store, req.Server, window, formats, req.Out)
}

// reportCallsDB is the pool a report over window, ending at now, reads the
// calls from: it reaches as far back as the report's backtest, which
// trains on recommend.window before the report's window, and covers its
// recommendation (recommend.window, or the report's when longer) (callsDB).
func (a *app) reportCallsDB(ctx context.Context, store *analytics.Store, now time.Time, window time.Duration) (*sql.DB, func(), error) {
	return a.callsDB(ctx, store, now, window+a.recommendParams().Window)
}

// runReport builds the reports and writes or prints them.
func (a *app) runReport(ctx context.Context, store *analytics.Store, server string, window time.Duration, formats []string, out string) error {
	calls, done, err := a.reportCallsDB(ctx, store, a.now, window)
	if err != nil {
		return err
	}
	defer done()
	servers := []string{server}
	if server == "" {
		if servers, err = report.Servers(ctx, calls, a.now.Add(-window), a.now); err != nil {
			return err
		}
		if len(servers) == 0 {
			return fmt.Errorf("%w between %s and %s: ingest events first or widen --since", report.ErrNoCalls,
				a.now.Add(-window).Format(time.RFC3339), a.now.Format(time.RFC3339))
		}
		if out == "" && formats[0] == "html" && len(servers) > 1 {
			return usageErrorf("--format html prints one page: pick a --server (%s) or write every server's report with --out DIR", strings.Join(servers, ", "))
		}
	}
	var generated time.Time
	if a.nowIsFixed() {
		generated = a.now
	}
	var reports []*report.Report
	for _, srv := range servers {
		ropts := a.grantsOptions(store, srv, a.recommendParams(), "", "report", nil)
		opts := report.Options{Server: srv, Window: window, Now: a.now, GeneratedAt: generated, Recommend: ropts, Log: a.log, Calls: calls}
		if out != "" {
			res, err := report.Run(ctx, store, report.RunOptions{Options: opts, OutDir: a.outPath(out), Formats: formats})
			if err != nil {
				return reportError(err)
			}
			res.Dir = a.outLabel(out, res.Dir)
			printWritten(a, res)
			continue
		}
		r, err := report.Build(ctx, store, opts)
		if err != nil {
			return reportError(err)
		}
		reports = append(reports, r)
	}
	if out != "" {
		return nil
	}
	switch formats[0] {
	case "json":
		var data []byte
		var err error
		if server != "" {
			data, err = report.JSON(reports[0])
		} else {
			data, err = report.JSONList(reports)
		}
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(data)
		return err
	case "html":
		charts, err := report.Charts(reports[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprint(a.stdout, report.HTML(reports[0], charts))
		return err
	}
	for i, r := range reports {
		if i > 0 {
			fmt.Fprint(a.stdout, "\n---\n\n")
		}
		fmt.Fprint(a.stdout, report.Markdown(r, nil))
	}
	return nil
}

func reportError(err error) error {
	if errors.Is(err, recommend.ErrNoCalls) {
		return err
	}
	return fmt.Errorf("report: %w", err)
}

// printWritten lists what a report run wrote.
func printWritten(a *app, res *report.Result) {
	r := res.Report
	c := r.Changes
	fmt.Fprintf(a.stdout, "%s: %s calls", r.Server, recommend.GroupDigits(r.Totals.Calls))
	if c.Previous != nil {
		fmt.Fprintf(a.stdout, "; since %s: findings %d new, %d resolved, %d suppressed, %d reopened; tools %d new, %d no longer used; suppression changes %d",
			c.Previous.Folder, len(c.NewFindings), len(c.ResolvedFindings), len(c.SuppressedFindings), len(c.ReopenedFindings),
			len(c.NewTools), len(c.GoneTools), len(c.SuppressionChanges))
	} else {
		fmt.Fprint(a.stdout, "; first report in this folder")
	}
	fmt.Fprintf(a.stdout, "\n  %s\n", res.Dir)
	charts := 0
	for _, f := range res.Files {
		if strings.HasPrefix(f, report.ChartsDir+"/") {
			charts++
			continue
		}
		fmt.Fprintf(a.stdout, "    %s\n", f)
	}
	if charts > 0 {
		fmt.Fprintf(a.stdout, "    %s/ (%d charts)\n", report.ChartsDir, charts)
	}
	for _, p := range res.Pruned {
		fmt.Fprintf(a.stdout, "  removed %s (keep)\n", p)
	}
}
