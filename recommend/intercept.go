package recommend

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mcptrail/mcptrail/policy"
)

// FormatIntercept is the Intercept YAML output of `recommend`.
const FormatIntercept = "intercept"

// gatewayScopes are the limit scopes that an output format's gateway can
// enforce, where they are not policy.json's own (grant, session, agent):
// Intercept keeps its counters in one state store shared by every call
// through it, taken as one gateway instance (SPEC §4).
var gatewayScopes = map[string]string{FormatIntercept: policy.ScopeInstance}

// GatewayPolicy is the proposal with its limits computed in the scope of
// the target gateway.
type GatewayPolicy struct {
	Format string
	Scope  string
	// Policy is the proposal with every limit this run proposed recomputed
	// in Scope; the current policy's own limits are kept as they are.
	Policy *policy.Policy
	Limits []GatewayLimit
	// Header explains the scope, for the output's header.
	Header []string
}

// GatewayLimit is one limit computed in the gateway's scope, with its evidence.
type GatewayLimit struct {
	Tool      string
	Limit     policy.Limit // in the gateway's scope
	Proposed  policy.Limit // the policy.json limit it stands for
	Stats     peakStats    // per-instance peaks per window
	Runaway   bool         // the polled tool's runaway loops were left out of the peaks
	Calls     int64        // calls counted against it in the window
	Refused   int64        // how many of them it would have refused
	Normal    int64        // how many of those were outside runaway loops
	GivenBack int64        // calls answered with a JSON-RPC error, whose quota Intercept gives back
	Instances int64
}

// keepRunaway records a polled tool's runaway loops (detectLoops), which
// gateway-scope peaks leave out as the per-session ones do.
func (s *state) keepRunaway(tool string, runaway []run) {
	if s.runaway == nil {
		s.runaway = map[string][]run{}
	}
	s.runaway[tool] = runaway
}

// runawayLoops lists the runaway loops of every polled tool, in tool, time
// and session order.
func (s *state) runawayLoops() []RunawayLoop {
	var out []RunawayLoop
	for _, t := range sortedKeys(s.runaway) {
		for _, r := range s.runaway[t] {
			out = append(out, RunawayLoop{Tool: t, Session: r.session(), SessionHash: r.SessionHash, First: r.first(), Last: r.last(), Polls: r.Polls})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tool != b.Tool {
			return a.Tool < b.Tool
		}
		if !a.First.Equal(b.First) {
			return a.First.Before(b.First)
		}
		return a.Session < b.Session
	})
	return out
}

// gatewayLimits recomputes the proposal's limits in the scope of the target
// format's gateway, when it has one of its own: for each limit a finding of
// this run proposes (unsuppressed), count the calls per fixed window per
// scope key (for Intercept, per gateway instance) that passed the other
// rules, and take ceil(p99 × headroom) of the peaks with the floor, as SPEC
// §5 does for the other scopes. A polled tool's runaway loops are left out
// of its peaks; since one counter per instance cannot single out a runaway
// session, its window is the one (minute, hour, day) under which the limit
// would have refused the fewest calls outside runaway loops (then the most
// inside them). It returns nil when the target has no scope of its own.
func (s *state) gatewayLimits(ctx context.Context, proposed *policy.Policy) (*GatewayPolicy, error) {
	scope, ok := gatewayScopes[s.opts.Target]
	if !ok {
		return nil, nil
	}
	g := &GatewayPolicy{Format: s.opts.Target, Scope: scope, Policy: proposed.Clone(), Header: []string{
		"Scope: Intercept counts each rate_limit in its state store (SQLite by default, or Redis), shared by",
		"every call through it. mcptrail takes one gateway instance (the events' gateway field) as one store:",
		fmt.Sprintf("the limits below are per-instance peaks (calls per fixed UTC window per instance, ceil(p99 × %g)", s.p.Headroom),
		fmt.Sprintf("with a floor of %d). Give each instance its own store (--state-dir, or --state-prefix on a shared", s.p.MinLimit),
		"Redis): instances sharing a store share its limits. Limits of other scopes are not carried over.",
	}}
	byTool := map[string]policy.Limit{}
	for _, f := range s.findings {
		if f.Suppressed == nil && f.Action.Op == OpRateLimit && f.Action.Limit != nil {
			byTool[f.Tool] = *f.Action.Limit
		}
	}
	// Candidates: one per tool, or one per window for a polled tool.
	var cands []GatewayLimit
	add := func(t string, st *peakStats, window string) {
		if st == nil {
			return // no call passed the other rules in this window
		}
		l := byTool[t]
		cands = append(cands, GatewayLimit{Tool: t, Proposed: l, Stats: *st, Runaway: len(s.runaway[t]) > 0, Instances: st.Scopes,
			Limit: policy.Limit{Counter: l.Counter, Window: window, Max: s.limitValue(st.P99), Scope: scope}})
	}
	plain := map[string][]string{} // tools that are not polled share one query per window
	var runaway []run
	for _, t := range slices.Sorted(maps.Keys(byTool)) {
		l := byTool[t]
		if !s.polled[t] {
			plain[l.Window] = append(plain[l.Window], t)
			continue
		}
		runaway = append(runaway, s.runaway[t]...)
		st, _, err := s.q.pollPeaks(ctx, t, scope, policy.Windows, s.runaway[t])
		if err != nil {
			return nil, err
		}
		for _, w := range policy.Windows {
			add(t, st[w], w)
		}
	}
	for _, w := range slices.Sorted(maps.Keys(plain)) {
		st, err := s.q.peaks(ctx, s.names, plain[w], scope, w)
		if err != nil {
			return nil, err
		}
		for _, t := range plain[w] {
			add(t, st[t], w)
		}
	}
	if err := s.q.refusedIn(ctx, scope, cands, runaway); err != nil {
		return nil, err
	}
	for _, c := range cands { // in tool order, then window order
		n := len(g.Limits)
		switch {
		case n == 0 || g.Limits[n-1].Tool != c.Tool:
			g.Limits = append(g.Limits, c)
		case c.Normal < g.Limits[n-1].Normal || (c.Normal == g.Limits[n-1].Normal && c.Refused > g.Limits[n-1].Refused):
			g.Limits[n-1] = c
		}
	}
	for _, l := range g.Limits {
		setLimit(g.Policy.Tools[l.Tool], l.Limit)
	}
	return g, nil
}

