// Package policywatch is serve's regression watch (SPEC §5, Regressions):
// every interval it looks, for every scope (server and grant) of a server
// whose calls carry a policy version that appeared within regression.watch,
// for one that
// refuses tools the scope used before it (recommend.Regressions). A new
// regression is recorded in the finding history through a recorded
// recommender run of its scope (the Record hook, source "watch"), then
// published once as a JSON alert on mcptrail.alerts.<server>, logged and
// counted. The alerts table remembers what was sent, so a restart or a
// version that goes back and forth never sends one twice.
package policywatch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/idhash"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// Kind and state of a regression alert.
const (
	KindRegression = "regression"
	StateRaised    = "raised"
)

// DefaultInterval is how often the watch checks when Config.Interval is 0.
const DefaultInterval = time.Minute

// Config is regression.* with the subject alerts go to.
type Config struct {
	Interval      time.Duration
	SubjectPrefix string // an alert goes to it + the server ("mcptrail.alerts." when "")
	// Params carry the regression keys and recommend.window (how far back a
	// version's first call is looked for).
	Params recommend.Params
}

// Alert is the JSON published for a regression.
type Alert struct {
	ID              string           `json:"id"`
	Kind            string           `json:"kind"`
	State           string           `json:"state"`
	Server          string           `json:"server"`
	Grant           string           `json:"grant"`
	Tool            string           `json:"tool"`
	FindingID       string           `json:"finding_id"`
	PolicyVersion   string           `json:"policy_version"`
	PreviousVersion string           `json:"previous_version"`
	Since           time.Time        `json:"since"`
	Calls           int64            `json:"calls"`
	Refused         int64            `json:"refused"`
	RefusedBy       map[string]int64 `json:"refused_by"`
	Sessions        int64            `json:"sessions"`
	RefusedSessions int64            `json:"refused_sessions"`
	AgentsRefused   int64            `json:"agents_refused"`
	BaselineAllowed int64            `json:"baseline_allowed"`
	BaselineDays    int64            `json:"baseline_days"`
	// Vanished: no call since, where ExpectedCalls were due, and the
	// current policy refuses the tool.
	Vanished      bool                    `json:"vanished"`
	ExpectedCalls float64                 `json:"expected_calls"`
	FirstRefused  []recommend.RefusedCall `json:"first_refused"`
	// Revert is the finding's JSON Patch against the current policy; null
	// when no current policy is recorded.
	Revert json.RawMessage `json:"revert"`
	At     time.Time       `json:"at"`
}

// Watch checks the store every Config.Interval.
type Watch struct {
	Store  *analytics.Store
	Config Config
	// Record runs the recommender for one scope at now and records the run
	// in the finding history; it returns the scope's findings.
	Record func(ctx context.Context, server, grant string, now time.Time) ([]recommend.Finding, error)
	// Policy returns the current policy of a scope (nil when none is
	// recorded), which tells whether a tool that vanished is refused.
	Policy func(ctx context.Context, server, grant string) (*policy.Policy, error)
	// Publish sends one alert; the alert is recorded before it is sent.
	Publish func(subject string, data []byte) error
	Log     *slog.Logger
	Metrics *Metrics
	Now     func() time.Time // time.Now when nil
}

func (w *Watch) now() time.Time {
	if w.Now != nil {
		return w.Now().UTC()
	}
	return time.Now().UTC()
}

func (w *Watch) log() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}

