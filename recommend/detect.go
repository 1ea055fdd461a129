package recommend

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/policy"
)

// detect runs every detector in an order where later ones can use earlier
// results (loops before rate limits, probes before allow candidates).
func (s *state) detect(ctx context.Context) error {
	lap := s.q.timed("risky and unused tools")
	s.detectRisky(s.allowedSessions)
	s.detectUnused()
	storms := s.detectRetryStorms()
	lap()
	lap = s.q.timed("polling loops")
	if err := s.detectLoops(ctx, storms); err != nil {
		return err
	}
	lap()
	lap = s.q.timed("rate limits")
	if err := s.detectRateLimits(ctx); err != nil {
		return err
	}
	lap()
	if s.opts.ProposalOnly {
		// The rest only reports: no finding of theirs changes the policy.
		return nil
	}
	probeSessions, err := s.detectProbes(ctx)
	if err != nil {
		return err
	}
	if err := s.detectRefused(ctx, probeSessions); err != nil {
		return err
	}
	return s.detectRegressions(ctx)
}

func (s *state) riskSeverity(c catalog.Classification) string { return string(c.Category.Severity()) }

func isRisky(c catalog.Category) bool {
	return c == catalog.Exec || c == catalog.Destructive || c == catalog.Admin
}

// detectRisky reports allowed exec, destructive and admin tools. Rarely used
// ones go behind approval; regularly used ones stay allowed and are reported.
// scopeSessions are the sessions of the scope (the grant, or the server)
// with an allowed call in the window.
func (s *state) detectRisky(scopeSessions int64) {
	for _, t := range sortedKeys(s.usage) {
		u := s.usage[t]
		c := s.classes[t]
		if u.Allowed == 0 || !isRisky(c.Category) {
			continue
		}
		r := s.rarity(u, scopeSessions)
		ev := map[string]any{
			"category": string(c.Category), "risk_source": string(c.Source), "why": c.Why,
			"allowed_calls": u.Allowed, "allowed_days": u.AllowedDays, "sessions": u.AllowedSessions,
			"scope_sessions": scopeSessions, "session_share": r.share, "rarity_rule": r.rule,
			"last_called": u.LastAllowed, "rarely_used": r.rare, "sql": s.riskySQL(t),
		}
		f := Finding{Kind: KindRiskyTool, Tool: t, Evidence: ev, Confidence: s.confid}
		if r.rare {
			if hasApproval(s.currentRule(t)) {
				continue // already behind approval: nothing to change
			}
			s.approval[t] = true
			f.Severity = s.riskSeverity(c)
			f.Action = Action{Op: OpRequireApproval}
			f.Summary = fmt.Sprintf("%s is %s tool used rarely (%s): put it behind human approval",
				t, article(string(c.Category)), r.said)
		} else {
			f.Severity = string(catalog.SeverityInfo)
			f.Action = Action{Op: OpNone}
			f.Summary = fmt.Sprintf("%s is %s tool in regular use (%s): it stays allowed; review who needs it",
				t, article(string(c.Category)), r.said)
		}
		s.add(f)
	}
}

// verdict is a rarity decision with the numbers behind it.
type verdict struct {
	rare  bool
	share float64 // the tool's sessions / the scope's sessions (shown under the count rule too)
	rule  string  // "session_share", or "counts" where the scope is too small for shares
	said  string  // the numbers, for the summary
}

// rarity decides whether a risky tool is rarely used relative to its scope's
// traffic: at most recommend.rare_max_session_share of the scope's sessions
// with allowed calls used it. The share does not move when the same agents'
// traffic grows, where a count would flip its verdict. A scope with fewer
// than recommend.min_sessions such sessions is too small for a share to mean
// anything: there the absolute counts decide (rare_max_calls on at most
// rare_max_days days).
func (s *state) rarity(u *usage, scopeSessions int64) verdict {
	if scopeSessions >= int64(max(s.p.MinSessions, 1)) {
		share := float64(u.AllowedSessions) / float64(scopeSessions)
		return verdict{
			rare: share <= s.p.RareMaxSessionShare, share: share, rule: "session_share",
			said: fmt.Sprintf("%s of %s, %.2f%%; rare up to %.2f%%", plural(u.AllowedSessions, "session", "sessions"),
				GroupDigits(scopeSessions), 100*share, 100*s.p.RareMaxSessionShare),
		}
	}
	var share float64
	if scopeSessions > 0 {
		share = float64(u.AllowedSessions) / float64(scopeSessions)
	}
	return verdict{
		rare: u.Allowed <= int64(s.p.RareMaxCalls) && u.AllowedDays <= int64(s.p.RareMaxDays), rule: "counts", share: share,
		said: fmt.Sprintf("%s on %s; too few sessions for a share", plural(u.Allowed, "call", "calls"), plural(u.AllowedDays, "day", "days")),
	}
}