// gatewayLoosenings finds where what the gateway will enforce widens the
// current policy beyond what the proposal itself does: a limit recomputed in
// the gateway's scope (a current cap agents never hit, which the proposal's
// limit replaces, raised again per instance), or a rule the output cannot
// carry over, which --allow-lossy leaves out (a deny_if of several
// conditions, a limit per grant). Each is a loosening of its tool, added to
// the tool's loosening finding or one of its own, so that the output and
// --fail-on widen see it; so is a field or tool the output leaves out
// ("field removed: <pointer>"). It reports whether it changed the findings.
// Without a current policy the proposal is compared with the window's
// decisions, which per-instance peaks are sized from.
func (s *state) gatewayLoosenings(proposed *policy.Policy, g *GatewayPolicy) (bool, error) {
	cur := s.opts.Current
	if cur == nil {
		return false, nil
	}
	enforced, fields := enforcedByIntercept(g.Policy)
	removed, err := removedFields(cur, fields)
	if err != nil {
		return false, err
	}
	tools := map[string]bool{}
	for _, p := range []*policy.Policy{cur, proposed, enforced} {
		for t := range p.Tools {
			tools[t] = true
		}
	}
	changed := false
	for _, t := range slices.Sorted(maps.Keys(tools)) {
		already := Loosenings(cur, proposed, t)
		var extra []string
		for _, w := range append(Loosenings(cur, enforced, t), fieldChanges(cur, removed, t)...) {
			if !slices.Contains(already, w) {
				extra = append(extra, w+inOutput+g.Format+" output)")
			}
		}
		if len(extra) == 0 {
			continue
		}
		changed = true
		text := strings.Join(extra, "; ")
		if i := slices.IndexFunc(s.findings, func(f Finding) bool { return f.Kind == KindLoosening && f.Tool == t }); i >= 0 {
			f := &s.findings[i]
			f.Summary += "; " + text
			changes, _ := f.Evidence["changes"].([]string)
			f.Evidence["changes"] = append(changes, extra...)
			continue
		}
		s.add(s.looseningFinding(t, g.Policy, fmt.Sprintf("%s: the %s output widens access (%s)", t, g.Format, text),
			map[string]any{"before": RuleText(cur, t), "after": RuleText(g.Policy, t), "changes": extra, "newly_allowed": int64(0)}))
	}
	return changed, nil
}

