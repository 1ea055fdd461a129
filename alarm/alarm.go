// Package alarm is serve's live loop alarm: it follows the calls as they are
// stored and sends an alert while a polling loop runs away or a retry storm
// goes on (SPEC §2, Alerts). Each evaluation reads the calls stored since the
// last one, extends each session's current run (consecutive calls of one tool
// with the same arguments, each within recommend.poll_max_interval of the
// previous one, as recommend's runs), and sends one "running" alert when a
// run crosses the runaway threshold and one "ended" alert when it is over.
// Sent alerts are recorded in the store, so that a restarted daemon rebuilds
// the open runs from the stored calls and never sends an alert twice.
package alarm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/idhash"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// DefaultSubjectPrefix is where alerts are published: prefix + server.
const DefaultSubjectPrefix = "mcptrail.alerts."

// Kinds and states of an alert.
const (
	KindRunawayLoop = "runaway_loop"
	KindRetryStorm  = "retry_storm"
	StateRunning    = "running"
	StateEnded      = "ended"
)

// Defaults of Config.
const (
	DefaultInterval = 10 * time.Second
	// DefaultFloor is the threshold of a server with too little history to
	// derive one: fewer than MinLoops loops in the window.
	DefaultFloor = 30
	MinLoops     = 20
	// DefaultMinGap is the least time between two evaluations that Wake
	// brings forward: a busy ingest wakes the alarm after every batch.
	DefaultMinGap = time.Second
	// DefaultRefresh is how often derived thresholds are computed again.
	DefaultRefresh = time.Hour
	// maxLookback bounds how far back the alarm reads calls: at start (the
	// runs in progress) and on every evaluation (older calls that arrive
	// late, such as a backfill, are history, not a loop running now).
	maxLookback = 24 * time.Hour
)

// Config is alerts.* with the recommend.* keys that define runs.
type Config struct {
	Interval time.Duration // alerts.interval
	// RunawayPolls is the absolute threshold (alerts.runaway_polls); 0
	// derives one per server: Params.RunawayFactor × the p95 loop length
	// over Params.Window, or Floor with fewer than MinLoops loops.
	RunawayPolls int
	// SubjectPrefix is alerts.subject_prefix: an alert goes to it + server;
	// DefaultSubjectPrefix when "".
	SubjectPrefix string
	MinGap        time.Duration // DefaultMinGap when 0
	Floor         int           // DefaultFloor when 0
	Refresh       time.Duration // DefaultRefresh when 0
	Params        recommend.Params
}

