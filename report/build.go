package report

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// DefaultTopN is how many tools and agents the tables and charts show.
const DefaultTopN = 10

// matrixTools bounds the tools of the agent × tool matrix.
const matrixTools = 40

// Options select what one report covers.
type Options struct {
	Server string
	// Window is how much history the report covers, ending at Now.
	Window time.Duration
	Now    time.Time
	// GeneratedAt is written as generated_at; zero means the clock.
	GeneratedAt time.Time
	// Schedule names the schedule that runs the report ("" from the CLI).
	Schedule string
	// TopN bounds the top tools and agents and the heatmap's tools
	// (DefaultTopN when 0).
	TopN int
	// Recommend selects the recommendation as `mcptrail recommend` makes it
	// (parameters, and the inputs of each grant: catalog, current policy,
	// suppressions); Build sets its Server, Grant (every grant), Now and
	// GeneratedAt, and reads at least the report's window.
	Recommend recommend.GrantsOptions
	// Calls is the pool the calls are read from; nil: the store's. A pool
	// of analytics.Store.ArchiveDB reads the archived days too.
	Calls *sql.DB
	// Previous is the previous report to compare with, nil for the first.
	Previous *Report
	// PreviousFolder names the previous report's folder in the output.
	PreviousFolder string
	Log            *slog.Logger
}