// article prefixes a or an.
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

func (s *state) currentRule(tool string) *policy.ToolRule {
	if s.opts.Current == nil {
		return nil
	}
	return s.opts.Current.Tools[tool]
}

// detectUnused reports tools of the universe with no allowed call in the
// window. A tool within its grace period, or used periodically before the
// window, is reported but not hidden.
func (s *state) detectUnused() {
	for _, t := range s.universe {
		if t == policy.HideAll {
			continue // a tool named "*": hiding it would hide every tool
		}
		u := s.usage[t]
		if u != nil && u.Allowed > 0 {
			continue
		}
		if s.opts.Current != nil && s.opts.Current.Hidden(t) {
			continue // already hidden
		}
		if len(s.opts.Catalog) > 0 && !s.inCat[t] && (s.opts.Current == nil || s.opts.Current.Tools[t] == nil) {
			continue // unknown to the catalog: the unknown_tool detector reports it
		}
		c := s.classes[t]
		var last *time.Time
		var denied, earlier int64
		if u != nil {
			last, denied, earlier = u.LastAllowed, u.Refused, u.EarlierPeriods
		}
		ev := map[string]any{
			"last_called": last, "denied_attempts": denied, "category": string(c.Category),
			"in_catalog": s.inCat[t], "in_policy": s.opts.Current != nil && hasKey(s.opts.Current.Tools, t),
			"sql": s.usageSQL(t, "allowed_calls", "last_called", "denied_attempts", "earlier_periods_used", "days_covered"),
		}
		f := Finding{Kind: KindUnusedTool, Tool: t, Evidence: ev, Confidence: s.confid, Action: Action{Op: OpHide}}
		switch c.Category {
		case catalog.Admin:
			f.Severity = string(catalog.SeverityHigh)
		case catalog.Exec, catalog.Destructive:
			f.Severity = string(catalog.SeverityMedium)
		default:
			f.Severity = string(catalog.SeverityLow)
		}
		since := "never called"
		if last != nil {
			since = "last called " + last.Format("2006-01-02")
		}
		ev["days_covered"] = s.window.HistoryDays
		f.Summary = fmt.Sprintf("%s (%s) was not used in the last %s (%s): hide it", t, c.Category, s.window.unusedSpan(), since)
		if added, ok := s.opts.ToolAdded[t]; ok && s.opts.Now.Sub(added) < s.p.Grace {
			f.Action = Action{Op: OpNone}
			f.Severity = string(catalog.SeverityInfo)
			f.Confidence = Low
			ev["not_proposed"] = fmt.Sprintf("added on %s, within the %s grace period", added.UTC().Format("2006-01-02"), days(s.p.Grace))
			f.Summary = fmt.Sprintf("%s is unused but was added %s ago: kept during the grace period", t, days(s.opts.Now.Sub(added)))
		} else if earlier >= 2 {
			f.Action = Action{Op: OpNone}
			f.Severity = string(catalog.SeverityInfo)
			f.Confidence = Low
			ev["earlier_periods_used"] = earlier
			ev["not_proposed"] = fmt.Sprintf("used in %d earlier %s periods: periodic use", earlier, days(s.p.Window))
			f.Summary = fmt.Sprintf("%s is unused in this window but was used in %d earlier periods: kept as periodic", t, earlier)
		}
		if denied > 0 {
			f.Summary += fmt.Sprintf(" (%s denied)", plural(denied, "attempt", "attempts"))
		}
		s.add(f)
	}
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// days writes a duration in whole days.
func days(d time.Duration) string {
	n := int(math.Round(d.Hours() / 24))
	return fmt.Sprintf("%dd", n)
}

// isStorm tells a retry storm from polling: a run mostly of errors.
func isStorm(r *run) bool { return IsRetryStorm(r.Polls, r.Errors, r.LastErr) }

// detectRetryStorms reports tools whose same call was repeated in bursts
// after errors.
func (s *state) detectRetryStorms() map[string]bool {
	byTool := map[string][]*run{}
	for r := range s.runs.all() {
		if isStorm(r) {
			byTool[r.Tool] = append(byTool[r.Tool], r)
		}
	}
	stormSessions := map[string]bool{}
	for _, t := range sortedKeys(byTool) {
		rs := byTool[t]
		sessions := map[uint64]bool{}
		var calls, maxRepeats int64
		first, last := rs[0].FirstMS, rs[0].LastMS
		for _, r := range rs {
			sessions[r.SessionHash] = true
			stormSessions[r.session()] = true
			calls += r.Polls
			maxRepeats = max(maxRepeats, r.Polls)
			first, last = min(first, r.FirstMS), max(last, r.LastMS)
		}
		s.add(Finding{
			Kind: KindRetryStorm, Tool: t, Severity: string(catalog.SeverityMedium), Confidence: s.confid,
			Summary: fmt.Sprintf("%s was retried with the same arguments after errors in %s (%s, up to %d in a row)",
				t, plural(int64(len(rs)), "burst", "bursts"), plural(calls, "call", "calls"), maxRepeats),
			Evidence: map[string]any{"storms": len(rs), "calls": calls, "sessions": len(sessions), "max_repeats": maxRepeats,
				"first": time.UnixMilli(first).UTC(), "last": time.UnixMilli(last).UTC(), "sql": s.stormSQL(t)},
			Action: Action{Op: OpNone},
		})
	}
	return stormSessions
}

type loopPair struct{ start, tool string }

// detectLoops finds polling loops by their shape (SPEC §5), never by name.
func (s *state) detectLoops(ctx context.Context, _ map[string]bool) error {
	return s.eachPolledTool(func(k loopPair, loops []*run) error { return s.loopFinding(ctx, k, loops) })
}

// eachPolledTool groups the runs that are polling loops by start tool and
// polled tool (and counts their polls: pollsPerLoop), and calls fn for each
// polled tool not behind approval with the pair that has the most loops: a
// polled tool may follow several start tools, the busiest pair carries its
// finding and its limit.
func (s *state) eachPolledTool(fn func(k loopPair, loops []*run) error) error {
	// Counted first, so that each pair's slice is allocated once: there
	// are hundreds of thousands of loops in a large window.
	counts := map[loopPair]int{}
	for r := range s.runs.all() {
		if s.isLoop(r) {
			counts[loopPair{r.StartTool, r.Tool}]++
		}
	}
	pairs := make(map[loopPair][]*run, len(counts))
	for k, n := range counts {
		pairs[k] = make([]*run, 0, n)
	}
	for r := range s.runs.all() {
		if s.isLoop(r) {
			k := loopPair{r.StartTool, r.Tool}
			pairs[k] = append(pairs[k], r)
		}
	}
	keys := make([]loopPair, 0, len(pairs))
	s.pollsPerLoop = make(map[LoopShape][]LoopCount, len(pairs))
	for k, loops := range pairs {
		keys = append(keys, k)
		s.pollsPerLoop[LoopShape{Tool: k.tool, Start: k.start}] = countPolls(loops)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tool != keys[j].tool {
			return keys[i].tool < keys[j].tool
		}
		return keys[i].start < keys[j].start
	})
	done := map[string]bool{}
	sort.SliceStable(keys, func(i, j int) bool { return len(pairs[keys[i]]) > len(pairs[keys[j]]) })
	for _, k := range keys {
		if done[k.tool] || s.approval[k.tool] {
			continue
		}
		done[k.tool] = true
		if err := fn(k, pairs[k]); err != nil {
			return err
		}
	}
	return nil
}

