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
		return a.recordRuns(ctx, store, scopeRuns(reports, source, nil))
	}
}

// pendingHistory is a finding history whose transaction commits while its
// caller goes on (recordFindingsBeside).
type pendingHistory struct {
	done chan error // the outcome, sent once; nil when nothing was recorded
	err  error      // the outcome, once received
}

// wait is the outcome of the history's commit, the same at every call.
func (p *pendingHistory) wait() error {
	if p == nil {
		return nil
	}
	if p.done != nil {
		p.err, p.done = <-p.done, nil
	}
	return p.err
}

// recordFindingsBeside is recordFindings returning as soon as every
// report's findings carry their history (recommend.AdvanceHistory, after
// which nothing changes the reports), the transaction committing on in
// the background: its commit (21–28 ms for 4 grants of 5M calls, its
// write-ahead log's fsync ~1 ms for a database at rest) and the write-back
// after it go on while the caller renders what it prints (2.3 MB of JSON,
// 28–42 ms). The caller waits for the commit (pending.wait) before it
// writes anything, so no output shows a history that failed to be
// recorded.
func (a *app) recordFindingsBeside(store *analytics.Store, source string) (func(context.Context, []*recommend.Report) error, *pendingHistory) {
	pending := &pendingHistory{}
	return func(ctx context.Context, reports []*recommend.Report) error {
		advanced := make(chan struct{})
		runs := scopeRuns(reports, source, func() { close(advanced) })
		if len(runs) == 0 {
			return nil
		}
		done := make(chan error, 1)
		go func() {
			err := a.recordRuns(ctx, store, runs)
			if err == nil {
				// The history into the database file now, beside the
				// rendering, where Close would do it at the exit (~14 ms
				// for 4 grants). Close checkpoints again and reports a
				// failure; the history is committed either way.
				if err := store.WriteBack(ctx); err != nil {
					a.log.Debug("checkpoint after the finding history", "err", err)
				}
			}
			done <- err
		}()
		select {
		case <-advanced:
			pending.done = done
			return nil
		case err := <-done:
			// Failed (or read-only) before the reports were final.
			return err
		}
	}, pending
}

// scopeRuns are the recorded runs of reports, made by source; advanced,
// when given, is called once the last of them has advanced its history
// (RecordRuns advances them in order).
func scopeRuns(reports []*recommend.Report, source string, advanced func()) []analytics.ScopeRun {
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
	if n := len(runs); n > 0 && advanced != nil {
		last := runs[n-1].Advance
		runs[n-1].Advance = func(h analytics.RunHistory) ([]analytics.FindingRecord, []analytics.FindingTransition) {
			defer advanced()
			return last(h)
		}
	}
	return runs
}

// recordRuns records runs in one transaction (analytics.Store.RecordRuns).
func (a *app) recordRuns(ctx context.Context, store *analytics.Store, runs []analytics.ScopeRun) error {
	if len(runs) == 0 {
		return nil
	}
	start := time.Now()
	defer func() {
		a.log.Debug("finding history recorded", "runs", len(runs), "took", time.Since(start).Round(time.Millisecond))
	}()
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
