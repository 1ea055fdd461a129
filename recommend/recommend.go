package recommend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/policy"
)

// ErrNoCalls means the server has no calls in the window.
var ErrNoCalls = errors.New("no calls")

// state carries what the detectors share.
type state struct {
	opts     Options
	q        query
	p        Params
	window   Window
	days     int
	confid   string // confidence from the data gates
	usage    map[string]*usage
	names    map[uint64]string // tool hashes to the tools of usage (toolNames)
	classes  map[string]catalog.Classification
	inCat    map[string]bool
	universe []string
	runs     runList
	findings []Finding
	// polled maps a polled tool to its loop finding's limit, so that the
	// rate-limit detector leaves it alone.
	polled map[string]bool
	// runawaySessions are the sessions that had a runaway loop.
	runawaySessions map[string]bool
	approval        map[string]bool
	// allowedSessions are the scope's sessions with an allowed call in the
	// window: what a tool's share of use is measured against.
	allowedSessions int64
	// runaway are the polled tools' runaway loops, for gateway-scope limits (intercept.go).
	runaway map[string][]run
	// pollsPerLoop are the polling loops by shape and number of polls.
	pollsPerLoop map[LoopShape][]LoopCount
	// minutes count the window's calls per session and minute for the
	// rate-limit peaks and the replay's limits.
	minutes *callMinutes
}

// Recommend analyses one server's history and returns the recommendation
// with its proposed policy already replayed over the same window.
func Recommend(ctx context.Context, db *sql.DB, opts Options) (*Report, error) {
	s := newState(db, opts)
	p, now := s.p, s.q.to
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stage := time.Now()
	lap := func(name string) {
		log.Debug("recommend stage", "stage", name, "took", time.Since(stage).Round(time.Millisecond))
		stage = time.Now()
	}
	f, err := s.readFigures(ctx)
	if err != nil {
		return nil, err
	}
	gates := s.gates()
	if f.allowed == 0 {
		// Every call was refused: the proposal allows nothing. Say so
		// rather than hand over a deny-all that looks like a result.
		gates = append(gates, Gate{Name: "allowed_calls", OK: false, Detail: refusedOnlyDetail(opts.Grant, s.window.Calls)})
		s.confid = Low
	}
	if err := s.readUsage(ctx); err != nil {
		return nil, err
	}
	lap("usage")
	if s.minutes, err = openCallMinutes(ctx, s.q); err != nil {
		return nil, err
	}
	defer s.minutes.close()
	if s.runs, err = s.q.runs(ctx, s.names, p.PollMinCalls, p.PollMaxInterval); err != nil {
		return nil, err
	}
	lap("sequences")
	if err := s.detect(ctx); err != nil {
		return nil, err
	}
	lap("detectors")
	s.applySuppressions()
	sortFindings(s.findings)

	proposed := s.propose()
	if err := proposed.Validate(); err != nil {
		return nil, fmt.Errorf("proposed policy is invalid (a bug): %w", err)
	}
	if opts.ProposalOnly {
		return s.report(gates, proposed), nil
	}
	replay, err := Run(ctx, db, ReplayOptions{Server: opts.Server, Grant: opts.Grant, From: s.q.from, To: now,
		Policy: proposed, Current: opts.Current, Runaway: s.runawaySessions, Log: opts.Log, minutes: s.minutes, tools: toolsFromUsage(s.usage)})
	if err != nil {
		return nil, err
	}
	lap("replay")
	ruleChanges := s.detectLoosenings(proposed, replay)
	s.applySuppressions()
	sortFindings(s.findings)
	patch, err := policy.Patch(opts.Current, proposed)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	// Hook: limits in the scope of the target gateway (intercept.go).
	gateway, err := s.gatewayLimits(ctx, proposed)
	if err != nil {
		return nil, err
	}
	if gateway != nil {
		changed, err := s.gatewayLoosenings(proposed, gateway)
		if err != nil {
			return nil, err
		}
		if changed {
			s.applySuppressions()
			sortFindings(s.findings)
		}
	}
	changes := opts.SuppressionLog
	if changes == nil {
		changes = []analytics.SuppressionChange{}
	}
	r := s.report(gates, proposed)
	r.Patch, r.Replay, r.RuleChanges, r.SuppressionChanges, r.Gateway = patch, *replay, ruleChanges, changes, gateway
	return r, nil
}

// report is the Report of what the detectors found and proposed; Recommend
// adds the replay and what follows from it, unless opts.ProposalOnly.
func (s *state) report(gates []Gate, proposed *policy.Policy) *Report {
	return &Report{
		Server: s.opts.Server, Grant: s.opts.Grant, GeneratedAt: time.Now().UTC(),
		Window: s.window, Confidence: s.confid, Draft: s.confid == Low, Gates: gates,
		Findings: s.findings, Policy: proposed, Current: s.opts.Current, Runaway: s.runawayLoops(),
		PollsPerLoop: s.pollsPerLoop,
	}
}

