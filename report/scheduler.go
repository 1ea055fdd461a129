package report

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/internal/wait"
	"github.com/mcptrail/mcptrail/recommend"
)

// Metrics count scheduled runs for /metrics.
type Metrics struct {
	runs        *prometheus.CounterVec
	failures    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
}

// NewMetrics creates the report metrics; register Collectors() with the
// daemon's registry.
func NewMetrics() *Metrics {
	return &Metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_report_runs_total",
			Help: "Scheduled report runs started, by report (schedule name).",
		}, []string{"report"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_report_failures_total",
			Help: "Scheduled report runs with at least one server's report failed, by report.",
		}, []string{"report"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcptrail_report_duration_seconds",
			Help:    "Time a scheduled report run took, all its servers together, by report.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"report"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mcptrail_report_last_success_timestamp_seconds",
			Help: "When a scheduled report run last succeeded for every server (Unix time), by report.",
		}, []string{"report"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.runs, m.failures, m.duration, m.lastSuccess}
}

// Runner runs schedules against the daemon's store.
type Runner struct {
	Store *analytics.Store
	// Inputs selects a server's recommendation at a time as `mcptrail
	// recommend` makes it (parameters, and each grant's catalog, current
	// policy and suppressions).
	Inputs func(server string, now time.Time) recommend.GrantsOptions
	// Calls opens the pool a run reads the calls from, for a report window:
	// nil reads the store's; the daemon passes one that reads the archived
	// days too when the window reaches past storage.retention. done closes
	// it.
	Calls func(ctx context.Context, now time.Time, window time.Duration) (db *sql.DB, done func(), err error)
	// Publish sends a server's JSON report to a NATS subject; nil skips it.
	Publish func(subject string, data []byte) error
	Metrics *Metrics
	Log     *slog.Logger
}

func (r *Runner) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// RunSchedule runs one schedule at now: the report of each of its servers
// (every server with calls in the window when it names none). A server
// that fails is logged and the others still run; the error joins every
// failure.
func (r *Runner) RunSchedule(ctx context.Context, s Schedule, now time.Time) error {
	log := r.log().With("report", s.Name)
	start := time.Now()
	if r.Metrics != nil {
		r.Metrics.runs.WithLabelValues(s.Name).Inc()
	}
	err := r.runSchedule(ctx, s, now, log)
	took := time.Since(start)
	if err != nil && ctx.Err() != nil {
		log.Info("report run interrupted: the daemon is stopping", "took", took.Round(time.Millisecond))
		return ctx.Err()
	}
	if r.Metrics != nil {
		r.Metrics.duration.WithLabelValues(s.Name).Observe(took.Seconds())
		if err != nil {
			r.Metrics.failures.WithLabelValues(s.Name).Inc()
		} else {
			r.Metrics.lastSuccess.WithLabelValues(s.Name).Set(float64(time.Now().Unix()))
		}
	}
	if err != nil {
		log.Error("report run failed", "took", took.Round(time.Millisecond), "err", err)
	} else {
		log.Info("report run done", "took", took.Round(time.Millisecond))
	}
	return err
}