// countPolls counts loops by their number of polls, fewest polls first.
func countPolls(loops []*run) []LoopCount {
	byPolls := map[int64]int64{}
	for _, r := range loops {
		byPolls[r.Polls]++
	}
	out := make([]LoopCount, 0, len(byPolls))
	for polls, n := range byPolls {
		out = append(out, LoopCount{Polls: polls, Loops: n})
	}
	slices.SortFunc(out, func(a, b LoopCount) int { return cmp.Compare(a.Polls, b.Polls) })
	return out
}

// isLoop tells a polling loop from other runs: not a retry storm, started
// by another tool's call shortly before, at a regular interval.
func (s *state) isLoop(r *run) bool {
	if isStorm(r) || !StartsLoop(r.StartTool, r.Tool, time.Duration(r.StartGap*float64(time.Second)), s.p.PollMaxInterval) {
		return false
	}
	return cv(r) <= s.p.PollMaxCV
}

func cv(r *run) float64 {
	if r.MeanGap <= 0 {
		return 0
	}
	return r.SDGap / r.MeanGap
}

func (s *state) loopFinding(ctx context.Context, k loopPair, loops []*run) error {
	polls := make([]float64, len(loops))
	gaps := make([]float64, len(loops))
	cvs := make([]float64, len(loops))
	for i, r := range loops {
		polls[i], gaps[i], cvs[i] = float64(r.Polls), r.MedianGap, cv(r)
	}
	// Each rank found by selection, not by sorting (a polled tool can
	// have tens of thousands of loops).
	medianPolls, medianGap := quantileSelect(polls, 0.5), quantileSelect(gaps, 0.5)
	p95 := quantileSelect(polls, 0.95)
	limitRunaway, runaway := s.runawayAbove(loops, p95)
	var wasted int64
	sessions := make(map[uint64]bool, len(loops))
	runawaySessions := map[uint64]bool{}
	for _, r := range loops {
		sessions[r.SessionHash] = true
		wasted += wastedPolls(r)
	}
	for _, r := range runaway {
		runawaySessions[r.SessionHash] = true
		s.runawaySessions[r.session()] = true
	}
	ev := map[string]any{
		"start_tool": k.start, "loops": len(loops), "median_polls": round(medianPolls, 2), "p95_polls": round(p95, 2),
		"median_interval_s": round(medianGap, 2), "interval_cv": round(quantileSelect(cvs, 0.5), 3),
		"wasted_calls": wasted, "runaway_loops": len(runaway), "runaway_sessions": len(runawaySessions),
		"runaway_threshold_polls": round(limitRunaway, 1), "sessions": len(sessions),
	}
	if len(runaway) > 0 {
		longest := slices.MaxFunc(runaway, func(a, b run) int { return int(a.Polls - b.Polls) })
		ev["longest_loop_polls"] = longest.Polls
	}
	s.polled[k.tool] = true
	s.keepRunaway(k.tool, runaway) // for limits in a gateway's scope (intercept.go)

	// The limit must let normal loops finish and cut runaway ones. It is
	// sized on the peaks of the tool's calls outside runaway loops, per
	// scope key and window; of the windows, take the one under which it
	// refuses the most runaway polls (a per-minute limit only slows a loop
	// that polls below it; a per-hour limit ends it), among those that
	// refuse next to none of the other calls: an agent that keeps one
	// session for days polls dozens of normal loops a day, which a per-day
	// limit sized on short sessions would throttle.
	scope := s.scopeFor(k.tool)
	var runawayPolls int64
	for _, r := range runaway {
		runawayPolls += r.Polls
	}
	windows := []string{policy.WindowMinute, policy.WindowHour, policy.WindowDay}
	if len(runaway) == 0 {
		windows = windows[:1] // nothing to cut: the per-minute limit
	}
	var peaks map[string]*peakStats
	var buckets map[string]windowBuckets
	if len(runaway) == 0 && scope == policy.ScopeSession {
		// Nothing to leave out, per session and minute: the call minutes
		// count it (shared with the rate limits), and only the keys over
		// the limit need their calls read.
		st, b, err := s.minutes.pollWindows(ctx, s.names, k.tool, func(st *peakStats) int { return s.limitValue(st.P99) })
		if err != nil {
			return err
		}
		peaks, buckets = map[string]*peakStats{}, map[string]windowBuckets{policy.WindowMinute: b}
		if st != nil {
			peaks[policy.WindowMinute] = st
		}
	} else {
		var err error
		if peaks, buckets, err = s.q.pollPeaks(ctx, k.tool, scope, windows, runaway); err != nil {
			return err
		}
	}
	var chosen *windowChoice
	for _, window := range windows {
		st := peaks[window]
		if st == nil {
			continue
		}
		c := &windowChoice{limit: policy.Limit{Counter: k.tool + "_rate", Window: window, Max: s.limitValue(st.P99), Scope: scope}, stats: st}
		c.runawayPeak, c.runawayRefused = buckets[window].Runaway.cut(c.limit.Max)
		_, c.normalRefused = buckets[window].Normal.cut(c.limit.Max)
		c.spares = c.normalRefused <= int64(normalTolerance*float64(st.Calls))
		if chosen == nil || c.better(chosen) {
			chosen = c
		}
	}
	f := Finding{Kind: KindPollingLoop, Tool: k.tool, Confidence: s.loopConfidence(len(loops)), Evidence: ev,
		ID: FindingID(KindPollingLoop, s.opts.Server, s.opts.Grant, k.start+">"+k.tool)}
	f.Severity = string(catalog.SeverityMedium)
	if len(runaway) > 0 {
		f.Severity = string(catalog.SeverityHigh)
	}
	f.Summary = fmt.Sprintf("%s is polled after %s: %s, median %s polls every %ss",
		k.tool, k.start, plural(int64(len(loops)), "loop", "loops"), trimFloat(medianPolls), trimFloat(round(medianGap, 1)))
	if wasted > 0 {
		f.Summary += fmt.Sprintf("; %s beyond a backoff's needs", plural(wasted, "poll", "polls"))
	}
	if len(runaway) > 0 {
		f.Summary += fmt.Sprintf("; %s ran away", plural(int64(len(runaway)), "loop", "loops"))
	}
	var limit *policy.Limit
	if chosen != nil {
		limit = &chosen.limit
	}
	ev["sql"] = s.loopSQL(k, limit)
	if chosen != nil {
		ev["limit_scope"], ev["limit_window"] = limit.Scope, limit.Window
		st := chosen.stats
		ev["p50"], ev["p90"], ev["p99"], ev["max"] = st.P50, st.P90, st.P99, st.Max
		ev["normal_polls_refused"] = chosen.normalRefused
		if len(runaway) > 0 {
			ev["runaway_peak"] = chosen.runawayPeak
			ev["runaway_polls"] = runawayPolls
			ev["runaway_polls_refused"] = chosen.runawayRefused
		}
		f.Action = Action{Op: OpRateLimit, Limit: limit}
		f.Summary += fmt.Sprintf(": limit %d per %s per %s", limit.Max, limit.Window, limit.Scope)
		if !chosen.spares {
			f.Summary += fmt.Sprintf(" (it would also refuse %s outside runaway loops: no window spares them all)",
				plural(chosen.normalRefused, "poll", "polls"))
		}
		if cur := s.currentLimit(k.tool, limit.Counter); cur != nil && cur.Max == limit.Max && cur.Window == limit.Window && cur.EffectiveScope() == limit.Scope {
			f.Action = Action{Op: OpNone}
			f.Summary += " (already in force)"
		}
	} else {
		f.Action = Action{Op: OpNone}
	}
	censor(&f, s.usage[k.tool])
	s.add(f)
	return nil
}

