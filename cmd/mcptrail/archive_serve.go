package main

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/archive"
	"github.com/mcptrail/mcptrail/server"
)

// startArchive makes the daemon archive sealed days daily (storage.archive)
// and apply storage.retention, counting rows and failures on /metrics.
func (a *app) startArchive(store *analytics.Store, opts *server.Options) {
	if a.cfg.Storage.Archive == "" {
		return
	}
	metrics := archive.NewMetrics()
	opts.Collectors = append(opts.Collectors, metrics.Collectors()...)
	d := &archive.Daily{Store: store, Retention: a.cfg.Storage.Retention, Metrics: metrics, Log: a.log.With("component", "archive")}
	addBackground(opts, func(ctx context.Context, _ *nats.Conn) { d.Run(ctx) })
}