// newState is the detectors' state for opts' scope and window.
func newState(db *sql.DB, opts Options) *state {
	p := opts.Params
	if p.Window <= 0 {
		p = DefaultParams()
	}
	now := opts.Now.UTC()
	return &state{
		opts: opts, p: p,
		q:      query{db: db, server: opts.Server, grant: opts.Grant, from: now.Add(-p.Window), to: now, log: opts.Log},
		polled: map[string]bool{}, runawaySessions: map[string]bool{}, approval: map[string]bool{},
	}
}

// readFigures reads the window's figures (those given in opts when an
// analysis of every grant counted them); a window without calls is
// ErrNoCalls.
func (s *state) readFigures(ctx context.Context) (figures, error) {
	f, err := s.q.scopeFigures(ctx, s.opts.figures)
	if err != nil {
		return f, err
	}
	s.window, s.days, s.allowedSessions = f.window, f.activeDays, f.allowedSessions
	if s.window.Calls == 0 {
		grant := ""
		if s.opts.Grant != "" {
			grant = fmt.Sprintf(" and grant %q", s.opts.Grant)
		}
		return f, fmt.Errorf("%w for server %q%s between %s and %s: check the name (mcptrail query calls_by_tool lists servers) or widen --since",
			ErrNoCalls, s.opts.Server, grant, s.q.from.Format(time.RFC3339), s.q.to.Format(time.RFC3339))
	}
	return f, nil
}

// readUsage reads the window's use of each tool (the one given in opts
// when an analysis of every grant counted it) and classifies the tools.
func (s *state) readUsage(ctx context.Context) error {
	var err error
	if s.usage = s.opts.usage; s.usage == nil {
		if s.usage, err = s.q.toolUsage(ctx, s.p.Window); err != nil {
			return err
		}
	}
	if s.names, err = s.q.toolNames(ctx, sortedKeys(s.usage)); err != nil {
		return err
	}
	s.classify()
	return nil
}

// RunawayLoops are the runaway polling loops of opts' scope and window,
// found as Recommend finds them (its Report.Runaway), without the rest of
// a recommendation: a backtest scores a proposal against the loops of its
// test window, where a whole recommendation there cost it twice as much
// as the replay it scores.
func RunawayLoops(ctx context.Context, db *sql.DB, opts Options) ([]RunawayLoop, error) {
	s := newState(db, opts)
	if _, err := s.readFigures(ctx); err != nil {
		return nil, err
	}
	if err := s.readUsage(ctx); err != nil {
		return nil, err
	}
	var err error
	if s.runs, err = s.q.runs(ctx, s.names, s.p.PollMinCalls, s.p.PollMaxInterval); err != nil {
		return nil, err
	}
	s.detectRisky(s.allowedSessions) // the tools behind approval have no loop finding
	err = s.eachPolledTool(func(k loopPair, loops []*run) error {
		_, _, runaway := s.runawayOf(loops)
		s.keepRunaway(k.tool, runaway)
		return nil
	})
	return s.runawayLoops(), err
}

// gates checks the data gates (Repokid-style minimum data before acting).
func (s *state) gates() []Gate {
	g := []Gate{
		{Name: "min_days", OK: s.days >= s.p.MinDays,
			Detail: fmt.Sprintf("%d day(s) with calls in the window; at least %d needed", s.days, s.p.MinDays)},
		{Name: "min_sessions", OK: s.window.Sessions >= int64(s.p.MinSessions),
			Detail: fmt.Sprintf("%d session(s) in the window; at least %d needed", s.window.Sessions, s.p.MinSessions)},
		{Name: "catalog_present", OK: len(s.opts.Catalog) > 0, Optional: true,
			Detail: catalogDetail(len(s.opts.Catalog))},
		{Name: "current_policy", OK: s.opts.Current != nil, Optional: true,
			Detail: policyDetail(s.opts.Current != nil, s.opts.Grant != "" && s.opts.CurrentServerWide)},
	}
	switch {
	case !g[0].OK || !g[1].OK:
		s.confid = Low
	case !g[2].OK:
		s.confid = Medium
	default:
		s.confid = High
	}
	return g
}

func catalogDetail(n int) string {
	if n == 0 {
		return "no catalog imported: the universe is the tools of the current policy plus the tools seen (mcptrail catalog import)"
	}
	return fmt.Sprintf("%d tools in the catalog", n)
}

