package archive

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// Metrics count the daemon's archive runs.
type Metrics struct {
	runs, errors, written, deleted prometheus.Counter
}

// NewMetrics makes the archive's metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		runs: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_archive_runs_total",
			Help: "Archive runs (storage.archive) that completed, with or without errors."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_archive_errors_total",
			Help: "Archive failures: a run that could not start (folder missing) or a server's day that was not archived and verified; nothing of it was deleted."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_archive_rows_total",
			Help: "Calls written to the Parquet archive."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_archive_deleted_rows_total",
			Help: "Archived and verified calls deleted from the DuckDB file (storage.retention)."}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.errors, m.written, m.deleted}
}

func (m *Metrics) observe(res Result, err error) {
	if m == nil {
		return
	}
	m.runs.Inc()
	m.written.Add(float64(res.Written))
	m.deleted.Add(float64(res.Deleted))
	switch {
	case res.Failed > 0:
		m.errors.Add(float64(res.Failed))
	case err != nil:
		m.errors.Inc()
	}
}

// Daily runs the archive in the daemon: soon after start (a day sealed
// while it was down) and then a few minutes after each UTC midnight, when a
// day has just been sealed.
type Daily struct {
	Store     *analytics.Store
	Retention time.Duration
	Metrics   *Metrics
	Log       *slog.Logger
	// First is the wait before the first run (a minute when 0), so that a
	// starting daemon drains its backlog first.
	First time.Duration
}

// Run runs until ctx ends.
func (d *Daily) Run(ctx context.Context) {
	next := d.First
	if next <= 0 {
		next = time.Minute
	}
	wait.Daily(ctx, next, 5*time.Minute, func() { d.RunOnce(ctx, time.Now()) })
}

// RunOnce archives once at now, logs and counts the outcome.
func (d *Daily) RunOnce(ctx context.Context, now time.Time) Result {
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res, err := Run(ctx, d.Store, Options{Retention: d.Retention, Now: now, Log: log})
	d.Metrics.observe(res, err)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Error("archive", "written", res.Written, "deleted", res.Deleted, "failed_days", res.Failed, "err", err)
	case res.Written > 0 || res.Deleted > 0 || res.Late > 0:
		log.Info("archive", "written", res.Written, "deleted", res.Deleted, "days", len(res.Days), "late", res.Late)
	}
	return res
}
