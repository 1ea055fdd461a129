package main

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/alarm"
	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/server"
)

// startAlarm makes the daemon follow polling loops and retry storms while
// they run (alerts.*), once it is ready, beside whatever else runs in the
// background, publishing its alerts on the daemon's NATS connection; and
// adds its metrics to /metrics.
func (a *app) startAlarm(store *analytics.Store, opts *server.Options) {
	if !a.cfg.Alerts.Enabled {
		return
	}
	metrics := alarm.NewMetrics()
	opts.Collectors = append(opts.Collectors, metrics.Collectors()...)
	cfg := alarm.Config{Interval: a.cfg.Alerts.Interval, RunawayPolls: a.cfg.Alerts.RunawayPolls,
		SubjectPrefix: a.cfg.Alerts.SubjectPrefix, Params: a.recommendParams()}
	al := &alarm.Alarm{Store: store, Config: cfg, Log: a.log.With("component", "alarm"), Metrics: metrics}
	// Each stored batch wakes the alarm, so an alert follows the call that
	// crossed the threshold by about a second, not by alerts.interval.
	opts.Stored = al.Wake
	addBackground(opts, func(ctx context.Context, nc *nats.Conn) {
		al.Publish = natsPublish(nc)
		al.Run(ctx)
	})
}

// addBackground runs run beside whatever else the daemon runs in the
// background once it is ready (scheduled reports, the alarm, the watch).
func addBackground(opts *server.Options, run func(ctx context.Context, nc *nats.Conn)) {
	before := opts.Background
	opts.Background = func(ctx context.Context, nc *nats.Conn) {
		var wg sync.WaitGroup
		if before != nil {
			wg.Go(func() { before(ctx, nc) })
		}
		wg.Go(func() { run(ctx, nc) })
		wg.Wait()
	}
}

// natsPublish publishes on nc and waits until the server has the message.
func natsPublish(nc *nats.Conn) func(subject string, data []byte) error {
	return func(subject string, data []byte) error {
		if err := nc.Publish(subject, data); err != nil {
			return err
		}
		return nc.FlushTimeout(5 * time.Second)
	}
}