func refusedOnlyDetail(grant string, calls int64) string {
	scope := "the server's"
	if grant != "" {
		scope = "the grant's"
	}
	return fmt.Sprintf("none of %s %s in the window was allowed (the gateway refused them all): the proposal allows no tool and widens nothing, a deny-all from no usage; check whether the grant is still needed or misconfigured",
		scope, plural(calls, "call", "calls"))
}

func policyDetail(ok, serverWide bool) string {
	switch {
	case ok && serverWide:
		return "the current policy is the server-wide one (the grant has none of its own): the proposal keeps its untouched rules"
	case ok:
		return "the current policy is known: the proposal keeps its untouched rules"
	}
	return "no current policy given (--policy): the proposal starts from an empty policy"
}

// classify resolves every tool's risk: the catalog's classification, or the
// name heuristics for tools the catalog lacks.
func (s *state) classify() {
	s.classes = map[string]catalog.Classification{}
	s.inCat = map[string]bool{}
	for _, c := range s.opts.Catalog {
		s.classes[c.Tool] = c
		s.inCat[c.Tool] = true
	}
	set := map[string]bool{}
	for t := range s.inCat {
		set[t] = true
	}
	if cur := s.opts.Current; cur != nil {
		for t := range cur.Tools {
			set[t] = true
		}
	}
	if len(s.opts.Catalog) == 0 {
		for t := range s.usage {
			set[t] = true
		}
	}
	for t := range s.usage {
		if _, ok := s.classes[t]; !ok {
			s.classes[t] = catalog.Classify(catalog.Tool{Name: t}, nil)
		}
	}
	for t := range set {
		if _, ok := s.classes[t]; !ok {
			s.classes[t] = catalog.Classify(catalog.Tool{Name: t}, nil)
		}
	}
	s.universe = sortedKeys(set)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// FindingID is stable across runs: kind, server, grant and subject.
func FindingID(kind, server, grant, subject string) string {
	g := grant
	if g == "" {
		g = "*"
	}
	return kind + ":" + server + ":" + g + ":" + subject
}

func (s *state) add(f Finding) {
	if f.ID == "" {
		f.ID = FindingID(f.Kind, s.opts.Server, s.opts.Grant, f.Tool)
	}
	s.findings = append(s.findings, f)
}

// applySuppressions marks findings with a suppression in force; expired ones
// no longer apply.
func (s *state) applySuppressions() {
	active := map[string]analytics.Suppression{}
	for _, sup := range s.opts.Suppressions {
		if sup.Until.After(s.opts.Now) {
			active[sup.FindingID] = sup
		}
	}
	for i := range s.findings {
		f := &s.findings[i]
		sup, ok := active[f.ID]
		if !ok {
			continue
		}
		// A suppressed loosening accepted the ways it widened then; one
		// that now widens in another way is news, whatever its id.
		if f.Kind == KindLoosening && sup.Covers != nil {
			if kinds := WideningKinds(f.Evidence); !WideningCovered(kinds, sup.Covers) {
				f.Suppressed = nil
				f.Evidence["suppression_covers"] = sup.Covers
				continue
			}
		}
		f.Suppressed = &Suppressed{Reason: sup.Reason, By: sup.Owner, Until: sup.Until.UTC()}
	}
}

var kindOrder = []string{KindLoosening, KindRiskyTool, KindPollingLoop, KindDeniedProbe, KindRetryStorm, KindUnusedTool,
	KindRateLimit, KindUnknownTool, KindAllowCandidate}

func sortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if ra, rb := severityRank(a.Severity), severityRank(b.Severity); ra != rb {
			return ra > rb
		}
		if ka, kb := slices.Index(kindOrder, a.Kind), slices.Index(kindOrder, b.Kind); ka != kb {
			return ka < kb
		}
		return a.ID < b.ID
	})
}

func severityRank(s string) int { return catalog.Severity(s).Rank() }