// Alert is the JSON published on mcptrail.alerts.<server>.
type Alert struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	State     string    `json:"state"`
	Server    string    `json:"server"`
	Grant     string    `json:"grant"`
	Agent     string    `json:"agent"`
	Session   string    `json:"session"`
	Tool      string    `json:"tool"`
	StartTool string    `json:"start_tool"`
	ArgsHash  string    `json:"args_hash"`
	Polls     int64     `json:"polls"`
	Errors    int64     `json:"errors"`
	Rate      float64   `json:"rate_per_min"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	Threshold float64   `json:"threshold_polls"`
	// ThresholdSource: "config" (alerts.runaway_polls), "derived" or "floor".
	ThresholdSource string `json:"threshold_source"`
	// Limit is the current policy's limit on the tool, or null.
	Limit *Limit    `json:"limit"`
	At    time.Time `json:"at"`
}

// Limit is a policy limit that would stop the loop.
type Limit struct {
	Grant   string `json:"grant"` // the policy's grant ("" for the server-wide one)
	Counter string `json:"counter"`
	Window  string `json:"window"`
	Max     int    `json:"max"`
	Scope   string `json:"scope"`
}

// maxFutureSkew is how far ahead of the alarm's clock a call may be
// stamped before it counts as a stray stamp when a call stamped right
// follows it (read).
const maxFutureSkew = time.Minute

// Alarm evaluates the store every Config.Interval.
type Alarm struct {
	Store  *analytics.Store
	Config Config
	// Publish sends one alert; the alert is recorded before it is sent.
	Publish func(subject string, data []byte) error
	Log     *slog.Logger
	Metrics *Metrics         // may be nil
	Now     func() time.Time // the clock; time.Now when nil

	once       sync.Once
	wake       chan struct{}
	tracks     map[trackKey]*track
	watermark  time.Time // the newest ingested_at read
	thresholds map[string]threshold
	computedAt time.Time
	// ended are runs that a call of another tool or arguments (or a
	// stray stamp) ended since the last emit: those alerted, to be closed,
	// and those that may have crossed the threshold unseen, between two
	// evaluations, to get both their messages then.
	ended []*run
	// reopen are the alerts open at Start, by id, while Start rebuilds the
	// runs: a rebuilt run that was alerted takes its alert back, so that
	// it ends (with its calls' figures) like any other.
	reopen map[string]analytics.AlertRecord
}

type trackKey struct{ server, session string }

// track is one session's latest call and current run.
type track struct {
	prevTool string
	prevTS   time.Time
	stored   time.Time // the ingested_at of its newest call
	cur      *run
}

// run is consecutive calls of one tool with the same arguments in one
// session, each within poll_max_interval of the previous one.
type run struct {
	server, session, tool, argsHash, grant, agent string
	startTool                                     string
	startGap                                      time.Duration
	first, last                                   time.Time
	polls, errors                                 int64
	lastErr                                       bool
	lastIngest                                    time.Time // of the newest call
	alert                                         *Alert    // sent (or found sent) for this run
}

type threshold struct {
	polls  float64
	source string
}

func (a *Alarm) now() time.Time {
	if a.Now != nil {
		return a.Now().UTC()
	}
	return time.Now().UTC()
}

func (a *Alarm) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Log
}

// Wake asks for an evaluation before the interval is up: the ingest loop
// calls it after each stored batch. It never blocks.
func (a *Alarm) Wake() {
	select {
	case a.wakeC() <- struct{}{}:
	default:
	}
}

func (a *Alarm) wakeC() chan struct{} {
	a.once.Do(func() { a.wake = make(chan struct{}, 1) })
	return a.wake
}

// subject is the server's alert subject, its name written as in the audit
// subjects (one token).
func (a *Alarm) subject(server string) string {
	return cmp.Or(a.Config.SubjectPrefix, DefaultSubjectPrefix) + ingest.SubjectToken(server)
}

// Run rebuilds the runs in progress from the stored calls, then evaluates
// every Config.Interval until ctx ends. Errors are logged and counted; the
// next evaluation tries again.
func (a *Alarm) Run(ctx context.Context) {
	interval := a.Config.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	if err := a.Start(ctx); err != nil && ctx.Err() == nil {
		a.log().Error("alarm: start", "err", err)
		a.Metrics.failed()
	}
	minGap := min(cmp.Or(a.Config.MinGap, DefaultMinGap), interval)
	t := time.NewTicker(interval)
	defer t.Stop()
	wake := a.wakeC()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		// At most one evaluation per minGap, however often batches arrive.
		next := time.NewTimer(minGap)
		if err := a.Evaluate(ctx); err != nil && ctx.Err() == nil {
			a.log().Error("alarm: evaluate", "err", err)
			a.Metrics.failed()
		}
		select {
		case <-ctx.Done():
			next.Stop()
			return
		case <-next.C:
		}
	}
}

// Start rebuilds the state from the stored calls: every run that may be in
// progress, back to the first call of each alert still open. Alerts already
// recorded are not sent again. A start that fails leaves no state, so that
// the next evaluation starts again (else the alerts left open were never
// closed).
func (a *Alarm) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			a.tracks = nil
		}
	}()
	a.tracks = map[trackKey]*track{}
	a.thresholds = nil
	a.watermark = time.Time{}
	now := a.now()
	// Thresholds that cannot be derived now are derived when first needed
	// (threshold): no reason to start again and again.
	if err := a.refreshThresholds(ctx, now); err != nil && ctx.Err() == nil {
		a.log().Error("alarm: runaway thresholds", "err", err)
		a.Metrics.failed()
	}
	open, err := a.Store.OpenAlerts(ctx)
	if err != nil {
		return err
	}
	a.reopen = map[string]analytics.AlertRecord{}
	for _, o := range open {
		a.reopen[o.ID] = o
	}
	defer func() { a.reopen = nil }()
	from := now.Add(-a.lookback())
	for _, o := range open {
		from = minTime(from, o.First.Add(-a.Config.Params.PollMaxInterval))
	}
	if err := a.read(ctx, from); err != nil {
		return err
	}
	if err := a.emit(ctx, now); err != nil {
		return err
	}
	// Alerts left open whose run the calls no longer show (it ended while
	// the daemon was down and is older than the lookback): close them.
	live := map[string]bool{}
	for _, t := range a.tracks {
		if t.cur != nil && t.cur.alert != nil {
			live[t.cur.alert.ID] = true
		}
	}
	for _, o := range open {
		if live[o.ID] {
			continue
		}
		al := &Alert{ID: o.ID, Kind: o.Kind, Server: o.Server, Session: o.Session, Tool: o.Tool, ArgsHash: o.ArgsHash,
			Polls: o.Polls, First: o.First, Last: o.First, Threshold: float64(o.Threshold)}
		if err := a.end(ctx, al, now); err != nil {
			return err
		}
	}
	a.Metrics.setOpen(len(live))
	return nil
}

// Evaluate reads the calls stored since the last evaluation, extends the
// runs and sends what is due.
func (a *Alarm) Evaluate(ctx context.Context) error {
	if a.tracks == nil {
		return a.Start(ctx)
	}
	now := a.now()
	if now.Sub(a.computedAt) >= a.refresh() {
		if err := a.refreshThresholds(ctx, now); err != nil {
			return err
		}
	}
	if err := a.read(ctx, now.Add(-a.lookback())); err != nil {
		return err
	}
	return a.emit(ctx, now)
}

// lookback is how far back calls are read: far enough for a run to reach
// the largest threshold at one poll per poll_max_interval, at most a day.
func (a *Alarm) lookback() time.Duration {
	most := float64(a.Config.RunawayPolls)
	if most == 0 {
		most = float64(a.floor())
		for _, t := range a.thresholds {
			most = max(most, t.polls)
		}
	}
	d := time.Duration(most+2) * a.Config.Params.PollMaxInterval
	if d <= 0 || d > maxLookback {
		return maxLookback
	}
	return d
}

func (a *Alarm) floor() int {
	if a.Config.Floor > 0 {
		return a.Config.Floor
	}
	return DefaultFloor
}

func (a *Alarm) refresh() time.Duration {
	if a.Config.Refresh > 0 {
		return a.Config.Refresh
	}
	return DefaultRefresh
}

// read feeds the calls stored after the watermark (and not older than
// since) into the sessions' runs.
func (a *Alarm) read(ctx context.Context, since time.Time) error {
	calls, newest, err := a.Store.AlarmCalls(ctx, a.watermark, since)
	if err != nil {
		return err
	}
	a.watermark = newest
	maxGap := a.Config.Params.PollMaxInterval
	future := a.now().Add(maxFutureSkew)
	for i := range calls {
		c := &calls[i]
		if c.Session == "" {
			continue
		}
		k := trackKey{c.Server, c.Session}
		t := a.tracks[k]
		if t == nil {
			t = &track{}
			a.tracks[k] = t
		}
		if c.TS.Before(t.prevTS) {
			if !t.prevTS.After(future) || c.TS.After(future) {
				continue // later than a newer call of its session: it cannot change a run in progress
			}
			// The session's newest call was stamped ahead of the clock,
			// this one is not: a stray stamp (a gateway's clock off for a
			// moment), which would hide every call after it until the
			// clock caught up. The session starts over from this call.
			a.close(ctx, t.cur)
			t.cur, t.prevTool, t.prevTS = nil, "", time.Time{}
		}
		if r := t.cur; r != nil && c.Tool == r.tool && c.ArgsHash != "" && c.ArgsHash == r.argsHash &&
			c.TS.Sub(r.last) <= maxGap {
			r.polls++
			if c.Error {
				r.errors++
			}
			r.lastErr, r.last, r.lastIngest = c.Error, c.TS, c.IngestedAt
			r.grant, r.agent = c.Grant, c.Agent
		} else {
			a.close(ctx, r)
			nr := &run{server: c.Server, session: c.Session, tool: c.Tool, argsHash: c.ArgsHash, grant: c.Grant, agent: c.Agent,
				first: c.TS, last: c.TS, polls: 1, lastErr: c.Error, lastIngest: c.IngestedAt}
			if c.Error {
				nr.errors = 1
			}
			if t.prevTool != "" {
				nr.startTool, nr.startGap = t.prevTool, c.TS.Sub(t.prevTS)
			}
			t.cur = nr
		}
		t.prevTool, t.prevTS = c.Tool, c.TS
		t.stored = maxTime(t.stored, c.IngestedAt)
	}
	return nil
}

// emit sends the running alerts now due and the closing ones, and forgets
// sessions that went quiet.
func (a *Alarm) emit(ctx context.Context, now time.Time) error {
	for _, r := range a.ended {
		if err := a.due(ctx, r, now); err != nil {
			return err
		}
		if r.alert != nil {
			if err := a.end(ctx, a.final(r), now); err != nil {
				return err
			}
		}
	}
	a.ended = nil
	maxGap := a.Config.Params.PollMaxInterval
	open := 0
	for k, t := range a.tracks {
		r := t.cur
		// Quiet by the clock of the calls and of their storing: calls reach
		// the store up to a flush interval after they were made, so a loop
		// still running may look idle by its calls' times alone.
		quiet := now.Sub(t.prevTS) > maxGap && now.Sub(t.stored) > maxGap
		// A quiet run is still due its running alert when it crossed the
		// threshold unseen (the alarm was down or behind): then both its
		// messages go out at once.
		if r != nil {
			if err := a.due(ctx, r, now); err != nil {
				return err
			}
		}
		if r != nil && r.alert != nil {
			if quiet {
				if err := a.end(ctx, a.final(r), now); err != nil {
					return err
				}
				r.alert = nil
			} else {
				open++
			}
		}
		if quiet {
			delete(a.tracks, k)
		}
	}
	a.Metrics.setOpen(open)
	return nil
}

// close keeps a run that a call ended for emit: when it was alerted, or
// crossed the threshold since the last evaluation (SPEC §2: every such
// run gets both its messages).
func (a *Alarm) close(ctx context.Context, r *run) {
	if r == nil {
		return
	}
	if _, _, over := a.over(ctx, r, a.now()); over || a.alerted(ctx, r) {
		a.ended = append(a.ended, r)
	}
}

// due sends r's running alert when r has not had it and is over its
// server's threshold.
func (a *Alarm) due(ctx context.Context, r *run, now time.Time) error {
	if a.alerted(ctx, r) {
		return nil
	}
	if kind, th, over := a.over(ctx, r, now); over {
		return a.running(ctx, r, kind, th, now)
	}
	return nil
}

// over tells whether r is a runaway loop or a retry storm with more polls
// than its server's threshold, and which.
func (a *Alarm) over(ctx context.Context, r *run, now time.Time) (string, threshold, bool) {
	kind := a.kind(r)
	if kind == "" {
		return "", threshold{}, false
	}
	th := a.threshold(ctx, r.server, now)
	return kind, th, float64(r.polls) > th.polls
}

// kind tells what a run is: a retry storm (mostly errors, ending in one), a
// polling loop (started by another tool's call shortly before), or neither
// (""). Unlike recommend, a loop's regularity is not required: a runaway
// loop is worth an alert whatever its rhythm.
func (a *Alarm) kind(r *run) string {
	if recommend.IsRetryStorm(r.polls, r.errors, r.lastErr) {
		return KindRetryStorm
	}
	if recommend.StartsLoop(r.startTool, r.tool, r.startGap, a.Config.Params.PollMaxInterval) {
		return KindRunawayLoop
	}
	return ""
}

// running records and sends a run's first alert.
func (a *Alarm) running(ctx context.Context, r *run, kind string, th threshold, now time.Time) error {
	al := runningAlert(r, kind, th)
	fill(al, r)
	limit, err := a.limit(ctx, r)
	if err != nil {
		return err
	}
	al.Limit = limit
	isNew, err := a.Store.RecordAlert(ctx, analytics.AlertRecord{ID: al.ID, Kind: kind, Server: r.server, Session: r.session,
		Tool: r.tool, ArgsHash: r.argsHash, First: r.first, Polls: r.polls, Threshold: int64(math.Floor(th.polls)), SentAt: now})
	if err != nil {
		return err // not recorded: the next evaluation tries again
	}
	r.alert = al // recorded: never sent twice
	if !isNew {
		return nil // already sent (before a restart)
	}
	al.At = now
	a.Metrics.observeDelay(now.Sub(r.lastIngest))
	return a.send(al)
}

// alerted tells whether r's alert was sent: by this alarm, or (while
// Start rebuilds the runs) before a restart, which r then takes back, as
// sent but for the figures its calls bring up to date.
func (a *Alarm) alerted(ctx context.Context, r *run) bool {
	if r.alert != nil {
		return true
	}
	if len(a.reopen) == 0 {
		return false // not rebuilding, or nothing was open
	}
	o, ok := a.reopen[alertID(r)]
	if !ok {
		return false
	}
	th := a.threshold(ctx, r.server, a.now())
	limit, err := a.limit(ctx, r)
	if err != nil {
		a.log().Warn("alarm: the limit of a run alerted before the restart", "id", o.ID, "err", err)
	}
	r.alert = runningAlert(r, o.Kind, threshold{float64(o.Threshold), th.source}) // the threshold it was sent with
	r.alert.Limit = limit
	return true
}

// runningAlert is r's alert as sent while it runs, its id alertID(r).
func runningAlert(r *run, kind string, th threshold) *Alert {
	return &Alert{ID: alertID(r), Kind: kind, State: StateRunning, Server: r.server, Grant: r.grant, Agent: r.agent,
		Session: r.session, Tool: r.tool, StartTool: r.startTool, ArgsHash: r.argsHash, First: r.first,
		Threshold: th.polls, ThresholdSource: th.source}
}

// final is the run's alert brought up to date.
func (a *Alarm) final(r *run) *Alert {
	if r.alert == nil {
		return &Alert{}
	}
	fill(r.alert, r)
	return r.alert
}

func fill(al *Alert, r *run) {
	al.Polls, al.Errors, al.Last = r.polls, r.errors, r.last
	al.Grant, al.Agent = r.grant, r.agent
	if span := r.last.Sub(r.first).Minutes(); span > 0 {
		al.Rate = math.Round(float64(r.polls-1)/span*100) / 100
	}
}

// end records and sends a run's closing alert, once.
func (a *Alarm) end(ctx context.Context, al *Alert, now time.Time) error {
	open, err := a.Store.EndAlert(ctx, al.ID, al.Polls, now)
	if err != nil || !open {
		return err
	}
	al.State, al.At = StateEnded, now
	return a.send(al)
}

func (a *Alarm) send(al *Alert) error {
	data, err := json.Marshal(al)
	if err != nil {
		return err
	}
	a.log().Warn("alarm: "+al.Kind+" "+al.State, "id", al.ID, "server", al.Server, "grant", al.Grant, "agent", al.Agent,
		"session", al.Session, "tool", al.Tool, "start_tool", al.StartTool, "polls", al.Polls, "rate_per_min", al.Rate,
		"threshold_polls", al.Threshold)
	a.Metrics.sent(al.Kind, al.State)
	if a.Publish == nil {
		return nil
	}
	if err := a.Publish(a.subject(al.Server), data); err != nil {
		return fmt.Errorf("publish alert %s: %w", al.ID, err)
	}
	return nil
}

// alertID is stable for one run: its server, session, tool, arguments and
// first call.
func alertID(r *run) string {
	return idhash.Of(r.server, r.session, r.tool, r.argsHash, strconv.FormatInt(r.first.UnixNano(), 10))
}

// threshold is the server's runaway threshold, derived when first needed.
func (a *Alarm) threshold(ctx context.Context, server string, now time.Time) threshold {
	if a.Config.RunawayPolls > 0 {
		return threshold{float64(a.Config.RunawayPolls), "config"}
	}
	if t, ok := a.thresholds[server]; ok {
		return t
	}
	t, err := a.derive(ctx, server, now)
	if err != nil {
		a.log().Error("alarm: runaway threshold", "server", server, "err", err)
		a.Metrics.failed()
		return threshold{float64(a.floor()), "floor"} // not cached: the next evaluation tries again
	}
	a.thresholds[server] = t
	return t
}

// refreshThresholds derives every server's threshold again.
func (a *Alarm) refreshThresholds(ctx context.Context, now time.Time) error {
	a.computedAt = now
	a.thresholds = map[string]threshold{}
	if a.Config.RunawayPolls > 0 {
		return nil
	}
	servers, err := a.Store.CallServers(ctx, now.Add(-a.Config.Params.Window))
	if err != nil {
		return err
	}
	for _, s := range servers {
		t, err := a.derive(ctx, s, now)
		if err != nil {
			return err
		}
		a.thresholds[s] = t
	}
	return nil
}

func (a *Alarm) derive(ctx context.Context, server string, now time.Time) (threshold, error) {
	p := a.Config.Params
	loops, p95, err := recommend.LoopLengths(ctx, a.Store.DB(), server, now.Add(-p.Window), now, p)
	if err != nil {
		return threshold{}, err
	}
	if loops < MinLoops {
		return threshold{float64(a.floor()), "floor"}, nil
	}
	return threshold{recommend.RunawayThreshold(p95, p), "derived"}, nil
}

// limit is the current policy's limit on the run's tool: the run's grant's
// policy, else (for a grant without a policy of its own) the server-wide
// one (grant ""); the tool's own limits before all_tools', the lowest
// first. A grant's own policy without a limit on the tool names none.
func (a *Alarm) limit(ctx context.Context, r *run) (*Limit, error) {
	recs, err := a.Store.CurrentPolicies(ctx, r.server)
	if err != nil {
		return nil, err
	}
	for _, grant := range []string{r.grant, ""} {
		own := false
		for _, rec := range recs {
			if rec.Grant != grant {
				continue
			}
			own = true
			p, err := policy.Decode(rec.Document, "policy of "+rec.Server)
			if err != nil {
				return nil, nil // a policy that no longer decodes names no limit
			}
			var rules []*policy.ToolRule
			if tr := p.Tools[r.tool]; tr != nil {
				rules = append(rules, tr)
			}
			if p.AllTools != nil {
				rules = append(rules, p.AllTools)
			}
			for _, tr := range rules {
				var best *policy.Limit
				for i := range tr.Limits {
					if best == nil || tr.Limits[i].Max < best.Max {
						best = &tr.Limits[i]
					}
				}
				if best != nil {
					return &Limit{Grant: grant, Counter: best.Counter, Window: best.Window, Max: best.Max, Scope: best.EffectiveScope()}, nil
				}
			}
		}
		if own || grant == "" {
			break
		}
	}
	return nil, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
