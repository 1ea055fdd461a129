package backtest

import (
	"fmt"
	"io"
	"strings"

	"github.com/mcptrail/mcptrail/render"
)

// writeMarkdown renders a backtest for a PR or a report: a table per fold,
// the under-privilege behind it, then the spread.
func writeMarkdown(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "## Backtest of %s (%s)\n\n", render.MarkdownCode(r.Server), render.MarkdownText(r.scope()))
	fmt.Fprintf(w, "Proposals %s (SPEC §5 \"Backtest\").\n", r.Headline())
	for _, f := range r.Folds {
		WriteFoldMarkdown(w, f, "###")
	}
	WriteSummaryMarkdown(w, r.Summary)
	return nil
}

// WriteFoldMarkdown renders one fold under a heading of the given level.
func WriteFoldMarkdown(w io.Writer, f Fold, heading string) {
	fmt.Fprintf(w, "\n%s Fold %d: test %s → %s\n\n", heading, f.Fold, f.TestFrom.Format(stamp), f.TestTo.Format(stamp))
	fmt.Fprintf(w, "Trained on %s → %s.\n", f.TrainFrom.Format(stamp), f.TrainTo.Format(stamp))
	if f.Note != "" {
		fmt.Fprintf(w, "%s.\n", render.MarkdownText(f.Note))
	}
	if len(f.Grants) == 0 {
		return
	}
	fmt.Fprintf(w, "\n| grant | confidence | legitimate calls | under-privilege | over-privilege | runaway polls cut | newly allowed |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|\n")
	for _, s := range f.Grants {
		conf := s.Confidence
		if s.Draft {
			conf += " (draft)"
		}
		if s.NoTestTraffic {
			fmt.Fprintf(w, "| %s | %s | no test calls | | | | |\n", render.MarkdownCodeCell(s.Grant), conf)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d (%s) | %d of %d (%s) | %d of %d | %d |\n", render.MarkdownCodeCell(s.Grant), conf,
			s.LegitimateCalls, s.Under.Calls, pct(s.Under.Rate), s.Over.Count, s.Over.AllowedTools, pct(s.Over.Rate),
			s.RunawayPollsCut, s.RunawayPolls, s.NewlyAllowed)
	}
	for _, s := range f.Grants {
		if len(s.Under.ByTool) == 0 && len(s.Over.Tools) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", render.MarkdownCode(s.Grant))
		for _, tu := range s.Under.ByTool {
			fmt.Fprintf(w, "- refused %s: %s\n", render.MarkdownCode(tu.Tool), render.MarkdownText(tu.causes()))
		}
		if len(s.Over.Tools) > 0 {
			tools := make([]string, len(s.Over.Tools))
			for i, t := range s.Over.Tools {
				tools[i] = render.MarkdownCode(t)
			}
			fmt.Fprintf(w, "- allowed, unused: %s\n", strings.Join(tools, ", "))
		}
	}
}

// WriteSummaryMarkdown renders each grant's spread of scores over the folds.
func WriteSummaryMarkdown(w io.Writer, sum []Summary) {
	if len(sum) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Spread over the folds\n\nMean (min–max) over the folds that scored each grant.\n\n")
	fmt.Fprintf(w, "| grant | folds | drafts | under-privilege rate | over-privilege rate | runaway polls cut | newly allowed |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sum {
		cell := func(name string) string {
			for _, m := range s.Metrics {
				if m.Name == name {
					return m.spread()
				}
			}
			return "n/a"
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s |\n", render.MarkdownCodeCell(s.Grant), s.Folds, s.Drafts,
			cell("under_privilege_rate"), cell("over_privilege_rate"), cell("runaway_polls_cut"), cell("newly_allowed"))
	}
}
