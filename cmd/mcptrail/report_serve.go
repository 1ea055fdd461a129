package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/report"
	"github.com/mcptrail/mcptrail/server"
)

// reportSchedules validates the reports: section of the configuration; a
// bad entry is a configuration error (exit 2).
func (a *app) reportSchedules() ([]report.Schedule, error) {
	return report.ParseSchedules(a.cfg.Reports)
}

// scheduleReports makes the daemon run the schedules once it is ready, one
// run at a time, publishing each JSON report on its NATS connection, and
// adds their metrics to /metrics.
func (a *app) scheduleReports(store *analytics.Store, schedules []report.Schedule, opts *server.Options) {
	if len(schedules) == 0 {
		return
	}
	metrics := report.NewMetrics()
	opts.Collectors = append(opts.Collectors, metrics.Collectors()...)
	log := a.log.With("component", "report")
	addBackground(opts, func(ctx context.Context, nc *nats.Conn) {
		runner := &report.Runner{
			Store:  store,
			Inputs: a.reportInputs(store),
			Calls: func(ctx context.Context, now time.Time, window time.Duration) (*sql.DB, func(), error) {
				return a.reportCallsDB(ctx, store, now, window)
			},
			Metrics: metrics,
			Log:     log,
			Publish: natsPublish(nc),
		}
		run := func(ctx context.Context, s report.Schedule, now time.Time) error {
			defer store.Boost(ctx)()
			return runner.RunSchedule(ctx, s, now)
		}
		(&report.Scheduler{Schedules: schedules, Run: run, Log: log}).Start(ctx)
	})
}

// reportInputs selects a server's recommendation as of a run's time, as
// `mcptrail report` does.
func (a *app) reportInputs(store *analytics.Store) func(server string, now time.Time) recommend.GrantsOptions {
	return func(server string, now time.Time) recommend.GrantsOptions {
		at := *a
		at.now = now
		return at.grantsOptions(store, server, a.recommendParams(), "", "schedule", nil)
	}
}