// Build computes one server's report: the window's traffic, the
// recommendation over the recommender's own window (recommend.window, or
// the report's when longer) with its replay, and the changes since the previous report. A server with no
// calls in the window is an error wrapping ErrNoCalls.
func Build(ctx context.Context, store *analytics.Store, opts Options) (*Report, error) {
	db := store.DB()
	if opts.Calls != nil {
		db = opts.Calls
	}
	if opts.Server == "" {
		return nil, errors.New("report: no server given")
	}
	if opts.Window <= 0 {
		return nil, fmt.Errorf("report: the window must be positive, got %s", opts.Window)
	}
	now := opts.Now.UTC()
	if now.IsZero() {
		now = time.Now().UTC()
	}
	topN := opts.TopN
	if topN <= 0 {
		topN = DefaultTopN
	}
	gen := opts.GeneratedAt.UTC()
	if opts.GeneratedAt.IsZero() {
		gen = time.Now().UTC()
	}
	q := querier{db: db, server: opts.Server, from: now.Add(-opts.Window), to: now, log: opts.Log}
	r := &Report{Version: Version, Server: opts.Server, Schedule: opts.Schedule, GeneratedAt: gen}
	var err error
	if r.Window, r.Totals, err = q.totals(ctx); err != nil {
		return nil, err
	}
	if r.Window.Calls == 0 {
		return nil, fmt.Errorf("%w for server %q between %s and %s: check the name (mcptrail query decisions_by_server lists servers) or widen the window (--since, or the schedule's window)",
			ErrNoCalls, opts.Server, q.from.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if r.Volume, err = q.volume(ctx); err != nil {
		return nil, err
	}
	if r.Tools, err = q.tools(ctx); err != nil {
		return nil, err
	}
	if r.Agents, err = q.agents(ctx, topN); err != nil {
		return nil, err
	}
	if r.HourByTool, err = q.hourByTool(ctx, topN); err != nil {
		return nil, err
	}
	if r.AgentTools, err = q.agentTools(ctx, topN, matrixTools); err != nil {
		return nil, err
	}
	if r.LastAccess, err = q.lastAccess(ctx); err != nil {
		return nil, err
	}

	ropts := opts.Recommend
	ropts.Server, ropts.Grant, ropts.Now, ropts.GeneratedAt = opts.Server, "", now, gen
	if ropts.Params.Window <= 0 {
		ropts.Params = recommend.DefaultParams()
	}
	// The recommendation reads at least the report's window; its backtest
	// trains on recommend.window all the same (SPEC §6, report).
	train := ropts.Params.Window
	ropts.Params.Window = max(ropts.Params.Window, opts.Window)
	if inputs := ropts.Inputs; opts.Log != nil {
		ropts.Inputs = func(ctx context.Context, grant string) (recommend.Options, error) {
			var o recommend.Options
			var err error
			if inputs != nil {
				o, err = inputs(ctx, grant)
			}
			if o.Log == nil {
				o.Log = opts.Log
			}
			return o, err
		}
	}
	if ropts.Log == nil {
		ropts.Log = opts.Log
	}
	rec, set, err := recommend.RecommendGrants(ctx, db, ropts)
	if err != nil {
		return nil, fmt.Errorf("report: recommend: %w", err)
	}
	r.rec, r.set = rec, set
	if set != nil {
		r.Recommendation = summarizeSet(set)
	} else {
		r.Recommendation = summarize(rec)
	}
	r.Polling, r.Limits = []PollingLoop{}, []LimitPeak{}
	for _, g := range r.FullRecommendations() {
		pl := polling(g)
		lp, err := limits(ctx, querier{db: db, server: opts.Server, grant: g.Grant, from: r.Recommendation.From, to: r.Recommendation.To, log: opts.Log}, g.Findings)
		if err != nil {
			return nil, err
		}
		r.Polling, r.Limits = append(r.Polling, pl...), append(r.Limits, lp...)
	}
	if r.Backtest, err = backtestWindow(ctx, db, ropts, train, opts.Window, now, r.FullRecommendations()); err != nil {
		return nil, err
	}
	since := q.from
	if p := opts.Previous; p != nil && !p.Window.To.IsZero() {
		since = p.Window.To
	}
	log, err := store.SuppressionLog(ctx, opts.Server, since)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r.Changes = changes(r, opts.Previous, opts.PreviousFolder, log, q.from)
	if set != nil {
		historyChanges(&r.Changes, set.Reports())
	} else {
		historyChanges(&r.Changes, []*recommend.Report{rec})
	}
	return r, nil
}

// summarize keeps what a report shows of a recommendation.
func summarize(rec *recommend.Report) Recommendation {
	s := Recommendation{
		From: rec.Window.From, To: rec.Window.To, Days: rec.Window.Days,
		Confidence: rec.Confidence, Draft: rec.Draft, Gates: rec.Gates, Findings: []Finding{},
		Replay:         rec.Replay.ReplayTotals,
		ReplaySentence: recommend.ReplaySentence(&rec.Replay),
	}
	if rec.Policy != nil {
		s.PolicyTools, s.PolicyHidden = len(rec.Policy.Tools), len(rec.Policy.Hide)
	}
	s.Counts.Findings = len(rec.Findings)
	for _, f := range rec.Findings {
		s.Findings = append(s.Findings, Finding{ID: f.ID, Grant: rec.Grant, Kind: f.Kind, Tool: f.Tool, Severity: f.Severity,
			Confidence: f.Confidence, Summary: f.Summary, Action: actionText(f), Suppressed: f.Suppressed != nil})
		if f.Suppressed != nil {
			s.Counts.Suppressed++
			continue
		}
		switch f.Action.Op {
		case recommend.OpHide:
			s.Counts.Hide++
		case recommend.OpRequireApproval:
			s.Counts.Approval++
		case recommend.OpRateLimit:
			s.Counts.RateLimits++
		case recommend.OpWiden:
			s.Counts.Widen++
		default:
			s.Counts.Reported++
		}
	}
	return s
}

// confidenceRank orders confidences, the lowest first.
var confidenceRank = map[string]int{recommend.Low: 0, recommend.Medium: 1, recommend.High: 2}

// summarizeSet keeps what a report shows of a recommendation per grant:
// each grant's summary, and all of them added up.
func summarizeSet(set *recommend.Set) Recommendation {
	s := Recommendation{From: set.Window.From, To: set.Window.To, Days: set.Window.Days, Confidence: recommend.High,
		Gates: []recommend.Gate{}, Findings: []Finding{}, Grants: []GrantRecommendation{}, UngrantedCalls: set.UngrantedCalls}
	for _, rec := range set.Reports() {
		g := summarize(rec)
		if confidenceRank[g.Confidence] < confidenceRank[s.Confidence] {
			s.Confidence = g.Confidence
		}
		s.Draft = s.Draft || g.Draft
		for _, gate := range g.Gates {
			gate.Detail = "grant " + rec.Grant + ": " + gate.Detail
			s.Gates = append(s.Gates, gate)
		}
		s.Findings = append(s.Findings, g.Findings...)
		c := &s.Counts
		c.Findings, c.Hide, c.Approval, c.RateLimits = c.Findings+g.Counts.Findings, c.Hide+g.Counts.Hide, c.Approval+g.Counts.Approval, c.RateLimits+g.Counts.RateLimits
		c.Reported, c.Suppressed, c.Widen = c.Reported+g.Counts.Reported, c.Suppressed+g.Counts.Suppressed, c.Widen+g.Counts.Widen
		addReplay(&s.Replay, g.Replay)
		s.PolicyTools += g.PolicyTools
		s.PolicyHidden += g.PolicyHidden
		changes := append([]recommend.RuleChange{}, rec.RuleChanges...)
		sort.SliceStable(changes, func(i, j int) bool { return changes[i].Widens && !changes[j].Widens })
		loose := recommend.OpenWidenings(rec)
		if loose == nil {
			loose = []recommend.Widening{}
		}
		s.Grants = append(s.Grants, GrantRecommendation{Grant: rec.Grant, Calls: rec.Window.Calls, Confidence: g.Confidence, Draft: g.Draft,
			Counts: g.Counts, Loosenings: loose, RuleChanges: changes, Replay: g.Replay, ReplaySentence: g.ReplaySentence,
			PolicyTools: g.PolicyTools, PolicyHidden: g.PolicyHidden})
	}
	s.ReplaySentence = recommend.ReplaySentence(&recommend.Replay{ReplayTotals: s.Replay})
	return s
}

// addReplay adds one grant's replay totals to the sum of all grants.
func addReplay(sum *Replay, r Replay) {
	sum.Calls += r.Calls
	sum.Allowed += r.Allowed
	sum.Denied += r.Denied
	sum.Hidden += r.Hidden
	sum.RateLimited += r.RateLimited
	sum.ApprovalRequired += r.ApprovalRequired
	sum.Changed += r.Changed
	sum.NewlyAllowed += r.NewlyAllowed
	sum.SessionsAffected += r.SessionsAffected
	sum.AgentsAffected += r.AgentsAffected
	sum.RateLimitedSessions += r.RateLimitedSessions
	sum.RunawaySessions += r.RunawaySessions
}

// actionText says what the proposal does about a finding.
func actionText(f recommend.Finding) string {
	switch f.Action.Op {
	case recommend.OpRequireApproval:
		return "require approval"
	case recommend.OpRateLimit:
		if l := f.Action.Limit; l != nil {
			return fmt.Sprintf("limit %d/%s per %s", l.Max, l.Window, l.EffectiveScope())
		}
	case recommend.OpNone:
		return "report"
	case recommend.OpAllow:
		return "allow (review)"
	}
	return f.Action.Op
}

// polling is the polls-per-loop distribution of each polling_loop finding
// of one grant's proposal (grant "" for a server without grants), as the
// recommender counted the loops it found in its window.
func polling(rec *recommend.Report) []PollingLoop {
	loops := []PollingLoop{}
	for _, f := range rec.Findings {
		if f.Kind != recommend.KindPollingLoop {
			continue
		}
		start, _ := f.Evidence["start_tool"].(string)
		pl := PollingLoop{FindingID: f.ID, Grant: rec.Grant, Tool: f.Tool, StartTool: start, Histogram: []PollCount{}}
		if v, ok := f.Evidence["runaway_threshold_polls"].(float64); ok {
			pl.RunawayThreshold = v
		}
		if l := f.Action.Limit; l != nil && f.Suppressed == nil {
			pl.Limit = &Limit{Max: l.Max, Window: l.Window, Scope: l.EffectiveScope()}
		}
		for _, c := range rec.PollsPerLoop[recommend.LoopShape{Tool: f.Tool, Start: start}] {
			pl.Histogram = append(pl.Histogram, PollCount{Polls: c.Polls, Loops: c.Loops})
			pl.Loops += c.Loops
		}
		loops = append(loops, pl)
	}
	sort.SliceStable(loops, func(i, j int) bool { return loops[i].Tool < loops[j].Tool })
	return loops
}

// limits sets every proposed rate limit of one grant's proposal (of the
// unsuppressed polling_loop and rate_limit findings) against the peaks
// observed in its unit over q: the recommendation's window and the grant's
// calls (q.grant "" for a server without grants), by tool.
func limits(ctx context.Context, q querier, findings []recommend.Finding) ([]LimitPeak, error) {
	out := []LimitPeak{}
	seen := map[string]bool{}
	for _, f := range findings {
		l := f.Action.Limit
		if f.Action.Op != recommend.OpRateLimit || l == nil || f.Suppressed != nil || f.Tool == "" || seen[f.Tool] {
			continue
		}
		seen[f.Tool] = true
		out = append(out, LimitPeak{Tool: f.Tool, Grant: q.grant, FindingID: f.ID, Kind: f.Kind, Histogram: []PeakCount{},
			Limit: Limit{Max: l.Max, Window: l.Window, Scope: l.EffectiveScope()}})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	if err := q.limitPeaks(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}
