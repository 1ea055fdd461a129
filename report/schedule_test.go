package report

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/mcptrail/mcptrail/config"
	"github.com/mcptrail/mcptrail/recommend"
)

// parseYAML reads a reports: section the way viper hands it over.
func parseYAML(t *testing.T, text string) ([]Schedule, error) {
	t.Helper()
	var doc struct {
		Reports []map[string]any `yaml:"reports"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(text), &doc))
	return ParseSchedules(doc.Reports)
}

func TestParseSchedules(t *testing.T) {
	s, err := parseYAML(t, `
reports:
  - name: weekly
    schedule: "CRON_TZ=Europe/Berlin 0 8 * * MON"
    servers: [proxmox-mcp, github-mcp]
    window: 7d
    formats: [markdown, html]
    out_dir: ./reports/weekly
    subject: security.reports.{server}
    keep: 12
  - name: daily
    schedule: "@daily"
    servers: all
    out_dir: ./reports/daily
`)
	require.NoError(t, err)
	require.Len(t, s, 2)
	w := s[0]
	assert.Equal(t, "weekly", w.Name)
	assert.Equal(t, "CRON_TZ=Europe/Berlin 0 8 * * MON", w.Spec)
	assert.Equal(t, []string{"proxmox-mcp", "github-mcp"}, w.Servers)
	assert.Equal(t, week, w.Window)
	assert.Equal(t, []string{"markdown", "html"}, w.Formats)
	assert.Equal(t, "reports/weekly", w.OutDir)
	assert.Equal(t, "security.reports.proxmox-mcp", w.SubjectFor("proxmox-mcp"))
	assert.Equal(t, 12, w.Keep)
	// Monday 8:00 in Berlin is 7:00 UTC in winter.
	assert.Equal(t, time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), w.Cron.Next(fixedNow).UTC())

	d := s[1]
	assert.Empty(t, d.Servers, "all servers")
	assert.Equal(t, DefaultWindow, d.Window)
	assert.Equal(t, Formats, d.Formats)
	assert.Equal(t, DefaultKeep, d.Keep)
	assert.Equal(t, "mcptrail.reports.a_b", d.SubjectFor("a.b"), "a server name is one subject token")
	assert.Equal(t, fixedNow.Add(24*time.Hour), d.Cron.Next(fixedNow))

	defaults, err := parseYAML(t, "reports:\n  - {name: x, schedule: '0 * * * *'}\n")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("mcptrail-reports", "x"), defaults[0].OutDir)

	none, err := ParseSchedules(nil)
	require.NoError(t, err)
	assert.Empty(t, none)
}

func TestParseSchedulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"bad cron", `{name: weekly, schedule: "0 8 * *"}`,
			[]string{`config: reports[0] (weekly).schedule = "0 8 * *": expected exactly 5 fields, found 4`, `CRON_TZ=Europe/Berlin 0 8 * * MON`}},
		{"bad time zone", `{name: weekly, schedule: "CRON_TZ=Mars/Olympus 0 8 * * *"}`,
			[]string{`reports[0] (weekly).schedule = "CRON_TZ=Mars/Olympus 0 8 * * *": provided bad location Mars/Olympus`}},
		{"out of range", `{name: weekly, schedule: "61 8 * * *"}`, []string{`reports[0] (weekly).schedule = "61 8 * * *"`, "above maximum"}},
		{"never fires", `{name: feb30, schedule: "0 0 30 2 *"}`, []string{`reports[0] (feb30).schedule = "0 0 30 2 *": never fires`}},
		{"missing schedule", `{name: weekly}`, []string{`reports[0] (weekly).schedule = (missing): required: a cron expression`}},
		{"missing name", `{schedule: "@daily"}`, []string{`reports[0].name = (missing): a name for the report`}},
		{"unknown format", `{name: weekly, schedule: "@weekly", formats: [markdown, pdf]}`,
			[]string{`reports[0] (weekly).formats = [markdown pdf]: unknown format "pdf": allowed formats are markdown, json, html`}},
		{"bad window", `{name: weekly, schedule: "@weekly", window: lastweek}`,
			[]string{`reports[0] (weekly).window = "lastweek": a positive duration such as 24h, 7d or 2w`}},
		{"negative keep", `{name: weekly, schedule: "@weekly", keep: -1}`, []string{`reports[0] (weekly).keep = -1: how many reports to keep`}},
		{"wildcard subject", `{name: weekly, schedule: "@weekly", subject: "reports.>"}`,
			[]string{`reports[0] (weekly).subject = "reports.>": a wildcard cannot be published to`}},
		{"servers not a list", `{name: weekly, schedule: "@weekly", servers: {a: 1}}`, []string{`reports[0] (weekly).servers = map[a:1]: a list of MCP server names, or "all"`}},
		{"unknown key", `{name: weekly, schedule: "@weekly", cron: "@daily"}`,
			[]string{`reports[0] (weekly).cron = "@daily": unknown key: a report takes formats, keep, name, out_dir, schedule, servers, subject, window`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseYAML(t, "reports:\n  - "+tc.yaml+"\n")
			require.Error(t, err)
			var ce *config.Error
			require.ErrorAs(t, err, &ce, "a configuration error exits 2")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	t.Run("every problem at once, and clashes between reports", func(t *testing.T) {
		_, err := parseYAML(t, `
reports:
  - {name: a, schedule: "@daily", out_dir: ./r}
  - {name: a, schedule: "@daily", out_dir: r/}
  - {name: c, schedule: "bad"}
`)
		require.Error(t, err)
		lines := strings.Split(err.Error(), "\n")
		assert.Len(t, lines, 3, err.Error())
		assert.Contains(t, err.Error(), `reports[1] (a).name = "a": already used by reports[0]`)
		assert.Contains(t, err.Error(), `reports[1] (a).out_dir = "r": already the folder of report a: give each report its own folder`)
		assert.Contains(t, err.Error(), `reports[2] (c).schedule = "bad"`)
	})
}

// fakeClock drives the scheduler through simulated time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	c.advance(d)
	return true
}

func mustSchedule(t *testing.T, name, spec, dir string) Schedule {
	t.Helper()
	s, err := ParseSchedules([]map[string]any{{"name": name, "schedule": spec, "out_dir": dir}})
	require.NoError(t, err)
	return s[0]
}

type runRecord struct {
	name string
	at   time.Time
}

// runScheduler runs the scheduler on a fake clock until stop says so (or a
// simulated deadline passes) and returns the runs in order.
func runScheduler(t *testing.T, clock *fakeClock, schedules []Schedule, took time.Duration, stop func([]runRecord) bool) []runRecord {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs []runRecord
	var running atomic.Int32
	deadline := clock.now().Add(60 * 24 * time.Hour)
	s := &Scheduler{
		Schedules: schedules, Now: clock.now,
		Sleep: func(ctx context.Context, d time.Duration) bool {
			if clock.now().After(deadline) {
				cancel()
			}
			return clock.sleep(ctx, d)
		},
		Run: func(ctx context.Context, sc Schedule, now time.Time) error {
			require.Equal(t, int32(1), running.Add(1), "runs never overlap")
			defer running.Add(-1)
			if stop(runs) {
				// Enough: this run is the daemon stopping mid-run.
				cancel()
				return ctx.Err()
			}
			runs = append(runs, runRecord{sc.Name, now})
			clock.advance(took)
			if sc.Name == "failing" {
				return errors.New("boom")
			}
			return nil
		},
	}
	s.Start(ctx)
	return runs
}

func TestSchedulerCatchUp(t *testing.T) {
	wednesday := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	weekly := "0 8 * * MON"

	t.Run("first start: nothing was missed, the clock is armed", func(t *testing.T) {
		dir := t.TempDir()
		clock := &fakeClock{t: wednesday}
		runs := runScheduler(t, clock, []Schedule{mustSchedule(t, "weekly", weekly, dir)}, time.Second,
			func(r []runRecord) bool { return len(r) == 1 })
		require.Len(t, runs, 1)
		assert.Equal(t, time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), runs[0].at, "the next Monday, not at start")
		st, err := readState(dir)
		require.NoError(t, err)
		assert.Equal(t, wednesday, st.Armed)
		assert.Equal(t, runs[0].at, st.LastRun)
		assert.True(t, st.LastOK)
	})

	t.Run("a run missed while down runs once at start", func(t *testing.T) {
		dir := t.TempDir()
		// Last ran two Mondays ago: two fire times were missed.
		require.NoError(t, writeState(dir, state{Schedule: "weekly", Spec: weekly, Armed: wednesday.Add(-60 * 24 * time.Hour),
			LastRun: time.Date(2026, 11, 23, 8, 0, 1, 0, time.UTC), LastOK: true}))
		clock := &fakeClock{t: wednesday}
		runs := runScheduler(t, clock, []Schedule{mustSchedule(t, "weekly", weekly, dir)}, time.Second,
			func(r []runRecord) bool { return len(r) == 2 })
		require.Len(t, runs, 2)
		assert.Equal(t, wednesday, runs[0].at, "caught up once, at start")
		assert.Equal(t, time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), runs[1].at, "then on schedule")
	})

	t.Run("nothing missed: no run at start", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, writeState(dir, state{Schedule: "weekly", Spec: weekly, LastRun: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), LastOK: true}))
		clock := &fakeClock{t: wednesday}
		runs := runScheduler(t, clock, []Schedule{mustSchedule(t, "weekly", weekly, dir)}, time.Second,
			func(r []runRecord) bool { return len(r) == 1 })
		require.Len(t, runs, 1)
		assert.Equal(t, time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), runs[0].at)
	})

	t.Run("a daemon off UTC reads the last run in its own zone", func(t *testing.T) {
		// A spec without CRON_TZ fires in the daemon's zone; the state keeps
		// UTC times. Ran today at 08:00 Berlin (07:00Z), restarted at 09:30
		// Berlin: nothing was missed (read in UTC, 08:00Z would have been).
		berlin, err := time.LoadLocation("Europe/Berlin")
		require.NoError(t, err)
		dir := t.TempDir()
		daily := "0 8 * * *"
		require.NoError(t, writeState(dir, state{Schedule: "daily", Spec: daily, Armed: wednesday.Add(-60 * 24 * time.Hour),
			LastRun: time.Date(2026, 12, 2, 7, 0, 1, 0, time.UTC), LastOK: true}))
		clock := &fakeClock{t: time.Date(2026, 12, 2, 9, 30, 0, 0, berlin)}
		runs := runScheduler(t, clock, []Schedule{mustSchedule(t, "daily", daily, dir)}, time.Second,
			func(r []runRecord) bool { return len(r) == 1 })
		require.Len(t, runs, 1)
		assert.True(t, runs[0].at.Equal(time.Date(2026, 12, 3, 8, 0, 0, 0, berlin)), "the next day's 08:00 in Berlin, not at start: %s", runs[0].at)
	})

	t.Run("a failed run is recorded and the schedule goes on", func(t *testing.T) {
		dir := t.TempDir()
		clock := &fakeClock{t: wednesday}
		runs := runScheduler(t, clock, []Schedule{mustSchedule(t, "failing", "0 * * * *", dir)}, time.Second,
			func(r []runRecord) bool { return len(r) == 3 })
		require.Len(t, runs, 3)
		st, err := readState(dir)
		require.NoError(t, err)
		assert.False(t, st.LastOK)
		assert.Equal(t, "boom", st.LastErr)
	})
}

func TestSchedulerRunsNeverOverlap(t *testing.T) {
	start := time.Date(2026, 12, 2, 12, 0, 30, 0, time.UTC)
	clock := &fakeClock{t: start}
	every := []Schedule{
		mustSchedule(t, "a", "* * * * *", t.TempDir()),
		mustSchedule(t, "b", "* * * * *", t.TempDir()),
	}
	// Each run takes 150 s while both fire every minute.
	runs := runScheduler(t, clock, every, 150*time.Second, func(r []runRecord) bool { return len(r) == 6 })
	require.Len(t, runs, 6)
	var names []string
	for i, r := range runs {
		names = append(names, r.name)
		if i > 0 {
			assert.GreaterOrEqual(t, r.at.Sub(runs[i-1].at), 150*time.Second, "each run starts after the previous ended")
		}
	}
	assert.Equal(t, []string{"a", "b", "a", "b", "a", "b"}, names, "fire times passed during a run run once, in turn")
}

func TestRunnerRunsEveryServerAndCountsFailures(t *testing.T) {
	store := proxmoxStore(t)
	out := t.TempDir()
	metrics := NewMetrics()
	var published []string
	r := &Runner{
		Store: store,
		Inputs: func(server string, now time.Time) recommend.GrantsOptions {
			return recommend.GrantsOptions{Params: recommend.DefaultParams()}
		},
		Publish: func(subject string, data []byte) error {
			published = append(published, subject)
			_, err := ParseJSON(data)
			return err
		},
		Metrics: metrics,
	}
	s := mustSchedule(t, "weekly", "@weekly", out)
	s.Servers = []string{"nope-mcp", server}
	s.Formats = []string{"json"}
	err := r.RunSchedule(context.Background(), s, fixedNow)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `server nope-mcp: no calls for server "nope-mcp"`)
	assert.FileExists(t, filepath.Join(ServerDir(out, server), Stamp(fixedNow), JSONFile), "the other server's report is written")
	assert.Equal(t, []string{"mcptrail.reports.proxmox-mcp"}, published)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Collectors()...)
	assert.Equal(t, 1.0, metricValue(t, reg, "mcptrail_report_runs_total", "weekly"))
	assert.Equal(t, 1.0, metricValue(t, reg, "mcptrail_report_failures_total", "weekly"))

	s.Servers = nil // every server with calls
	require.NoError(t, r.RunSchedule(context.Background(), s, fixedNow.Add(time.Hour)))
	assert.Equal(t, 2.0, metricValue(t, reg, "mcptrail_report_runs_total", "weekly"))
	assert.Equal(t, 1.0, metricValue(t, reg, "mcptrail_report_failures_total", "weekly"))
	assert.Equal(t, 2.0, metricValue(t, reg, "mcptrail_report_duration_seconds", "weekly"), "two runs timed")
	assert.Positive(t, metricValue(t, reg, "mcptrail_report_last_success_timestamp_seconds", "weekly"))

	empty := &Runner{Store: emptyStore(t), Inputs: r.Inputs, Metrics: metrics}
	err = empty.RunSchedule(context.Background(), mustSchedule(t, "empty", "@weekly", t.TempDir()), fixedNow)
	require.ErrorIs(t, err, errNoServers)

	// With Calls, a run reads the calls (and finds the servers) in the pool
	// it gives, as the daemon gives one that reads the archived days.
	called, calledAt := time.Duration(0), time.Time{}
	fromPool := &Runner{Store: emptyStore(t), Inputs: r.Inputs, Calls: func(_ context.Context, now time.Time, window time.Duration) (*sql.DB, func(), error) {
		called, calledAt = window, now
		return store.DB(), func() {}, nil
	}}
	poolOut := t.TempDir()
	require.NoError(t, fromPool.RunSchedule(context.Background(), mustSchedule(t, "pool", "@weekly", poolOut), fixedNow))
	assert.Equal(t, 7*24*time.Hour, called, "asked for the schedule's window")
	assert.Equal(t, fixedNow, calledAt, "ending when the run starts, not when the daemon did")
	assert.DirExists(t, ServerDir(poolOut, server), "the server found and reported from the pool's calls")

	t.Run("an output folder that cannot be written", func(t *testing.T) {
		blocked := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(blocked, nil, 0o644))
		s := mustSchedule(t, "blocked", "@weekly", blocked)
		err := r.RunSchedule(context.Background(), s, fixedNow)
		require.Error(t, err)
		assert.Contains(t, err.Error(), blocked)
		assert.Equal(t, 1.0, metricValue(t, reg, "mcptrail_report_failures_total", "blocked"))
	})
}

// metricValue reads a counter's or gauge's value, or a histogram's count,
// for one report label.
func metricValue(t *testing.T, reg *prometheus.Registry, name, report string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "report" && l.GetValue() == report {
					switch {
					case m.GetCounter() != nil:
						return m.GetCounter().GetValue()
					case m.GetGauge() != nil:
						return m.GetGauge().GetValue()
					case m.GetHistogram() != nil:
						return float64(m.GetHistogram().GetSampleCount())
					}
				}
			}
		}
	}
	return 0
}