// enforcedByIntercept is p as Intercept will enforce it: without the
// deny_if entries and limits its YAML cannot carry over, which
// --allow-lossy leaves out. It returns the pointers of the rest of what
// the YAML leaves out (fields, tools), which p, holding them still, cannot
// show as missing.
func enforcedByIntercept(p *policy.Policy) (*policy.Policy, []string) {
	out, err := policy.Intercept(p, policy.InterceptOptions{})
	if err != nil || len(out.Dropped) == 0 {
		return p, nil
	}
	dropped := map[string]bool{}
	for _, d := range out.Dropped {
		dropped[d.Pointer] = true
	}
	q := p.Clone()
	keep := func(base string, r *policy.ToolRule) {
		if r == nil {
			return
		}
		var deny []policy.DenyRule
		for i, d := range r.DenyIf {
			if ptr := base + "/deny_if/" + strconv.Itoa(i); dropped[ptr] {
				delete(dropped, ptr)
			} else {
				deny = append(deny, d)
			}
		}
		var limits []policy.Limit
		for i, l := range r.Limits {
			if ptr := policy.LimitPointer(base, i, l); dropped[ptr] {
				delete(dropped, ptr)
			} else {
				limits = append(limits, l)
			}
		}
		r.DenyIf, r.Limits = deny, limits
	}
	for name, r := range q.Tools {
		keep(policy.ToolPointer(name), r)
	}
	keep("/all_tools", q.AllTools)
	return q, slices.Sorted(maps.Keys(dropped))
}

// removedFields are the pointers among dropped that the current policy
// holds: what the Intercept output loses of it.
func removedFields(cur *policy.Policy, dropped []string) ([]string, error) {
	if len(dropped) == 0 {
		return nil, nil
	}
	held, err := cur.Holding(dropped)
	if err != nil {
		return nil, fmt.Errorf("dropped fields: %w", err)
	}
	var out []string
	for i, ptr := range dropped {
		if held[i] {
			out = append(out, ptr)
		}
	}
	return out, nil
}

// fieldChanges are tool t's changes by the removed fields: "field removed:
// <pointer>". Whatever a field the output cannot carry meant, losing it may
// widen access. A tool's field concerns the tool; a field of the policy or
// of all_tools every tool the current policy lets call.
func fieldChanges(cur *policy.Policy, removed []string, t string) []string {
	own := policy.ToolPointer(t)
	var out []string
	for _, ptr := range removed {
		switch {
		case ptr == own || strings.HasPrefix(ptr, own+"/"):
		case strings.HasPrefix(ptr, "/tools/"):
			continue // another tool's
		case accessOf(cur, t).level < accApproval:
			continue
		}
		out = append(out, "field removed: "+ptr)
	}
	return out
}