// Run checks at once and then every interval until ctx ends. Errors are
// logged and counted; the next check tries again.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTicker(cmp.Or(w.Config.Interval, DefaultInterval))
	defer t.Stop()
	for {
		if err := w.Check(ctx); err != nil && ctx.Err() == nil {
			w.log().Error("policywatch: check", "err", err)
			w.Metrics.failed()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check looks at every scope of the servers with a policy version new
// within regression.watch and raises the regressions not raised before.
func (w *Watch) Check(ctx context.Context) error {
	now := w.now()
	p := w.Config.Params
	watch := cmp.Or(p.RegressionWatch, recommend.DefaultRegressionWatch)
	lookback := cmp.Or(p.Window, recommend.DefaultParams().Window)
	servers, err := recommend.ServersWithNewVersions(ctx, w.Store.DB(), now, lookback, w.Config.Params)
	if err != nil {
		return err
	}
	// A scope that fails (a recorded policy that no longer parses, its
	// record failing) is reported; the other scopes are checked all the
	// same, each interval.
	var errs []error
	for _, server := range servers {
		if ctx.Err() != nil {
			break
		}
		grants, _, err := recommend.Grants(ctx, w.Store.DB(), server, now.Add(-watch), now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(grants) == 0 {
			grants = []string{""}
		}
		for _, grant := range grants {
			if err := w.checkScope(ctx, server, grant, now, watch, lookback); err != nil {
				errs = append(errs, fmt.Errorf("%s%s: %w", server, grantPhrase(grant), err))
			}
		}
	}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return err
	}
	w.Metrics.checked()
	return nil
}

func grantPhrase(g string) string {
	if g == "" {
		return ""
	}
	return fmt.Sprintf(" (grant %q)", g)
}

func (w *Watch) checkScope(ctx context.Context, server, grant string, now time.Time, watch, lookback time.Duration) error {
	sc := recommend.RegressionScope{Server: server, Grant: grant, Now: now, Lookback: lookback}
	if w.Policy != nil {
		var err error
		if sc.Current, err = w.Policy(ctx, server, grant); err != nil {
			return fmt.Errorf("current policy: %w", err)
		}
	}
	regs, err := recommend.Regressions(ctx, w.Store.DB(), sc, w.Config.Params)
	if err != nil {
		return err
	}
	var due []recommend.Regression
	for _, r := range regs {
		if now.Sub(r.Since) > watch {
			continue // past the watch: recommend and report still show it
		}
		sent, err := w.Store.AlertSent(ctx, alertID(r))
		if err == nil && !sent {
			sent, err = w.Store.AlertSent(ctx, sinceAlertID(r))
		}
		if err != nil {
			return err
		}
		if !sent {
			due = append(due, r)
		}
	}
	if len(due) == 0 {
		return nil
	}
	// One recorded run of the scope puts the regressions in the finding
	// history (as open, or dismissed when suppressed) before anyone hears.
	findings, err := w.Record(ctx, server, grant, now)
	if err != nil {
		return fmt.Errorf("record the findings of %s: %w", server, err)
	}
	byID := map[string]recommend.Finding{}
	for _, f := range findings {
		byID[f.ID] = f
	}
	for _, r := range due {
		id := recommend.FindingID(recommend.KindRegression, server, grant, r.Tool)
		f, found := byID[id]
		if !found || f.Suppressed != nil {
			// Suppressed (dismissed), or no longer found by the full run:
			// remembered, so that it is not looked at again, never sent.
			if err := w.remember(ctx, r, now); err != nil {
				return err
			}
			continue
		}
		al := &Alert{ID: alertID(r), Kind: KindRegression, State: StateRaised, Server: server, Grant: grant, Tool: r.Tool,
			FindingID: id, PolicyVersion: r.Version, PreviousVersion: r.Previous, Since: r.Since, Calls: r.Calls, Refused: r.Refused,
			RefusedBy: map[string]int64{"hidden": r.Hidden, "denied": r.Denied, "approval_required": r.ApprovalRequired, "rate_limited": r.Rate},
			Sessions:  r.Sessions, RefusedSessions: r.RefusedSessions, AgentsRefused: r.Agents, BaselineAllowed: r.BaselineAllowed,
			BaselineDays: r.BaselineDays, Vanished: r.Vanished, ExpectedCalls: r.Expected, FirstRefused: r.Examples,
			Revert: f.Action.Patch, At: now}
		// Recorded before it is sent, as the alarm does: a failed publish
		// is logged and counted, never repeated as a duplicate.
		if err := w.remember(ctx, r, now); err != nil {
			return err
		}
		if err := w.send(al); err != nil {
			return err
		}
	}
	return nil
}

// remember records a regression's alert as sent (and ended: it has no
// second message).
func (w *Watch) remember(ctx context.Context, r recommend.Regression, now time.Time) error {
	_, err := w.Store.RecordAlert(ctx, analytics.AlertRecord{ID: alertID(r), Kind: KindRegression, Server: r.Server,
		Tool: r.Tool, First: r.Since, Polls: r.Refused, SentAt: now, EndedAt: &now})
	return err
}

func (w *Watch) send(al *Alert) error {
	data, err := json.Marshal(al)
	if err != nil {
		return err
	}
	w.log().Warn("policywatch: regression", "id", al.ID, "server", al.Server, "grant", al.Grant, "tool", al.Tool,
		"policy_version", al.PolicyVersion, "previous_version", al.PreviousVersion, "refused", al.Refused, "calls", al.Calls,
		"finding", al.FindingID)
	// Counted once recorded and logged, before it is published: whoever
	// receives the alert finds it counted (a failed publish is counted
	// among the errors besides).
	w.Metrics.raised()
	if w.Publish != nil {
		if err := w.Publish(cmp.Or(w.Config.SubjectPrefix, "mcptrail.alerts.")+ingest.SubjectToken(al.Server), data); err != nil {
			return fmt.Errorf("publish regression %s: %w", al.ID, err)
		}
	}
	return nil
}

// alertID is stable for one regression: server, grant, tool and version.
// Not the version's first call, which a late call under the version (a
// gateway replica that buffered through an outage) moves back: the same
// regression was raised again under a new id.
func alertID(r recommend.Regression) string {
	return idhash.Of(KindRegression, r.Server, r.Grant, r.Tool, r.Version)
}

// sinceAlertID is the id alerts had before alertID: with the version's
// first call. Still looked up, so that a regression raised under it is not
// raised again after an upgrade.
func sinceAlertID(r recommend.Regression) string {
	return idhash.Of(KindRegression, r.Server, r.Grant, r.Tool, r.Version, strconv.FormatInt(r.Since.UnixNano(), 10))
}

// Metrics are the watch's series on /metrics. A nil *Metrics counts nothing.
type Metrics struct {
	regressions, checks, errors prometheus.Counter
}

// NewMetrics makes the watch's metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		regressions: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_regressions_total",
			Help: "Regressions raised: a new policy version refuses a tool its grant used before (published on mcptrail.alerts.<server>)."}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_policywatch_checks_total",
			Help: "Checks of the regression watch that completed."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "mcptrail_policywatch_errors_total",
			Help: "Checks of the regression watch that failed (read, record or publish); the next one tries again."}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.regressions, m.checks, m.errors}
}

func (m *Metrics) raised() {
	if m != nil {
		m.regressions.Inc()
	}
}

func (m *Metrics) checked() {
	if m != nil {
		m.checks.Inc()
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.errors.Inc()
	}
}
