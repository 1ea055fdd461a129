package backtest

import (
	"fmt"
	"io"
	"strings"

	"github.com/mcptrail/mcptrail/render"
)

// writeText renders a backtest for the terminal: each fold's scores, then
// their spread.
func writeText(w io.Writer, r *Result) error {
	t := render.Terminal
	fmt.Fprintf(w, "backtest of %s (%s): proposals %s\n", t(r.Server), t(r.scope()), r.Headline())
	for _, f := range r.Folds {
		fmt.Fprintf(w, "\nfold %d: train %s → %s, test %s → %s\n", f.Fold, f.TrainFrom.Format(stamp), f.TrainTo.Format(stamp),
			f.TestFrom.Format(stamp), f.TestTo.Format(stamp))
		if f.Note != "" {
			fmt.Fprintf(w, "  %s\n", f.Note)
		}
		for _, s := range f.Grants {
			writeScoreText(w, s)
		}
	}
	if len(r.Summary) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nsummary: mean (min–max) over the folds that scored each grant\n")
	for _, s := range r.Summary {
		fmt.Fprintf(w, "  %s: %d fold(s), %d draft(s)\n", t(s.Grant), s.Folds, s.Drafts)
		for _, m := range s.Metrics {
			fmt.Fprintf(w, "    %-22s %s\n", m.Name, m.spread())
		}
	}
	return nil
}

func writeScoreText(w io.Writer, s Score) {
	t := render.Terminal
	draft := ""
	if s.Draft {
		draft = ", draft"
	}
	fmt.Fprintf(w, "  %s (confidence %s%s; %d training calls, %d test calls)\n", t(s.Grant), s.Confidence, draft, s.TrainCalls, s.TestCalls)
	if s.Draft {
		// Why the proposal is a draft: the recommender's data gates.
		for _, g := range s.FailedGates {
			fmt.Fprintf(w, "    data gate failed: %s\n", t(g))
		}
	}
	if s.NoTestTraffic {
		fmt.Fprintf(w, "    no calls in the test window: not scored\n")
		return
	}
	fmt.Fprintf(w, "    under-privilege: %d of %d legitimate calls refused (%s)\n", s.Under.Calls, s.LegitimateCalls, pct(s.Under.Rate))
	for _, tu := range s.Under.ByTool {
		fmt.Fprintf(w, "      %s: %s\n", t(tu.Tool), t(tu.causes()))
	}
	for _, c := range s.Under.Examples {
		fmt.Fprintf(w, "      e.g. %s %s session %s agent %s → %s\n", c.TS.Format("2006-01-02 15:04:05"), t(c.Tool), t(c.Session), t(c.Agent), c.Replayed)
	}
	fmt.Fprintf(w, "    over-privilege: %d of %d allowed tools unused (%s)", s.Over.Count, s.Over.AllowedTools, pct(s.Over.Rate))
	if len(s.Over.Tools) > 0 {
		fmt.Fprintf(w, ": %s", t(strings.Join(s.Over.Tools, ", ")))
	}
	fmt.Fprintf(w, "\n    runaway polls cut: %d of %d; newly allowed: %d\n", s.RunawayPollsCut, s.RunawayPolls, s.NewlyAllowed)
}