// refusedIn counts, for each limit, the calls it would have counted in the
// window, how many of them it would have refused (in time order, every call
// once max calls before it in its window and scope key consumed quota: a
// refused call consumes none, nor one consumesQuota leaves out), and how
// many of those lie outside runaway loops.
func (q query) refusedIn(ctx context.Context, scope string, limits []GatewayLimit, runaway []run) error {
	if len(limits) == 0 {
		return nil
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("gateway-scope refusals: %w", err)
	}
	defer conn.Close()
	if err := loadExcluded(ctx, conn, runaway); err != nil {
		return err
	}
	var ids, ms, maxes []int64
	var tools []string
	for i, l := range limits {
		ids = append(ids, int64(i))
		tools = append(tools, l.Tool)
		ms = append(ms, policy.WindowLength(l.Limit.Window).Milliseconds())
		maxes = append(maxes, int64(l.Limit.Max))
	}
	defer q.timed("gateway-scope refusals")()
	rows, err := conn.QueryContext(ctx, `
WITH l AS (
	SELECT unnest($ids::BIGINT[]) AS id, unnest($tools::VARCHAR[]) AS t, unnest($ms::BIGINT[]) AS ms, unnest($maxes::BIGINT[]) AS mx
), c AS (
	SELECT l.id, l.mx, calls.ts, calls.id AS cid, `+ScopeKeySQL(scope)+` AS k, epoch_ms(calls.ts) // l.ms AS w, x.skh IS NOT NULL AS runaway,
	       `+consumesQuota(scope)+` AS consumes
	FROM calls JOIN l ON calls.tool = l.t
	LEFT JOIN excluded_runs x ON x.skh = hash(`+sessionKey+`) AND x.tool = calls.tool AND epoch_ms(calls.ts) BETWEEN x.t0 AND x.t1
	WHERE `+inWindow+` AND decision IN ('allowed', 'rate_limited')
), r AS (
	-- Refused once the calls before it in its window took the quota: a
	-- refused call takes none, and neither does one Intercept gives back.
	SELECT id, runaway, consumes, coalesce(sum(consumes::INTEGER) OVER (PARTITION BY id, k, w ORDER BY ts, cid
	       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) >= mx AS refused FROM c
)
SELECT id, count(*), count(*) FILTER (refused), count(*) FILTER (refused AND NOT runaway), count(*) FILTER (NOT consumes)
FROM r GROUP BY id`,
		q.args(sql.Named("ids", ids), sql.Named("tools", tools), sql.Named("ms", ms), sql.Named("maxes", maxes))...)
	if err != nil {
		return fmt.Errorf("gateway-scope refusals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, calls, refused, normal, givenBack int64
		if err := rows.Scan(&id, &calls, &refused, &normal, &givenBack); err != nil {
			return fmt.Errorf("gateway-scope refusals: %w", err)
		}
		limits[id].Calls, limits[id].Refused, limits[id].Normal, limits[id].GivenBack = calls, refused, normal, givenBack
	}
	return rows.Err()
}

// note is the comment written above a gateway-scope limit: its evidence.
func (l GatewayLimit) note() string {
	runaway := ""
	if l.Runaway {
		runaway = ", runaway loops left out"
	}
	share := 0.0
	if l.Calls > 0 {
		share = 100 * float64(l.Refused) / float64(l.Calls)
	}
	text := fmt.Sprintf("%d per %s per instance: p99 of per-instance peaks %s over %s%s (policy.json: %d per %s per %s).\n"+
		"Over the window it would have refused %s of %s calls (%.2f%%)",
		l.Limit.Max, l.Limit.Window, trimFloat(l.Stats.P99), plural(l.Instances, "instance", "instances"), runaway,
		l.Proposed.Max, l.Proposed.Window, l.Proposed.EffectiveScope(),
		GroupDigits(l.Refused), GroupDigits(l.Calls), share)
	if l.Runaway {
		text += fmt.Sprintf(", %s of them outside runaway loops", GroupDigits(l.Normal))
	}
	if l.GivenBack > 0 {
		text += fmt.Sprintf(".\nIntercept gives back the quota of the calls answered with a JSON-RPC error (%s of the %s)",
			GroupDigits(l.GivenBack), GroupDigits(l.Calls))
	}
	return text + "."
}

// LossyError is the refusal to write a format that cannot carry every rule
// of the proposal; Dropped lists them.
type LossyError struct {
	Format  string
	Dropped []policy.Dropped
}

func (e *LossyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the proposal cannot be written as %s without losing %d rule(s):\n", e.Format, len(e.Dropped))
	for _, d := range e.Dropped {
		fmt.Fprintf(&b, "  %s\n", d)
	}
	b.WriteString("--allow-lossy writes it without them (listed on stderr and in its header); or change them in the policy")
	return b.String()
}

// WriteIntercept writes the proposal as Intercept YAML, with the limits of
// r.Gateway when they were computed for Intercept. When a rule cannot be
// carried over it fails with a *LossyError, unless allowLossy: then it
// writes the YAML without those rules, lists them in its header and, when
// stderr is not nil, on stderr.
func WriteIntercept(w, stderr io.Writer, r *Report, allowLossy bool) error {
	p := r.Policy
	opts := policy.InterceptOptions{Header: []string{
		"Scope: Intercept counts each rate_limit in its state store, shared by every call through it (one",
		"gateway instance); limits of other scopes are not carried over.",
	}}
	if g := r.Gateway; g != nil && g.Format == FormatIntercept {
		p, opts.Header = g.Policy, g.Header
		opts.LimitNotes = map[string]string{}
		for _, l := range g.Limits {
			opts.LimitNotes[policy.LimitPointer(policy.ToolPointer(l.Tool), 0, l.Limit)] = l.note()
		}
	}
	out, err := policy.Intercept(p, opts)
	if err != nil {
		return err
	}
	if len(out.Dropped) > 0 {
		if !allowLossy {
			return &LossyError{Format: FormatIntercept, Dropped: out.Dropped}
		}
		if stderr != nil {
			for _, d := range out.Dropped {
				fmt.Fprintf(stderr, "mcptrail: not carried over to Intercept (--allow-lossy): %s\n", d)
			}
		}
	}
	_, err = w.Write(out.YAML)
	return err
}

// consumesQuota is the SQL condition that an allowed call consumed quota
// of a limit counted per scope. Intercept gives a call's quota back when
// its upstream answers with a JSON-RPC error (its proxy rolls back the
// call's reservations), which an event records as error_code; a result
// with isError is no such error. policy.json's counters keep every call
// the policy lets through (SPEC §4).
func consumesQuota(scope string) string {
	if givesQuotaBack(scope) {
		// Only a call the upstream answered: a recorded refusal's error
		// code is the recording gateway's, and forwarded it takes quota.
		return `NOT (decision = 'allowed' AND error_code IS NOT NULL)`
	}
	return `true`
}

// givesQuotaBack reports whether a limit counted per scope gives back the
// quota of a call answered with an error: Intercept's, per state store.
func givesQuotaBack(scope string) bool { return scope == policy.ScopeInstance }
