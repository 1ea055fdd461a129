package report

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/backtest"
	"github.com/mcptrail/mcptrail/recommend"
)

// Backtest is the report's backtest (SPEC §5 "Backtest"): the proposal the
// recommender would have made from its window ending where this report's
// window starts, replayed over the report's window.
type Backtest struct {
	// Note says why nothing was scored (no calls to train on); Result is
	// then nil.
	Note   string           `json:"note,omitempty"`
	Result *backtest.Result `json:"result,omitempty"`
}

// backtestWindow scores the proposal trained before the report's window
// on it. Too little history is a note, not a failed report. The runaway
// loops of a grant's test window are those of the report's own
// recommendation (recs) where it read the same window with the same
// parameters and inputs, which is where the report's window is the
// recommender's.
func backtestWindow(ctx context.Context, db *sql.DB, ropts recommend.GrantsOptions, train, window time.Duration, now time.Time, recs []*recommend.Report) (*Backtest, error) {
	res, err := backtest.Run(ctx, db, backtest.Options{Server: ropts.Server, Now: now, Train: train, Test: window,
		Folds: 1, Params: ropts.Params, Inputs: ropts.Inputs, GeneratedAt: ropts.GeneratedAt,
		KnownLoops: func(grant string, from, to time.Time) ([]recommend.RunawayLoop, bool) {
			for _, rec := range recs {
				if rec.Grant == grant && rec.Window.From.Equal(from) && rec.Window.To.Equal(to) {
					return rec.Runaway, true
				}
			}
			return nil, false
		}})
	switch {
	case errors.Is(err, recommend.ErrNoCalls):
		return &Backtest{Note: fmt.Sprintf("no calls in the %s before this report's window to train a proposal on", daysText(train.Hours()/24))}, nil
	case errors.Is(err, backtest.ErrNoTestTraffic):
		// The report's window has calls (or it would not be built), but none
		// of a grant the training window proposed for: the grants changed
		// (a credential rotated).
		return &Backtest{Note: "none of the grants proposed for in the window before this report's has calls in this window, so no proposal can be scored (the grants changed)"}, nil
	case err != nil:
		return nil, fmt.Errorf("report: backtest: %w", err)
	}
	return &Backtest{Result: res}, nil
}

// lead is the section's first sentences (plain text, for either renderer
// to escape): what was scored, or why nothing was.
func (bt *Backtest) lead() string {
	if bt.Result == nil {
		return "No backtest: " + bt.Note + "."
	}
	return "How the proposal made at the start of this window would have fared over it: " + bt.Result.Headline() +
		", this window. Under-privilege counts the legitimate calls it would have refused, over-privilege the tools it allows that nobody used."
}

// markdownBacktest writes the backtest section.
func markdownBacktest(b *strings.Builder, r *Report) {
	if r.Backtest == nil {
		return
	}
	fmt.Fprintf(b, "## Backtest\n\n%s\n", text(r.Backtest.lead()))
	if r.Backtest.Result == nil {
		b.WriteString("\n")
		return
	}
	b.WriteString("See SPEC §5 \"Backtest\", and `mcptrail backtest --folds N` for rolling windows.\n")
	for _, f := range r.Backtest.Result.Folds {
		backtest.WriteFoldMarkdown(b, f, "###")
	}
	b.WriteString("\n")
}

// htmlBacktest writes the backtest section.
func htmlBacktest(b *strings.Builder, r *Report) {
	if r.Backtest == nil {
		return
	}
	fmt.Fprintf(b, "<h2>Backtest</h2>\n<p class=\"note\">%s</p>\n", esc(r.Backtest.lead()))
	res := r.Backtest.Result
	if res == nil {
		return
	}
	b.WriteString("<table><tr><th>Grant</th><th>Confidence</th><th class=\"n\">Legitimate calls</th><th class=\"n\">Under-privilege</th><th>Refused tools</th><th class=\"n\">Over-privilege</th><th>Unused tools</th><th class=\"n\">Runaway polls cut</th><th class=\"n\">Newly allowed</th></tr>\n")
	for _, f := range res.Folds {
		for _, s := range f.Grants {
			conf := s.Confidence
			if s.Draft {
				conf += " (draft)"
			}
			if s.NoTestTraffic {
				fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td colspan=\"7\">no calls in this window</td></tr>\n", hcode(s.Grant), esc(conf))
				continue
			}
			refused := make([]string, len(s.Under.ByTool))
			for i, tu := range s.Under.ByTool {
				refused[i] = fmt.Sprintf("%s (%d)", hcode(tu.Tool), tu.Calls)
			}
			unused := make([]string, len(s.Over.Tools))
			for i, t := range s.Over.Tools {
				unused[i] = hcode(t)
			}
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s (%s)</td><td>%s</td><td class=\"n\">%d of %d (%s)</td><td>%s</td><td class=\"n\">%s of %s</td><td class=\"n\">%s</td></tr>\n",
				hcode(s.Grant), esc(conf), num(s.LegitimateCalls), num(s.Under.Calls), btRate(s.Under.Rate), strings.Join(refused, ", "),
				s.Over.Count, s.Over.AllowedTools, btRate(s.Over.Rate), strings.Join(unused, ", "), num(s.RunawayPollsCut), num(s.RunawayPolls), num(s.NewlyAllowed))
		}
	}
	b.WriteString("</table>\n")
}

// btRate renders a backtest rate, "n/a" when undefined.
func btRate(r *float64) string {
	if r == nil {
		return "n/a"
	}
	return pct(*r)
}
