// Package backtest scores least-privilege proposals against the future: it
// proposes each grant's policy from a training window only (as `recommend`
// would have then), replays the proposal over the test window that follows
// with the recommender's own replay, and reports the privilege errors of
// SPEC §5 "Backtest": under-privilege (legitimate calls the proposal would
// refuse), over-privilege (allowed tools nobody used), runaway polls cut and
// newly allowed calls, over one or several rolling folds.
package backtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mcptrail/mcptrail/recommend"
)

// ErrNoTestTraffic means that no fold's test window holds a call of the
// scope: there is nothing to score.
var ErrNoTestTraffic = errors.New("no calls in the test window")

// Run backtests a server's proposals (SPEC §5 "Backtest").
func Run(ctx context.Context, db *sql.DB, o Options) (*Result, error) {
	if o.Folds <= 0 {
		o.Folds = 1
	}
	if o.Examples <= 0 {
		o.Examples = 5
	}
	if o.Train <= 0 || o.Test <= 0 {
		return nil, fmt.Errorf("backtest: the training and test windows must be positive")
	}
	res := &Result{Server: o.Server, Grant: o.Grant, GeneratedAt: o.GeneratedAt,
		TrainDays: o.Train.Hours() / 24, TestDays: o.Test.Hours() / 24}
	if res.GeneratedAt.IsZero() {
		res.GeneratedAt = time.Now().UTC()
	}
	now := o.Now.UTC()
	traffic := false
	for i := o.Folds - 1; i >= 0; i-- {
		testTo := now.Add(-time.Duration(i) * o.Test)
		f := Fold{Fold: o.Folds - i, TestTo: testTo, TestFrom: testTo.Add(-o.Test), Grants: []Score{}}
		f.TrainTo, f.TrainFrom = f.TestFrom, f.TestFrom.Add(-o.Train)
		reports, err := propose(ctx, db, o, f.TrainTo)
		switch {
		case errors.Is(err, recommend.ErrNoCalls) && i > 0:
			// An older fold may start before the history does.
			f.Note = "no calls to train on in this fold's training window"
		case errors.Is(err, recommend.ErrNoCalls):
			return nil, fmt.Errorf("%w for server %q%s in the training window %s → %s: check the name (mcptrail query calls_by_tool lists servers) or widen --train",
				recommend.ErrNoCalls, o.Server, grantPhrase(o.Grant), f.TrainFrom.Format(time.RFC3339), f.TrainTo.Format(time.RFC3339))
		case err != nil:
			return nil, fmt.Errorf("backtest: fold %d: %w", f.Fold, err)
		}
		scores, err := scoreAll(ctx, db, o, reports, f.TestFrom, f.TestTo)
		if err != nil {
			return nil, fmt.Errorf("backtest: fold %d, %w", f.Fold, err)
		}
		for _, s := range scores {
			traffic = traffic || !s.NoTestTraffic
			f.Grants = append(f.Grants, s)
		}
		res.Folds = append(res.Folds, f)
	}
	if !traffic {
		last := res.Folds[len(res.Folds)-1]
		return nil, fmt.Errorf("%w: server %q%s has no call between %s and %s%s, so no proposal can be scored: the latest test window ends at --now; set it to a time with calls in the --test before it",
			ErrNoTestTraffic, o.Server, grantPhrase(o.Grant), res.Folds[0].TestFrom.Format(time.RFC3339), last.TestTo.Format(time.RFC3339),
			map[bool]string{true: " (in any fold's test window)", false: ""}[o.Folds > 1])
	}
	res.Summary = summarize(res.Folds)
	return res, nil
}

// grantsAtOnce is how many grants' proposals scoreAll scores at once:
// one alone leaves a core idle between its queries, as a recommendation
// does (recommend.RecommendGrants).
const grantsAtOnce = 2

// scoreAll scores every grant's proposal over the test window (from, to],
// in the order of reports.
func scoreAll(ctx context.Context, db *sql.DB, o Options, reports []*recommend.Report, from, to time.Time) ([]Score, error) {
	scores := make([]Score, len(reports))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(grantsAtOnce)
	for i, r := range reports {
		eg.Go(func() error {
			s, err := score(ectx, db, o, r, from, to)
			if err != nil {
				return fmt.Errorf("grant %q: %w", r.Grant, err)
			}
			scores[i] = s
			return nil
		})
	}
	return scores, eg.Wait()
}

func grantPhrase(g string) string {
	if g == "" {
		return ""
	}
	return fmt.Sprintf(" (grant %q)", g)
}

// propose makes the proposals of the training window ending at to, one per
// grant, exactly as recommend would have made them then.
func propose(ctx context.Context, db *sql.DB, o Options, to time.Time) ([]*recommend.Report, error) {
	p := o.Params
	p.Window = o.Train
	r, set, err := recommend.RecommendGrants(ctx, db, recommend.GrantsOptions{Server: o.Server, Grant: o.Grant, Now: to, Params: p,
		GeneratedAt: o.GeneratedAt, Inputs: o.Inputs, ProposalOnly: true})
	if err != nil {
		return nil, err
	}
	if set != nil {
		return set.Reports(), nil
	}
	return []*recommend.Report{r}, nil
}