// propose builds the proposed policy: default deny; every used tool stays
// allowed; the findings' actions applied unless suppressed; everything the
// findings do not touch kept as it was.
func (s *state) propose() *policy.Policy {
	p := s.opts.Current.Clone()
	if p == nil {
		p = &policy.Policy{}
	}
	p.Version = policy.Version
	p.Default = policy.DefaultDeny
	if p.Tools == nil {
		p.Tools = map[string]*policy.ToolRule{}
	}
	for t, u := range s.usage {
		if u.Allowed == 0 {
			continue
		}
		if _, ok := p.Tools[t]; !ok {
			p.Tools[t] = &policy.ToolRule{}
		}
		p.Hide = slices.DeleteFunc(p.Hide, func(h string) bool { return h == t })
	}
	// A tool this scope was refused (denied or hidden) and never allowed in
	// the window is not allowed by the proposal, whatever the current policy
	// lists: allowing it would widen access (allow_candidate only reports).
	for t, u := range s.usage {
		if u.Allowed == 0 && u.Denied+u.Hidden > 0 {
			delete(p.Tools, t)
		}
	}
	for i := range s.findings {
		f := &s.findings[i]
		if f.Suppressed != nil {
			continue
		}
		switch f.Action.Op {
		case OpHide:
			if f.Tool == policy.HideAll {
				continue // never hide every tool for one named "*"
			}
			if !slices.Contains(p.Hide, f.Tool) {
				p.Hide = append(p.Hide, f.Tool)
			}
			if r, ok := p.Tools[f.Tool]; ok && isEmptyRule(r) {
				delete(p.Tools, f.Tool)
			}
		case OpRequireApproval:
			r := p.Tools[f.Tool]
			if r == nil {
				r = &policy.ToolRule{}
				p.Tools[f.Tool] = r
			}
			requireApproval(p, r)
		case OpRateLimit:
			if f.Action.Limit == nil {
				continue
			}
			r := p.Tools[f.Tool]
			if r == nil {
				r = &policy.ToolRule{}
				p.Tools[f.Tool] = r
			}
			setLimit(r, s.keepHitCap(f))
		}
	}
	sort.Strings(p.Hide)
	return p
}

func isEmptyRule(r *policy.ToolRule) bool {
	return r == nil || (len(r.Require) == 0 && len(r.DenyIf) == 0 && len(r.Limits) == 0 && len(r.Extra) == 0)
}

// requireApproval puts tool rule r of p behind approval, unless it is
// already. The evaluator checks a tool's own rule before all_tools', and an
// approval entry decides every call that reaches it: all_tools' require and
// deny_if (those before an approval of its own) would no longer refuse the
// tool's calls, and the approval would let a call they deny wait for a
// person instead. So they are copied into r ahead of the approval.
func requireApproval(p *policy.Policy, r *policy.ToolRule) {
	if hasApproval(r) {
		return
	}
	if all := p.AllTools.Clone(); all != nil {
		for _, c := range all.Require {
			key := policy.ConditionKey(c)
			if !slices.ContainsFunc(r.Require, func(k policy.Condition) bool { return policy.ConditionKey(k) == key }) {
				r.Require = append(r.Require, c)
			}
		}
		for _, d := range all.DenyIf {
			if d.IsApproval() {
				break
			}
			key := policy.ConditionsKey(d.Conditions)
			if !slices.ContainsFunc(r.DenyIf, func(e policy.DenyRule) bool { return policy.ConditionsKey(e.Conditions) == key }) {
				r.DenyIf = append(r.DenyIf, d)
			}
		}
	}
	r.DenyIf = append(r.DenyIf, policy.DenyRule{OnDeny: "Requires human approval."})
}

func hasApproval(r *policy.ToolRule) bool {
	if r == nil {
		return false
	}
	for _, d := range r.DenyIf {
		if d.IsApproval() {
			return true
		}
	}
	return false
}

// setLimit replaces the limit with the same counter, or adds it.
func setLimit(r *policy.ToolRule, l policy.Limit) {
	for i := range r.Limits {
		if r.Limits[i].Counter == l.Counter {
			l.Extra = r.Limits[i].Extra
			r.Limits[i] = l
			return
		}
	}
	r.Limits = append(r.Limits, l)
}

// keepHitCap returns the limit a finding sets. A current cap with the same
// counter that agents hit in the window is an input, not noise: when the
// finding's limit would raise it or count it over a broader scope, the cap
// stays and the new limit goes beside it under a counter of its own (both
// apply), as the finding's action and evidence then say.
func (s *state) keepHitCap(f *Finding) policy.Limit {
	l := *f.Action.Limit
	cur := s.currentLimit(f.Tool, l.Counter)
	u := s.usage[f.Tool]
	if cur == nil || u == nil || u.RateLimited == 0 || covers(l, *cur) {
		return l
	}
	l.Counter = fmt.Sprintf("%s_%s_%s", l.Counter, l.EffectiveScope(), l.Window)
	f.Action.Limit = &l
	f.Evidence["kept_current_cap"] = LimitText(*cur)
	f.Summary += fmt.Sprintf("; the current cap %s, which refused %s, is kept beside it", LimitText(*cur), plural(u.RateLimited, "call", "calls"))
	return l
}

// currentLimit returns the current policy's limit for a tool's counter.
func (s *state) currentLimit(tool, counter string) *policy.Limit {
	if s.opts.Current == nil {
		return nil
	}
	r := s.opts.Current.Tools[tool]
	if r == nil {
		return nil
	}
	for i := range r.Limits {
		if r.Limits[i].Counter == counter {
			return &r.Limits[i]
		}
	}
	return nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%s %s", GroupDigits(n), many)
}

// GroupDigits writes 212400 as 212,400.
func GroupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
