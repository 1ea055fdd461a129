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
	// Recommend are the recommender's inputs (catalog, current policy,
	// suppressions, parameters); Build sets their Server and Now.
	Recommend recommend.Options
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
	q := querier{db: db, server: opts.Server, from: now.Add(-opts.Window), to: now}
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
	ropts.Server, ropts.Now = opts.Server, now
	if ropts.Params.Window <= 0 {
		ropts.Params = recommend.DefaultParams()
	}
	// The recommendation reads at least the report's window.
	ropts.Params.Window = max(ropts.Params.Window, opts.Window)
	if ropts.Log == nil {
		ropts.Log = opts.Log
	}
	rec, err := recommend.Recommend(ctx, db, ropts)
	if err != nil {
		return nil, fmt.Errorf("report: recommend: %w", err)
	}
	rec.GeneratedAt = gen
	r.rec = rec
	r.Recommendation = summarize(rec)
	if r.Polling, err = polling(ctx, db, rec, ropts.Params); err != nil {
		return nil, err
	}
	if r.Limits, err = limits(ctx, db, rec); err != nil {
		return nil, err
	}
	since := q.from
	if p := opts.Previous; p != nil && !p.Window.To.IsZero() {
		since = p.Window.To
	}
	log, err := store.SuppressionLog(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	r.Changes = changes(r, opts.Previous, opts.PreviousFolder, log, q.from)
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
		s.Findings = append(s.Findings, Finding{ID: f.ID, Kind: f.Kind, Tool: f.Tool, Severity: f.Severity,
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

// polling reads the polls-per-loop distribution of each polling_loop
// finding, over the recommendation's window.
func polling(ctx context.Context, db *sql.DB, rec *recommend.Report, p recommend.Params) ([]PollingLoop, error) {
	var pairs []loopShape
	var loops []PollingLoop
	for _, f := range rec.Findings {
		if f.Kind != recommend.KindPollingLoop {
			continue
		}
		start, _ := f.Evidence["start_tool"].(string)
		pl := PollingLoop{FindingID: f.ID, Tool: f.Tool, StartTool: start, Histogram: []PollCount{}}
		if v, ok := f.Evidence["runaway_threshold_polls"].(float64); ok {
			pl.RunawayThreshold = v
		}
		if l := f.Action.Limit; l != nil && f.Suppressed == nil {
			pl.Limit = &Limit{Max: l.Max, Window: l.Window, Scope: l.EffectiveScope()}
		}
		pairs = append(pairs, loopShape{tool: f.Tool, start: start})
		loops = append(loops, pl)
	}
	if len(loops) == 0 {
		return []PollingLoop{}, nil
	}
	hist, err := pollHistograms(ctx, db, rec.Server, rec.Window.From, rec.Window.To, p.PollMinCalls, p.PollMaxInterval, p.PollMaxCV, pairs)
	if err != nil {
		return nil, err
	}
	for i := range loops {
		h := hist[loopShape{tool: loops[i].Tool, start: loops[i].StartTool}]
		if h != nil {
			loops[i].Histogram = h
		}
		for _, pc := range loops[i].Histogram {
			loops[i].Loops += pc.Loops
		}
	}
	sort.SliceStable(loops, func(i, j int) bool { return loops[i].Tool < loops[j].Tool })
	return loops, nil
}

// limits sets every proposed rate limit (of the unsuppressed polling_loop
// and rate_limit findings) against the peaks observed in its unit over the
// recommendation's window, by tool.
func limits(ctx context.Context, db *sql.DB, rec *recommend.Report) ([]LimitPeak, error) {
	out := []LimitPeak{}
	seen := map[string]bool{}
	for _, f := range rec.Findings {
		l := f.Action.Limit
		if f.Action.Op != recommend.OpRateLimit || l == nil || f.Suppressed != nil || f.Tool == "" || seen[f.Tool] {
			continue
		}
		seen[f.Tool] = true
		out = append(out, LimitPeak{Tool: f.Tool, FindingID: f.ID, Kind: f.Kind, Histogram: []PeakCount{},
			Limit: Limit{Max: l.Max, Window: l.Window, Scope: l.EffectiveScope()}})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	q := querier{db: db, server: rec.Server, from: rec.Window.From, to: rec.Window.To}
	if err := q.limitPeaks(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}