// runawayOf are the loops of one pair (start tool, polled tool) that ran
// away: more polls than RunawayThreshold of the 95th percentile of their
// polls, with that percentile and that threshold.
func (s *state) runawayOf(loops []*run) (p95, limit float64, runaway []run) {
	polls := make([]float64, len(loops))
	for i, r := range loops {
		polls[i] = float64(r.Polls)
	}
	p95 = quantile(polls, 0.95)
	limit, runaway = s.runawayAbove(loops, p95)
	return p95, limit, runaway
}

// runawayAbove are the loops of one pair with more polls than
// RunawayThreshold of p95 (their polls' 95th percentile), with that
// threshold.
func (s *state) runawayAbove(loops []*run, p95 float64) (limit float64, runaway []run) {
	limit = RunawayThreshold(p95, s.p)
	for _, r := range loops {
		if float64(r.Polls) > limit {
			runaway = append(runaway, *r)
		}
	}
	return limit, runaway
}

// normalTolerance is the share of a polled tool's calls outside runaway
// loops that its limit may refuse and still count as sparing them: the
// calls sized by p99 × headroom that stand out even so.
const normalTolerance = 0.001

// windowChoice is one window's limit for a polled tool, with what it
// would have refused.
type windowChoice struct {
	limit          policy.Limit
	stats          *peakStats
	runawayPeak    float64
	runawayRefused int64
	normalRefused  int64
	spares         bool // refuses at most normalTolerance of the other calls
}