func (r *Runner) runSchedule(ctx context.Context, s Schedule, now time.Time, log *slog.Logger) error {
	calls, done := r.Store.DB(), func() {}
	if r.Calls != nil {
		var err error
		if calls, done, err = r.Calls(ctx, now, s.Window); err != nil {
			return err
		}
	}
	defer done()
	srvs := s.Servers
	if len(srvs) == 0 {
		var err error
		if srvs, err = Servers(ctx, calls, now.Add(-s.Window), now); err != nil {
			return err
		}
		if len(srvs) == 0 {
			return fmt.Errorf("%w (%s ending %s): nothing to report", errNoServers, s.Window, now.Format(time.RFC3339))
		}
	}
	var errs []error
	for _, srv := range srvs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := r.runServer(ctx, s, srv, now, calls, log); err != nil {
			log.Error("report failed", "server", srv, "err", err)
			errs = append(errs, fmt.Errorf("server %s: %w", srv, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Runner) runServer(ctx context.Context, s Schedule, server string, now time.Time, calls *sql.DB, log *slog.Logger) error {
	ropts := r.Inputs(server, now)
	res, err := Run(ctx, r.Store, RunOptions{
		Options: Options{Server: server, Window: s.Window, Now: now, GeneratedAt: now, Schedule: s.Name, Recommend: ropts, Log: log, Calls: calls},
		OutDir:  s.OutDir, Formats: s.Formats, Keep: s.Keep,
	})
	if err != nil {
		return err
	}
	c := res.Report.Changes
	log.Info("report written", "server", server, "dir", res.Dir, "calls", res.Report.Totals.Calls,
		"new_findings", len(c.NewFindings), "resolved_findings", len(c.ResolvedFindings), "pruned", len(res.Pruned))
	if r.Publish != nil {
		// Compact: a NATS message is bounded (the embedded server's max
		// payload), and indentation is for files people read.
		data, err := compactJSON(res.Report)
		if err != nil {
			return err
		}
		subject := s.SubjectFor(server)
		if err := r.Publish(subject, data); err != nil {
			return fmt.Errorf("publish to %s: %w", subject, err)
		}
		log.Info("report published", "server", server, "subject", subject, "bytes", len(data))
	}
	return nil
}

// stateFile keeps, in a schedule's out_dir, when the schedule last ran, so
// that a run missed while the daemon was down runs once at start.
const stateFile = ".mcptrail-schedule.json"

type state struct {
	Schedule string    `json:"schedule"`
	Spec     string    `json:"spec"`
	Armed    time.Time `json:"armed"`    // when a daemon first ran the schedule's clock
	LastRun  time.Time `json:"last_run"` // when the last run started
	LastOK   bool      `json:"last_ok"`
	LastErr  string    `json:"last_error,omitempty"`
}

func readState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

func writeState(dir string, st state) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// Scheduler runs schedules on their cron expressions, one run at a time.
type Scheduler struct {
	Schedules []Schedule
	// Run runs one schedule at a time (usually Runner.RunSchedule).
	Run func(ctx context.Context, s Schedule, now time.Time) error
	Log *slog.Logger

	// Clock, for tests: now and a sleep that returns false once ctx is done.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) bool
}

// maxSleep bounds one wait, so that a clock that jumps (a suspended
// machine, a corrected clock) delays a run by at most this much.
const maxSleep = time.Minute

// Start runs the schedules until ctx is done. Runs never overlap: they run
// one after the other, and fire times that pass during a run are run once
// after it. A schedule whose last recorded run (in its out_dir) is older
// than its latest fire time, a run missed while the daemon was down, runs
// once at start. A failing run is logged and counted; the others go on.
func (s *Scheduler) Start(ctx context.Context) {
	now, sleep := s.Now, s.Sleep
	if now == nil {
		now = func() time.Time { return time.Now() }
	}
	if sleep == nil {
		sleep = wait.Sleep
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(s.Schedules) == 0 {
		return
	}
	next := make([]time.Time, len(s.Schedules))
	var due []int
	t0 := now()
	for i, sc := range s.Schedules {
		l := log.With("report", sc.Name)
		st, err := readState(sc.OutDir)
		if err != nil {
			l.Warn("cannot read the schedule's last run; starting afresh", "err", err)
		}
		switch {
		case st == nil:
			if err := writeState(sc.OutDir, state{Schedule: sc.Name, Spec: sc.Spec, Armed: t0.UTC()}); err != nil {
				l.Error("cannot record the schedule in its out_dir (the report will fail too)", "out_dir", sc.OutDir, "err", err)
			}
		default:
			ref := st.LastRun
			if st.Armed.After(ref) {
				ref = st.Armed
			}
			// In the clock's zone, as the live schedule reads it: a spec
			// without CRON_TZ fires in the daemon's zone, and the state
			// keeps UTC times.
			if missed := sc.Cron.Next(ref.In(t0.Location())); !missed.IsZero() && !missed.After(t0) {
				l.Info("running a report missed while the daemon was down", "missed", missed.UTC().Format(time.RFC3339), "last_run", st.LastRun.UTC().Format(time.RFC3339))
				due = append(due, i)
			}
		}
		next[i] = sc.Cron.Next(t0)
		l.Info("report scheduled", "schedule", sc.Spec, "next", next[i].Format(time.RFC3339), "out_dir", sc.OutDir)
	}
	for ctx.Err() == nil {
		for len(due) > 0 && ctx.Err() == nil {
			i := due[0]
			due = due[1:]
			s.runOne(ctx, s.Schedules[i], now(), log)
		}
		if ctx.Err() != nil {
			return
		}
		t := now()
		idle := maxSleep
		for i, sc := range s.Schedules {
			if next[i].IsZero() {
				continue // never fires
			}
			if !next[i].After(t) {
				due = append(due, i)
				next[i] = sc.Cron.Next(t)
			}
			idle = min(idle, next[i].Sub(t))
		}
		if len(due) > 0 {
			continue
		}
		if !sleep(ctx, max(idle, time.Millisecond)) {
			return
		}
	}
}

func (s *Scheduler) runOne(ctx context.Context, sc Schedule, at time.Time, log *slog.Logger) {
	l := log.With("report", sc.Name)
	st, _ := readState(sc.OutDir)
	if st == nil {
		st = &state{Schedule: sc.Name, Spec: sc.Spec, Armed: at.UTC()}
	}
	st.Schedule, st.Spec, st.LastRun = sc.Name, sc.Spec, at.UTC()
	l.Info("report run started", "servers", serversText(sc.Servers), "window", sc.Window.String())
	err := s.Run(ctx, sc, at.UTC().Truncate(time.Second))
	if ctx.Err() != nil {
		return // interrupted: not recorded, so that the next start runs it again
	}
	st.LastOK, st.LastErr = err == nil, ""
	if err != nil {
		st.LastErr = err.Error()
	}
	if werr := writeState(sc.OutDir, *st); werr != nil {
		l.Error("cannot record the run in the out_dir", "out_dir", sc.OutDir, "err", werr)
	}
}

func serversText(s []string) string {
	if len(s) == 0 {
		return "all"
	}
	return strings.Join(s, ",")
}
