package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// recordFindings records a run of the recommender in the finding history
// (SPEC §5): one recorded run per scope, made by source (recommend, report,
// schedule), the scopes of one recommendation in one transaction. Every run
// that opened the database writable records; a read-only database cannot,
// and the warning says so rather than leaving the history silently behind.
// Any other failure fails the run.
func (a *app) recordFindings(store *analytics.Store, source string) func(context.Context, []*recommend.Report) error {
	return func(ctx context.Context, reports []*recommend.Report) error {
		start := time.Now()
		defer func() {
			a.log.Debug("finding history recorded", "runs", len(reports), "took", time.Since(start).Round(time.Millisecond))
		}()
		var runs []analytics.ScopeRun
		for _, r := range reports {
			if r == nil {
				continue
			}
			runs = append(runs, analytics.ScopeRun{
				Run: analytics.RecommendRun{Server: r.Server, Grant: r.Grant, At: r.Window.To, WindowFrom: r.Window.From,
					WindowTo: r.Window.To, Source: source},
				Advance: func(h analytics.RunHistory) ([]analytics.FindingRecord, []analytics.FindingTransition) {
					return recommend.AdvanceHistory(r, h)
				},
			})
		}
		if len(runs) == 0 {
			return nil
		}
		err := store.RecordRuns(ctx, runs)
		if errors.Is(err, analytics.ErrReadOnly) {
			a.log.Warn("the finding history was not recorded: the database is open read-only",
				"server", runs[0].Run.Server)
			return nil
		}
		if err != nil {
			return fmt.Errorf("finding history: %w", err)
		}
		return nil
	}
}