// better prefers a window that spares the calls outside runaway loops,
// then the one that cuts the most runaway polls; where none spares them,
// the one that refuses the fewest of them. Ties keep the smaller window.
func (c *windowChoice) better(o *windowChoice) bool {
	switch {
	case c.spares != o.spares:
		return c.spares
	case c.spares:
		return c.runawayRefused > o.runawayRefused
	case c.normalRefused != o.normalRefused:
		return c.normalRefused < o.normalRefused
	}
	return c.runawayRefused > o.runawayRefused
}

// wastedPolls counts the polls beyond what an exponential backoff starting at
// the loop's own interval would need to cover the same span.
func wastedPolls(r *run) int64 {
	base := math.Max(r.MedianGap, 1)
	needed := int64(math.Ceil(math.Log2(r.SpanS/base+1))) + 1
	return max(r.Polls-needed, 0)
}

func (s *state) loopConfidence(loops int) string {
	if s.confid == Low || loops < 5 {
		return Low
	}
	if loops < 20 {
		return Medium
	}
	return s.confid
}

// scopeFor limits per session where most of the tool's events carry a
// session the gateway can count (the protocol's own: not a conversation,
// trace or derived one, SPEC §3), else per grant (PolicyLayer's default);
// a polled tool without such sessions is limited per agent where its
// events carry one, so that one agent's runaway loop does not exhaust its
// grant's allowance.
func (s *state) scopeFor(tool string) string {
	u := s.usage[tool]
	switch {
	case u == nil:
		return policy.ScopeGrant
	case u.WithSession*2 >= u.Calls:
		return policy.ScopeSession
	case s.polled[tool] && u.WithAgent*2 >= u.Calls:
		return policy.ScopeAgent
	}
	return policy.ScopeGrant
}

// censor notes on a limit derived from peaks that the traffic was capped:
// calls the gateway rate-limited mean that the observed peaks are censored
// at the limit then in force, so they understate what agents wanted.
func censor(f *Finding, u *usage) {
	if u == nil || u.RateLimited == 0 || f.Action.Op != OpRateLimit {
		return
	}
	f.Evidence["rate_limited_calls"] = u.RateLimited
	f.Evidence["censored"] = true
	f.Summary += fmt.Sprintf(" (peaks censored: the gateway rate-limited %s, so the observed peak is capped at the limit then in force)",
		plural(u.RateLimited, "call", "calls"))
}

// limitValue is ceil(p99 × headroom) with the configured floor.
func (s *state) limitValue(p99 float64) int {
	return max(int(math.Ceil(p99*s.p.Headroom-1e-9)), s.p.MinLimit)
}

// detectRateLimits derives a limit for every used tool from its observed
// per-scope peaks (Cloudflare-style percentiles of per-session maxima).
func (s *state) detectRateLimits(ctx context.Context) error {
	// Polled tools have their limit from the loop detector, tools behind
	// approval need none: only the other used tools are measured.
	var tools []string
	needGrant := false
	for _, t := range sortedKeys(s.usage) {
		if s.polled[t] || s.approval[t] || s.usage[t].Allowed == 0 {
			continue
		}
		tools = append(tools, t)
		if s.scopeFor(t) == policy.ScopeGrant {
			needGrant = true
		}
	}
	stats, err := s.minutes.sessionPeaks(ctx, s.names, tools)
	if err != nil {
		return err
	}
	grantStats := map[string]*peakStats{}
	if needGrant {
		if grantStats, err = s.q.peaks(ctx, s.names, tools, policy.ScopeGrant, policy.WindowMinute); err != nil {
			return err
		}
	}
	for _, t := range sortedKeys(stats) {
		st := stats[t]
		scope := s.scopeFor(t)
		if g := grantStats[t]; scope == policy.ScopeGrant && g != nil {
			st = g
		}
		if s.polled[t] || s.approval[t] {
			continue
		}
		u := s.usage[t]
		if u == nil || u.Allowed == 0 {
			continue
		}
		l := policy.Limit{Counter: t + "_rate", Window: policy.WindowMinute, Max: s.limitValue(st.P99), Scope: scope}
		conf := s.confid
		switch {
		case st.Scopes < 5:
			conf = Low
		case st.Scopes < int64(s.p.MinSessions) && conf == High:
			conf = Medium
		}
		f := Finding{Kind: KindRateLimit, Tool: t, Severity: string(catalog.SeverityInfo), Confidence: conf,
			Evidence: map[string]any{"scope": scope, "window": l.Window, "p50": st.P50, "p90": st.P90, "p99": st.P99,
				"max": st.Max, "scopes": st.Scopes, "sessions": u.AllowedSessions, "headroom": s.p.Headroom, "recommended": l.Max,
				"sql": s.rateLimitSQL(t, scope, l.Window)},
			Action: Action{Op: OpRateLimit, Limit: &l},
			Summary: fmt.Sprintf("%s: %d per %s per %s (p99 of per-%s peaks %s × %g headroom, over %s)",
				t, l.Max, l.Window, scope, scope, trimFloat(st.P99), s.p.Headroom, plural(st.Scopes, scope, scope+"s")),
		}
		censor(&f, u)
		if cur := s.currentLimit(t, l.Counter); cur != nil {
			f.Evidence["current_max"] = cur.Max
			if cur.Max == l.Max && cur.Window == l.Window && cur.EffectiveScope() == scope {
				continue // already in force
			}
		}
		s.add(f)
	}
	return nil
}

// probeMinTools is how many distinct refused or unknown tools a session
// hits within 5 minutes to be probing.
const probeMinTools = 3

// detectProbes reports agents (or sessions) that hit several denied, hidden or
// unknown tools in a burst.
func (s *state) detectProbes(ctx context.Context) (map[string]bool, error) {
	var unknown []string
	if len(s.opts.Catalog) > 0 {
		for t := range s.usage {
			if !s.inCat[t] {
				unknown = append(unknown, t)
			}
		}
		sort.Strings(unknown)
	}
	if s.probeTools() < probeMinTools {
		// No session can hit that many: the calls need no reading.
		return map[string]bool{}, nil
	}
	probes, err := s.q.probes(ctx, probeMinTools, unknown)
	if err != nil {
		return nil, err
	}
	type agg struct {
		sessions    map[string]bool
		bursts      int
		calls       int64
		tools       map[string]bool
		first, last time.Time
	}
	byWho := map[string]*agg{}
	probeSessions := map[string]bool{}
	for _, p := range probes {
		who := p.Agent
		if who == "" {
			who = p.Session
		}
		a := byWho[who]
		if a == nil {
			a = &agg{sessions: map[string]bool{}, tools: map[string]bool{}, first: p.First}
			byWho[who] = a
		}
		a.sessions[p.Session] = true
		probeSessions[p.Session] = true
		a.bursts++
		a.calls += p.Calls
		for _, t := range p.ToolNames {
			a.tools[t] = true
		}
		if p.Last.After(a.last) {
			a.last = p.Last
		}
	}
	for _, who := range sortedKeys(byWho) {
		a := byWho[who]
		tools := sortedKeys(a.tools)
		s.add(Finding{
			Kind: KindDeniedProbe, Tool: who, Severity: string(catalog.SeverityHigh), Confidence: s.confid,
			Summary: fmt.Sprintf("%s hit %s it may not use in %s (%s): investigate",
				who, plural(int64(len(tools)), "tool", "tools"), plural(int64(a.bursts), "burst", "bursts"), strings.Join(tools, ", ")),
			Evidence: map[string]any{"sessions": len(a.sessions), "bursts": a.bursts, "calls": a.calls, "tools": tools,
				"first": a.first, "last": a.last, "sql": s.probeSQL(who, probeMinTools, unknown)},
			Action: Action{Op: OpNone},
		})
	}
	return probeSessions, nil
}

// probeTools counts the tools of the window that a probe's burst can hit,
// from their usage (the aggregates' counts): those with denied or hidden
// calls, and the unknown ones called.
func (s *state) probeTools() int {
	n := 0
	for t, u := range s.usage {
		if u.Denied+u.Hidden > 0 || s.calledUnknown(t) {
			n++
		}
	}
	return n
}

// calledUnknown says whether t is a tool the catalog (when there is one)
// does not hold, called in the window.
func (s *state) calledUnknown(t string) bool {
	u := s.usage[t]
	return len(s.opts.Catalog) > 0 && !s.inCat[t] && u != nil && u.Calls > 0
}

// detectRefused reports unknown tools and allow candidates.
func (s *state) detectRefused(ctx context.Context, probeSessions map[string]bool) error {
	excluded := sortedKeys(probeSessions)
	stats := map[string]*refusedStats{}
	// Only a read-only tool of the catalog that was refused and never
	// allowed can be an allow candidate: the calls are read for those
	// alone, and not at all without one.
	if candidates := s.allowCandidates(); len(candidates) > 0 {
		var err error
		if stats, err = s.q.refusedByTool(ctx, candidates, excluded); err != nil {
			return err
		}
	}
	for _, t := range sortedKeys(s.usage) {
		u := s.usage[t]
		if s.calledUnknown(t) {
			s.add(Finding{
				Kind: KindUnknownTool, Tool: t, Severity: unknownSeverity(u), Confidence: s.confid,
				Summary: fmt.Sprintf("%s is not in the catalog but was called %s (%d allowed)", t, plural(u.Calls, "time", "times"), u.Allowed),
				Evidence: map[string]any{"calls": u.Calls, "allowed": u.Allowed, "refused": u.Refused, "sessions": u.Sessions,
					"last_called": u.LastAllowed, "sql": s.usageSQL(t, "calls", "allowed", "refused", "sessions", "last_called")},
				Action: Action{Op: OpNone},
			})
			continue
		}
		st := stats[t] // an allow candidate's alone
		if st == nil {
			continue
		}
		if st.Refused >= 5 && st.Sessions >= 3 {
			s.add(Finding{
				Kind: KindAllowCandidate, Tool: t, Severity: string(catalog.SeverityInfo), Confidence: Low,
				Summary: fmt.Sprintf("%s (read-only) was refused %s in %s of otherwise normal sessions: consider allowing it (review only)",
					t, plural(st.Refused, "time", "times"), plural(st.Sessions, "session", "sessions")),
				Evidence: map[string]any{"refused": st.Refused, "sessions": st.Sessions, "agents": st.Agents, "first": st.First, "last": st.Last,
					"sql": s.allowCandidateSQL(t, excluded)},
				Action: Action{Op: OpAllow},
			})
		}
	}
	return nil
}

// allowCandidates are the tools detectRefused may propose to allow, from
// their usage, sorted: in the catalog (when there is one), read-only,
// refused in the window and never allowed there.
func (s *state) allowCandidates() []string {
	var out []string
	for _, t := range sortedKeys(s.usage) {
		u := s.usage[t]
		if s.calledUnknown(t) {
			continue
		}
		if s.classes[t].Category == catalog.Read && u.Allowed == 0 && u.Refused > 0 {
			out = append(out, t)
		}
	}
	return out
}

func unknownSeverity(u *usage) string {
	if u.Allowed > 0 {
		return string(catalog.SeverityMedium)
	}
	return string(catalog.SeverityLow)
}

// quantile is the lower nearest-rank quantile of loop statistics: the
// (⌊q·(n−1)⌋+1)-th smallest value, an observed value. It rounds down where
// DuckDB's quantile_disc (the peaks' percentiles) rounds up, so that the
// few runaway loops among a tool's loops (up to 5% of them) cannot become
// the p95 loop length that they are measured against. The evidence SQL
// computes the same with list_sort(list(x))[⌊q·(n−1)⌋+1].
func quantile(v []float64, q float64) float64 {
	return quantileSelect(slices.Clone(v), q)
}

func round(f float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(f*p) / p
}

func trimFloat(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}
