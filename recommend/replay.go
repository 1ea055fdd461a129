package recommend

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
)

// ReplayOptions select the calls to replay and the policy to replay them under.
type ReplayOptions struct {
	Server, Grant string
	From, To      time.Time
	Policy        *policy.Policy
	// Current is the policy the gateway enforced over the window, when
	// known. A call whose arguments were not stored, refused by one of its
	// conditional rules (the event's rule), is refused again by a Policy
	// rule of the same conditions (policy.Refusals), when it was decided
	// under the policy version in force at the window's end (carried);
	// otherwise, or without Current, the replay cannot tell, and a Policy
	// that lets it through counts it as newly allowed.
	Current *policy.Policy
	// FirstN is how many affected calls to list (default 20).
	FirstN int
	// Runaway are sessions known to have had a runaway loop, so that the
	// replay can say whether its rate limiting hits only them.
	Runaway map[string]bool
	// Log receives query timings at debug level; nil is quiet.
	Log *slog.Logger
	// Loops are runaway polling loops (a window's Report.Runaway): the
	// replay counts the calls inside them that the policy's limits refuse
	// (Replay.RunawayPollsCut).
	Loops []RunawayLoop
	// Exact disables the SQL fast path for single-limit tools, so that every
	// limited call goes through the Go evaluator (tests compare the two).
	Exact bool
	// minutes, from the recommendation that proposed the policy, count the
	// window's calls per session and minute already (callMinutes); without
	// them Run counts its own where session_peaks holds days of the window,
	// unless plain (tests compare the two).
	minutes *callMinutes
	plain   bool
	// tools are the window's calls and allowed calls per tool with one,
	// from the recommendation's tool usage (toolsFromUsage), which Run
	// reads from the calls when nil, or when a rule's verdict depends on
	// a call's arguments (it needs each tool's calls that carry them).
	tools map[string]*toolInfo
}

// Run replays the window's tool calls under a policy. Every decision comes
// from policy.Evaluator: tools whose verdict cannot depend on the call
// (hidden, denied by default, behind approval, or allowed without limits) are
// decided once and counted in SQL; tools with one limit and no shared
// all_tools limit are counted in SQL with the same fixed-window arithmetic
// (the first max calls of each window and scope key pass); everything else
// streams through the evaluator in time order.
func Run(ctx context.Context, db *sql.DB, o ReplayOptions) (*Replay, error) {
	if o.FirstN == 0 {
		o.FirstN = 20
	}
	q := query{db: db, server: o.Server, grant: o.Grant, from: o.From, to: o.To, log: o.Log}
	carry, err := q.carriedRefusals(ctx, o.Current)
	if err != nil {
		return nil, err
	}
	tools := o.tools
	if tools == nil || anyConditional(o.Policy) {
		if tools, err = q.replayTools(ctx, carry); err != nil {
			return nil, err
		}
	}
	r := &Replay{ByTool: map[string]*ToolReplay{}}
	acc := &affected{sessions: map[string]bool{}, agents: map[string]bool{}, perTool: map[string]map[string]bool{}, limited: map[string]bool{},
		newly: map[string][]AffectedCall{}}
	probe := policy.NewEvaluator(o.Policy)
	allLimited := o.Policy != nil && o.Policy.AllTools != nil && len(o.Policy.AllTools.Limits) > 0
	var static []string
	staticVerdict := map[string]policy.Verdict{}
	var fast, exact []string
	for _, t := range sortedKeys(tools) {
		info := tools[t]
		v := probe.Peek(policy.Call{Tool: t, TS: o.From})
		rule := toolRule(o.Policy, t)
		// A conditional rule (the tool's or all_tools') decides call by
		// call where the calls carry their arguments, or a refusal of the
		// current policy's tells of them.
		conditional := (rule.Conditional() || o.Policy != nil && o.Policy.AllTools.Conditional()) && info.withArgs+info.refused > 0
		switch {
		case v.Decision != policy.Allowed && !conditional:
			static = append(static, t)
			staticVerdict[t] = v
		case v.Decision == policy.Allowed && !allLimited && (rule == nil || len(rule.Limits) == 0) && !conditional:
			static = append(static, t)
			staticVerdict[t] = v
		case !o.Exact && !allLimited && rule != nil && len(rule.Limits) == 1 && !conditional:
			fast = append(fast, t)
		default:
			exact = append(exact, t)
		}
	}
	var newlyStatic, refusedStatic []string
	for _, t := range static {
		info := tools[t]
		tr := r.tool(t)
		tr.add(staticVerdict[t].Decision, info.calls)
		if staticVerdict[t].Decision == policy.Allowed && info.calls > info.allowed {
			tr.NewlyAllowed += info.calls - info.allowed
			newlyStatic = append(newlyStatic, t)
		}
		if staticVerdict[t].Decision != policy.Allowed && info.allowed > 0 {
			tr.Changed += info.allowed
			tr.changedBy(staticVerdict[t], info.allowed)
			refusedStatic = append(refusedStatic, t)
		}
	}
	if len(refusedStatic) > 0 {
		if err := q.affectedStatic(ctx, refusedStatic, staticVerdict, acc, o.FirstN); err != nil {
			return nil, err
		}
	}
	if err := q.newlyAllowed(ctx, q.db, newlyStatic, "", acc); err != nil {
		return nil, err
	}
	if len(fast) > 0 {
		limits := make(map[string]policy.Limit, len(fast))
		for _, t := range fast {
			limits[t] = o.Policy.Tools[t].Limits[0]
		}
		minutes := o.minutes
		if minutes == nil && !o.plain && anyPerSessionMinute(limits) {
			own, err := q.ownMinutes(ctx)
			if err != nil {
				return nil, err
			}
			defer own.close()
			if own.built {
				minutes = own
			}
		}
		// Only a tool with calls the gateway did not allow can have one the
		// limit newly allows.
		var refusedFast []string
		for _, t := range fast {
			if tools[t].calls > tools[t].allowed {
				refusedFast = append(refusedFast, t)
			}
		}
		limited, cut, err := q.overflow(ctx, limits, refusedFast, o.Loops, acc, o.FirstN, minutes)
		if err != nil {
			return nil, err
		}
		for _, t := range fast {
			tr := r.tool(t)
			tr.Loop.Cut, tr.Loop.Changed = cut[t].total, cut[t].changed
			tr.Loop.changedBy(policy.Verdict{Decision: policy.RateLimited, Rule: limitRule(t, limits[t])}, cut[t].changed)
			tr.add(policy.RateLimited, limited[t].total)
			tr.add(policy.Allowed, tools[t].calls-limited[t].total)
			tr.Changed += limited[t].changed
			tr.changedBy(policy.Verdict{Decision: policy.RateLimited, Rule: limitRule(t, limits[t])}, limited[t].changed)
			// Refused then, and not past the limit now: allowed.
			tr.NewlyAllowed += (tools[t].calls - tools[t].allowed) - (limited[t].total - limited[t].changed)
		}
	}
	if len(exact) > 0 {
		if err := q.stream(ctx, exact, o.Policy, carry, o.Loops, r, acc, o.FirstN); err != nil {
			return nil, err
		}
	}
	if err := q.loopCalls(ctx, o.Loops, r, staticVerdict); err != nil {
		return nil, err
	}
	for t, tr := range r.ByTool {
		r.RunawayPollsCut += tr.Loop.Cut
		r.Calls += tr.Calls
		r.Allowed += tr.Allowed
		r.Denied += tr.Denied
		r.Hidden += tr.Hidden
		r.RateLimited += tr.RateLimited
		r.ApprovalRequired += tr.ApprovalRequired
		r.Changed += tr.Changed
		r.NewlyAllowed += tr.NewlyAllowed
		tr.SessionsAffected = int64(len(acc.perTool[t]))
	}
	r.SessionsAffected = int64(len(acc.sessions))
	r.RateLimitedSessions = int64(len(acc.limited))
	for sk := range acc.limited {
		if o.Runaway[sk] {
			r.RunawaySessions++
		}
	}
	r.AgentsAffected = int64(len(acc.agents))
	sortCalls(acc.first)
	if len(acc.first) > o.FirstN {
		acc.first = acc.first[:o.FirstN]
	}
	r.FirstAffected = acc.first
	if r.FirstAffected == nil {
		r.FirstAffected = []AffectedCall{}
	}
	r.FirstNewlyAllowed = []AffectedCall{}
	for _, t := range sortedKeys(acc.newly) {
		r.FirstNewlyAllowed = append(r.FirstNewlyAllowed, acc.newly[t]...)
	}
	sortCalls(r.FirstNewlyAllowed)
	return r, nil
}

// sortCalls orders calls by time, then id.
func sortCalls(cs []AffectedCall) {
	sort.Slice(cs, func(i, j int) bool { return callBefore(cs[i], cs[j]) })
}

// callBefore orders calls as the replay feeds them: by time, then id.
func callBefore(a, b AffectedCall) bool {
	if !a.TS.Equal(b.TS) {
		return a.TS.Before(b.TS)
	}
	return a.ID < b.ID
}

// newlyPerTool is how many of a tool's newly allowed calls a replay lists.
const newlyPerTool = 3

// noteNewly keeps a tool's earliest newly allowed calls (fed in time order).
func (a *affected) noteNewly(c AffectedCall) {
	if len(a.newly[c.Tool]) < newlyPerTool {
		a.newly[c.Tool] = append(a.newly[c.Tool], c)
	}
}

// rowsQuerier is the database, or a connection holding temporary tables.
type rowsQuerier interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// newlyAllowed lists the earliest refused calls of each tool that the policy
// allows (none without a tool). exclude is a condition naming calls the policy still refuses (the
// overflow of a limit), or "".
//
// They are looked for first up to the day by which every tool had
// newlyPerTool refused calls, by tool_day_use's counts (newlyUntil): the
// scan skips the rest of the window by the calls' times, where it read
// every call of the tools (readonly-dashboard's limited tools over 5M
// calls: ~20 ms). A tool with fewer there (some excluded, or counted
// before the window's start on its first day) has the whole window read.
func (q query) newlyAllowed(ctx context.Context, db rowsQuerier, tools []string, exclude string, acc *affected) error {
	if len(tools) == 0 {
		return nil
	}
	defer q.timed("replay newly allowed")()
	until, err := q.newlyUntil(ctx, db, tools)
	if err != nil {
		return err
	}
	var calls []AffectedCall
	if until.Before(q.to) {
		if calls, err = q.readNewly(ctx, db, tools, exclude, until); err != nil {
			return err
		}
		perTool := map[string]int{}
		for _, c := range calls {
			perTool[c.Tool]++
		}
		for _, t := range tools {
			if perTool[t] < newlyPerTool {
				calls = nil
				break
			}
		}
	}
	if calls == nil {
		if calls, err = q.readNewly(ctx, db, tools, exclude, time.Time{}); err != nil {
			return err
		}
	}
	for _, c := range calls {
		acc.noteNewly(c)
	}
	return nil
}

// newlyUntil is the end of the day by which each of tools had
// newlyPerTool refused calls in the window's days, by tool_day_use's
// counts (q.to when some tool had fewer).
func (q query) newlyUntil(ctx context.Context, db rowsQuerier, tools []string) (time.Time, error) {
	d0, _ := analytics.ToolDay(q.from)
	d1, _ := analytics.ToolDay(q.to)
	rows, err := db.QueryContext(ctx, `
SELECT tool, day, sum(calls - allowed)::BIGINT FROM tool_day_use
WHERE server = $server AND ($grant = '' OR "grant" = $grant) AND list_contains($tools, tool) AND day BETWEEN $d0 AND $d1
GROUP BY ALL ORDER BY tool, day`, q.args(sql.Named("tools", stringList(tools)), sql.Named("d0", d0), sql.Named("d1", d1))...)
	if err != nil {
		return time.Time{}, fmt.Errorf("replay: %w", err)
	}
	defer rows.Close()
	refused, reached := map[string]int64{}, map[string]int64{}
	for rows.Next() {
		var tool string
		var day, n int64
		if err := rows.Scan(&tool, &day, &n); err != nil {
			return time.Time{}, fmt.Errorf("replay: %w", err)
		}
		if _, done := reached[tool]; done {
			continue
		}
		if refused[tool] += n; refused[tool] >= newlyPerTool {
			reached[tool] = day
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, fmt.Errorf("replay: %w", err)
	}
	last := int64(math.MinInt64)
	for _, t := range tools {
		day, ok := reached[t]
		if !ok {
			return q.to, nil
		}
		last = max(last, day)
	}
	return analytics.DayStart(last + 1), nil
}

// readNewly reads each tool's earliest newlyPerTool refused calls in the
// window, in tool and time order, before until unless it is zero.
func (q query) readNewly(ctx context.Context, db rowsQuerier, tools []string, exclude string, until time.Time) ([]AffectedCall, error) {
	if exclude != "" {
		exclude = " AND NOT (" + exclude + ")"
	}
	args := q.args(sql.Named("tools", tools), sql.Named("n", newlyPerTool))
	if !until.IsZero() {
		exclude += " AND ts < $until"
		args = append(args, sql.Named("until", until))
	}
	rows, err := db.QueryContext(ctx, `
SELECT tool, id, ts, coalesce(session, ''), coalesce(agent, ''), decision FROM (
	SELECT *, row_number() OVER (PARTITION BY tool ORDER BY ts, id) AS rn
	FROM calls WHERE `+inWindow+` AND list_contains($tools, tool) AND decision <> 'allowed'`+exclude+`
) WHERE rn <= $n ORDER BY tool, ts, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer rows.Close()
	var out []AffectedCall
	for rows.Next() {
		c := AffectedCall{Replayed: policy.Allowed}
		if err := rows.Scan(&c.Tool, &c.ID, &c.TS, &c.Session, &c.Agent, &c.Recorded); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		c.TS = c.TS.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

func toolRule(p *policy.Policy, tool string) *policy.ToolRule {
	if p == nil {
		return nil
	}
	return p.Tools[tool]
}

// anyConditional says whether a rule of p, a tool's or all_tools', holds a
// requirement or a denial on a call's arguments.
func anyConditional(p *policy.Policy) bool {
	if p == nil {
		return false
	}
	if p.AllTools.Conditional() {
		return true
	}
	for _, r := range p.Tools {
		if r.Conditional() {
			return true
		}
	}
	return false
}

// toolsFromUsage are replayTools' figures from a scope's tool usage over
// the same window (its calls and allowed calls; not those with arguments),
// for the tools called in it: the recommendation has them, where
// replayTools reads every call of the window again (16–22 ms a grant over
// 5M calls).
func toolsFromUsage(usage map[string]*usage) map[string]*toolInfo {
	out := make(map[string]*toolInfo, len(usage))
	for t, u := range usage {
		if u.Calls > 0 {
			out[t] = &toolInfo{calls: u.Calls, allowed: u.Allowed}
		}
	}
	return out
}

func (r *Replay) tool(t string) *ToolReplay {
	tr := r.ByTool[t]
	if tr == nil {
		tr = &ToolReplay{}
		r.ByTool[t] = tr
	}
	return tr
}

// changedBy counts n changed calls under the rule that refuses them now.
func (tr *ToolReplay) changedBy(v policy.Verdict, n int64) { countCause(&tr.ChangedBy, v, n) }

// countCause adds n calls to the cause of verdict v, making the map on first use.
func countCause(m *map[Cause]int64, v policy.Verdict, n int64) {
	if n == 0 {
		return
	}
	if *m == nil {
		*m = map[Cause]int64{}
	}
	(*m)[Cause{v.Decision, v.Rule}] += n
}

// limitRule is the pointer of a tool's only limit, as the evaluator names
// it (the counter escaped as a JSON pointer token).
func limitRule(tool string, l policy.Limit) string {
	return policy.LimitPointer(policy.ToolPointer(tool), 0, l)
}

func (tr *ToolReplay) add(decision string, n int64) {
	tr.Calls += n
	switch decision {
	case policy.Allowed:
		tr.Allowed += n
	case policy.Denied:
		tr.Denied += n
	case policy.Hidden:
		tr.Hidden += n
	case policy.RateLimited:
		tr.RateLimited += n
	case policy.ApprovalRequired:
		tr.ApprovalRequired += n
	}
}

// affected collects the sessions, agents and first calls whose recorded
// "allowed" the replayed policy would change.
type affected struct {
	sessions, agents map[string]bool
	perTool          map[string]map[string]bool
	limited          map[string]bool // sessions with a rate-limited call
	first            []AffectedCall
	newly            map[string][]AffectedCall // per tool, the earliest newly allowed calls
}

func (a *affected) add(c AffectedCall, sk string, firstN int) {
	if sk != "" {
		a.sessions[sk] = true
		if c.Replayed == policy.RateLimited {
			a.limited[sk] = true
		}
		m := a.perTool[c.Tool]
		if m == nil {
			m = map[string]bool{}
			a.perTool[c.Tool] = m
		}
		m[sk] = true
	}
	if c.Agent != "" {
		a.agents[c.Agent] = true
	}
	switch {
	case firstN <= 0:
		return
	case len(a.first) < firstN*4:
		a.first = append(a.first, c)
	default:
		// Keep the earliest firstN*4 by replacing the latest when c is
		// earlier (by time, then id: calls of one instant are many).
		latest := 0
		for i := range a.first {
			if callBefore(a.first[latest], a.first[i]) {
				latest = i
			}
		}
		if callBefore(c, a.first[latest]) {
			a.first[latest] = c
		}
	}
}

// carried are the refusals of the current policy's conditional rules that
// the replay carries over to calls without stored arguments: those of the
// calls decided under the policy version in force at the window's end (its
// newest call's policy_version, when the events carry one), which the
// current policy is taken to be. A call under an earlier version was
// refused by that version's rule at the pointer, whose conditions may be
// others: the replay cannot tell, and counts it as newly allowed where the
// policy lets it through.
type carried struct {
	refusals map[string]*policy.Refusal
	version  string // "" when the events carry no policy_version
}

// applies reports whether a refused call's policy version lets the replay
// carry its refusal over (its rule is looked up in refusals).
func (c carried) applies(version string) bool { return c.version == "" || version == c.version }

func (q query) carriedRefusals(ctx context.Context, current *policy.Policy) (carried, error) {
	c := carried{refusals: policy.Refusals(current)}
	if len(c.refusals) == 0 {
		return c, nil
	}
	var err error
	if c.version, err = q.lastVersion(ctx); err != nil {
		return c, fmt.Errorf("replay: policy version in force: %w", err)
	}
	return c, nil
}

// lastVersion is the policy version of the window's newest call that has
// one (of those at the same instant, the one with the greatest id), ""
// for none. The window's last day is read first, the rest only where the
// last day holds no such call (lastDayFirst), where the whole window's
// times, ids and versions were read.
func (q query) lastVersion(ctx context.Context) (string, error) {
	for _, r := range lastDayFirst(q.from, q.to) {
		var version string
		err := q.db.QueryRowContext(ctx, `
SELECT policy_version FROM calls WHERE `+inWindow+` AND ts > $lo AND ts <= $hi AND policy_version IS NOT NULL
ORDER BY ts DESC, id DESC LIMIT 1`, q.args(sql.Named("lo", r[0]), sql.Named("hi", r[1]))...).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		return version, err
	}
	return "", nil
}

// toolInfo are a tool's calls in the window: all, allowed, with stored
// arguments, and refused without them by a conditional rule of the
// current policy that the replay carries over (carried).
type toolInfo struct{ calls, allowed, withArgs, refused int64 }

func (q query) replayTools(ctx context.Context, carry carried) (map[string]*toolInfo, error) {
	rules := slices.Sorted(maps.Keys(carry.refusals))
	if rules == nil {
		rules = []string{}
	}
	rows, err := q.rows(ctx, "replay", `
SELECT tool, count(*), count(*) FILTER (decision = 'allowed'), count(args),
       count(*) FILTER (decision <> 'allowed' AND args IS NULL AND list_contains($rules, rule)
                        AND ($version = '' OR policy_version = $version))
FROM calls WHERE `+inWindow+` AND tool IS NOT NULL GROUP BY tool`, sql.Named("rules", rules), sql.Named("version", carry.version))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*toolInfo{}
	for rows.Next() {
		var t string
		i := &toolInfo{}
		if err := rows.Scan(&t, &i.calls, &i.allowed, &i.withArgs, &i.refused); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		out[t] = i
	}
	return out, rows.Err()
}

// affectedStatic records the recorded-allowed calls of the tools (in order)
// that the policy refuses outright (verdicts): their sessions and agents,
// and each tool's earliest firstN calls, tool by tool. One query for all
// the tools reads the window's calls of those tools once, for their
// distinct sessions and agents (the rows without an instant) and the
// instant of each tool's firstN-th call (upto: a query per tool read the
// whole window again for each; the two parts as two queries read it
// twice). A second query reads each tool's calls up to that instant, the
// only ones that can be among its earliest by time and id, with their ids
// and sessions (earliestAllowed): read with the first, the ids of
// ops-bot's ~1,000 such calls over 5M calls, scattered over the window,
// loaded ~12 MB of the id column's blocks that no other step read.
func (q query) affectedStatic(ctx context.Context, tools []string, verdicts map[string]policy.Verdict, acc *affected, firstN int) error {
	rows, err := q.rows(ctx, "replay affected", `
WITH a AS MATERIALIZED (
	SELECT tool, ts, coalesce(agent, '') AS agent, `+sessionID+` AS sk
	FROM calls WHERE `+inWindow+` AND list_contains($tools, tool) AND decision = 'allowed'
)
SELECT DISTINCT tool, NULL::TIMESTAMPTZ AS upto, agent, sk FROM a
UNION ALL
SELECT tool, max(ts), NULL, NULL FROM (
	SELECT tool, ts, row_number() OVER (PARTITION BY tool ORDER BY ts) AS rn FROM a
) WHERE rn <= $n GROUP BY tool`, sql.Named("tools", tools), sql.Named("n", firstN))
	if err != nil {
		return err
	}
	defer rows.Close()
	upto := map[string]time.Time{}
	for rows.Next() {
		var tool string
		var at sql.NullTime
		var agent, sk sql.NullString
		if err := rows.Scan(&tool, &at, &agent, &sk); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if !at.Valid { // a session and agent
			acc.add(AffectedCall{Tool: tool, Agent: agent.String}, sk.String, 0)
			continue
		}
		upto[tool] = at.Time
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	byTool, err := q.earliestAllowed(ctx, tools, upto, firstN)
	if err != nil {
		return err
	}
	// In the order the per-tool queries gave them: acc.add's bound on the
	// earliest calls it keeps sees the same list.
	for _, t := range tools {
		calls, v := byTool[t], verdicts[t]
		for i := range calls {
			calls[i].Recorded, calls[i].Replayed, calls[i].Rule = policy.Allowed, v.Decision, v.Rule
		}
		sortCalls(calls)
		acc.first = append(acc.first, calls...)
	}
	return nil
}

// earliestAllowed reads each tool's earliest n recorded-allowed calls in the
// window, by time and id, among its calls up to its instant in upto (that
// of its n-th call by time), in one scan up to the latest of those
// instants, a constant, so that it skips the row groups after it (the
// tools' own instants, a join's condition, bound no scan). A scan per tool,
// each bounded by its own instant, cost more than the ids it spared.
func (q query) earliestAllowed(ctx context.Context, tools []string, upto map[string]time.Time, n int) (map[string][]AffectedCall, error) {
	out := map[string][]AffectedCall{}
	var last time.Time
	var listed []string
	var bounds []time.Time
	for _, t := range tools {
		if at, ok := upto[t]; ok {
			listed, bounds = append(listed, t), append(bounds, at)
			last = laterOf(last, at)
		}
	}
	if len(listed) == 0 {
		return out, nil
	}
	rows, err := q.db.QueryContext(ctx, `
WITH u AS (SELECT unnest($listed::VARCHAR[]) AS u_tool, unnest($bounds::TIMESTAMPTZ[]) AS u_ts)
SELECT tool, id, ts, coalesce(session, ''), coalesce(agent, '') FROM (
	SELECT tool, id, ts, session, agent, row_number() OVER (PARTITION BY tool ORDER BY ts, id) AS rn
	FROM calls JOIN u ON tool = u_tool
	WHERE `+inWindow+` AND ts <= $last AND ts <= u_ts AND decision = 'allowed'
) WHERE rn <= $n`, q.args(sql.Named("listed", listed), sql.Named("bounds", bounds), sql.Named("last", last), sql.Named("n", n))...)
	if err != nil {
		return nil, fmt.Errorf("replay: earliest affected calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c AffectedCall
		if err := rows.Scan(&c.Tool, &c.ID, &c.TS, &c.Session, &c.Agent); err != nil {
			return nil, fmt.Errorf("replay: earliest affected calls: %w", err)
		}
		c.TS = c.TS.UTC()
		out[c.Tool] = append(out[c.Tool], c)
	}
	return out, rows.Err()
}

// ownMinutes are the call minutes of a replay of its own (a backtest's,
// `mcptrail replay`): those of the days session_peaks counts, as a
// recommendation would have built them, instead of every call of the
// limited tools grouped by session and minute; not built (built false)
// where it counts no day of q's window. The caller closes them.
func (q query) ownMinutes(ctx context.Context) (*callMinutes, error) {
	m, err := openCallMinutes(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := m.count(ctx, true); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// anyPerSessionMinute says whether some limit counts per session and
// minute (fromMinutes'): the limits whose buckets call minutes give.
func anyPerSessionMinute(limits map[string]policy.Limit) bool {
	for _, l := range limits {
		if l.EffectiveScope() == policy.ScopeSession && l.Window == policy.WindowMinute && l.Max >= 1 {
			return true
		}
	}
	return false
}

type overflowCount struct{ total, changed int64 }

// limitKeyExpr is the counter key of a call under a replay_limits row's
// scope (ScopeKeySQL's, chosen per row).
const limitKeyExpr = `CASE limit_scope WHEN 'session' THEN ` + sessionScopeKey + `
	                        WHEN 'agent' THEN ` + agentScopeKey + `
	                        ELSE ` + grantScopeKey + ` END`

// overflowBucketsSQL fills overflow_buckets: each limit's windows and
// scope keys over its limit, with the limit and bucketFigures.
const overflowBucketsSQL = `
CREATE OR REPLACE TEMP TABLE overflow_buckets AS
SELECT lid AS b_lid, ` + limitKeyExpr + ` AS b_k, epoch_ms(ts) // bucket_ms AS b_w, any_value(lim) AS b_lim, ` + bucketFigures + `
FROM calls JOIN replay_limits ON tool = limit_tool
WHERE ` + inWindow + `
GROUP BY ALL HAVING count(*) > any_value(lim)`

// bucketFigures are what overflow_buckets keeps of a bucket over its limit
// beside its key: its calls, their first and last instants, and whether
// it is plain (b_plain: every call allowed, of one agent and one session
// key, b_agent and b_skh). A plain bucket's overflow is its b_n - b_lim
// calls past the limit, all changed, all of that session and agent: its
// calls need no numbering unless they are among the earliest listed, or
// a runaway loop may hold some of them (query.overflow). One hash of the
// agent and session key tells the one pair (a missing agent and an empty
// one differ there, and such a bucket is only numbered).
const bucketFigures = `count(*) AS b_n, min(ts) AS b_t0, max(ts) AS b_t1,
	count(*) FILTER (decision = 'allowed') = count(*)
		AND min(hash(agent, ` + sessionKey + `)) = max(hash(agent, ` + sessionKey + `)) AS b_plain,
	coalesce(any_value(agent), '') AS b_agent, hash(any_value(` + sessionKey + `)) AS b_skh`

// overflow counts, in SQL, the calls each tool's single limit would refuse:
// in each fixed window and scope key, every call after the first max (in
// ts, id order).
// It also returns, by tool, the refused calls that fall inside the runaway
// loops given.
// minutes, when they count q's window, give the buckets of its per-session,
// per-minute limits. refused are the limited tools with calls the gateway
// did not allow: the earliest of those the limit allows are listed (acc).
func (q query) overflow(ctx context.Context, limits map[string]policy.Limit, refused []string, loops []RunawayLoop, acc *affected, firstN int, minutes *callMinutes) (map[string]overflowCount, map[string]overflowCount, error) {
	out := map[string]overflowCount{}
	var conn *sql.Conn
	fill := func() error {
		_, err := conn.ExecContext(ctx, overflowBucketsSQL, q.args()...)
		return err
	}
	if minutes.covers(q) {
		// Its temporary tables are on its connection.
		conn = minutes.conn
		fill = func() error { return minutes.fillOverflowBuckets(ctx) }
	} else {
		c, err := q.db.Conn(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
		defer c.Close()
		conn = c
	}
	// Limits go by a small integer id: the big aggregate below groups on
	// it rather than on the tool's name (measured a quarter cheaper).
	if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE replay_limits (
		lid INTEGER, limit_tool VARCHAR, bucket_ms BIGINT, lim BIGINT, limit_scope VARCHAR, limit_rule VARCHAR)`); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	for i, t := range sortedKeys(limits) {
		l := limits[t]
		if _, err := conn.ExecContext(ctx, `INSERT INTO replay_limits VALUES (?, ?, ?, ?, ?, ?)`,
			i, t, policy.WindowLength(l.Window).Milliseconds(), l.Max, l.EffectiveScope(), limitRule(t, l)); err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
	}
	defer q.timed("replay overflow")()
	// First the buckets over their limit (one aggregate over the window),
	// then the calls of those buckets only that need numbering in time
	// order (numbered_buckets); the strings of a call are read only for the
	// calls past the limit.
	if err := fill(); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	if len(loops) > 0 {
		if err := loadExcluded(ctx, conn, loopRuns(loops)); err != nil {
			return nil, nil, err
		}
		// runawayCut counts the calls past a limit inside a loop one by one.
		if _, err := conn.ExecContext(ctx, `
UPDATE overflow_buckets SET b_plain = false
WHERE b_plain AND EXISTS (
	SELECT 1 FROM excluded_runs x JOIN replay_limits ON x.tool = limit_tool
	WHERE lid = b_lid AND x.skh = b_skh AND x.t0 <= epoch_ms(b_t1) AND x.t1 >= epoch_ms(b_t0))`); err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, numberedBucketsSQL, sql.Named("n", max(firstN*4, 0))); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	// The span of the calls to number, as constants: the scan skips the
	// row groups outside it (bounds from subqueries measured ten times
	// slower where few buckets are numbered). None: an empty span.
	var lo, hi sql.NullTime
	if err := conn.QueryRowContext(ctx, `SELECT min(b_t0), max(b_t1) FROM numbered_buckets`).Scan(&lo, &hi); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	if !lo.Valid {
		lo.Time, hi.Time = q.from, q.from
	}
	if _, err := conn.ExecContext(ctx, `
CREATE OR REPLACE TEMP TABLE overflow_calls AS
WITH c AS (
	SELECT id, ts, decision, session, agent, gateway, lid, `+limitKeyExpr+` AS k, epoch_ms(ts) // bucket_ms AS w
	FROM calls JOIN replay_limits ON tool = limit_tool
	WHERE `+inWindow+` AND lid IN (SELECT b_lid FROM numbered_buckets)
		AND ts >= $lo AND ts <= $hi
), o AS (
	SELECT c.*, b_lim, b_plain, row_number() OVER (PARTITION BY lid, k, w ORDER BY ts, id) AS rn
	FROM c JOIN numbered_buckets ON lid = b_lid AND k = b_k AND w = b_w
)
SELECT id, ts, lid, decision, b_plain, coalesce(session, '') AS session, coalesce(agent, '') AS agent,
       hash(`+sessionKey+`) AS skh
FROM o WHERE rn > b_lim`, q.args(sql.Named("lo", lo.Time), sql.Named("hi", hi.Time))...); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	rows, err := conn.QueryContext(ctx, `
SELECT limit_tool, sum(n), sum(changed) FROM (
	SELECT lid, count(*) AS n, count(*) FILTER (decision = 'allowed') AS changed
	FROM overflow_calls WHERE NOT b_plain GROUP BY lid
	UNION ALL
	SELECT b_lid, sum(b_n - b_lim), sum(b_n - b_lim) FROM overflow_buckets WHERE b_plain GROUP BY b_lid
) JOIN replay_limits USING (lid) GROUP BY limit_tool`)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var tool string
		var n overflowCount
		if err := rows.Scan(&tool, &n.total, &n.changed); err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
		out[tool] = n
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	if err := q.newlyAllowed(ctx, conn, refused, "id IN (SELECT id FROM overflow_calls WHERE decision <> 'allowed')", acc); err != nil {
		return nil, nil, err
	}
	// The calls whose recorded "allowed" the limit changes: their sessions
	// and agents (rows without a call), then the earliest of them in time
	// order (affected keeps the earliest firstN*4 it is given).
	rows, err = conn.QueryContext(ctx, `
WITH d AS (
	SELECT DISTINCT lid, skh, agent, NULL::VARCHAR AS id, NULL::TIMESTAMPTZ AS ts, NULL::VARCHAR AS session FROM (
		SELECT lid, skh, agent FROM overflow_calls WHERE decision = 'allowed' AND NOT b_plain
		UNION ALL
		SELECT b_lid, b_skh, b_agent FROM overflow_buckets WHERE b_plain
	)
	UNION ALL (
		SELECT lid, skh, agent, id, ts, session FROM overflow_calls WHERE decision = 'allowed'
		ORDER BY ts, id LIMIT $n
	)
)
SELECT limit_tool, skh::VARCHAR, agent, id, ts, session, limit_rule
FROM d JOIN replay_limits USING (lid)
ORDER BY ts NULLS FIRST, id`, sql.Named("n", max(firstN*4, 0)))
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		c := AffectedCall{Recorded: policy.Allowed, Replayed: policy.RateLimited}
		var sk string
		var id, session, rule sql.NullString
		var ts sql.NullTime
		if err := rows.Scan(&c.Tool, &sk, &c.Agent, &id, &ts, &session, &rule); err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
		if !id.Valid {
			acc.add(c, sk, 0) // a session and agent only
			continue
		}
		c.ID, c.TS, c.Session, c.Rule = id.String, ts.Time.UTC(), session.String, rule.String
		acc.add(c, sk, firstN)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	cut, err := runawayCut(ctx, conn, loops)
	return out, cut, err
}

// numberedBucketsSQL fills numbered_buckets: the buckets over their limit
// whose calls query.overflow numbers, every bucket not plain and the plain
// ones that may hold one of the $n earliest calls past a limit. Those $n
// have no later instant than the first plain buckets' last calls that
// hold $n calls past their limits together (e), so no plain bucket whose
// first call comes after e holds one.
const numberedBucketsSQL = `
CREATE OR REPLACE TEMP TABLE numbered_buckets AS
WITH plain AS (
	SELECT b_t1, sum(b_n - b_lim) OVER (ORDER BY b_t1 ROWS UNBOUNDED PRECEDING) AS past
	FROM overflow_buckets WHERE b_plain
), e AS (
	SELECT coalesce(min(b_t1) FILTER (past >= $n), 'infinity'::TIMESTAMPTZ) AS e FROM plain
)
SELECT * FROM overflow_buckets WHERE NOT b_plain OR b_t0 <= (SELECT e FROM e)`

// runawayCut counts, by tool, the overflow calls that fall inside the
// runaway loops (excluded_runs, loaded by query.overflow): all of them,
// and those the gateway allowed.
func runawayCut(ctx context.Context, conn *sql.Conn, loops []RunawayLoop) (map[string]overflowCount, error) {
	out := map[string]overflowCount{}
	if len(loops) == 0 {
		return out, nil
	}
	rows, err := conn.QueryContext(ctx, `
SELECT limit_tool, count(*), count(*) FILTER (decision = 'allowed')
FROM (SELECT * FROM overflow_calls JOIN replay_limits USING (lid)) o SEMI JOIN excluded_runs x
	ON x.skh = o.skh AND x.tool = o.limit_tool AND epoch_ms(o.ts) BETWEEN x.t0 AND x.t1
GROUP BY limit_tool`)
	if err != nil {
		return nil, fmt.Errorf("replay: runaway polls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var n overflowCount
		if err := rows.Scan(&t, &n.total, &n.changed); err != nil {
			return nil, fmt.Errorf("replay: runaway polls: %w", err)
		}
		out[t] = n
	}
	return out, rows.Err()
}

// streamKinds are the column kinds of stream's query.
var streamKinds = []analytics.ColumnKind{analytics.VarcharColumn, analytics.TimestampColumn, analytics.VarcharColumn,
	analytics.VarcharColumn, analytics.VarcharColumn, analytics.VarcharColumn, analytics.VarcharColumn, analytics.VarcharColumn,
	analytics.VarcharColumn, analytics.VarcharColumn, analytics.VarcharColumn, analytics.VarcharColumn}

// streamSlice is how much of the window stream reads at a time: the
// driver holds a query's whole result in memory (every call of a 5M-call
// window with its arguments took 2.3 GB at once), a day's share of it
// bounded.
const streamSlice = 24 * time.Hour

// stream feeds the tools' calls through the evaluator in time order: the
// window a day at a time (streamSlice), each read a result chunk at a time.
func (q query) stream(ctx context.Context, tools []string, p *policy.Policy, carry carried, loops []RunawayLoop, r *Replay, acc *affected, firstN int) error {
	inLoop := map[string][]RunawayLoop{} // by tool and session
	for _, l := range loops {
		inLoop[l.Tool+"\x00"+l.Session] = append(inLoop[l.Tool+"\x00"+l.Session], l)
	}
	defer q.timed("replay")()
	ev := policy.NewEvaluator(p)
	text := `
SELECT id, ts, tool, coalesce("grant", ''), coalesce(session, ''), coalesce(agent, ''), decision, ` + sessionID + `,
       coalesce(args::VARCHAR, ''), coalesce(rule, ''), coalesce(policy_version, ''),
       coalesce(` + analytics.CountedSession + `, '')
FROM calls WHERE ` + inWindow + ` AND list_contains($tools, tool) ORDER BY ts, id`
	// The strings a call is evaluated with, kept from row to row: most
	// rows repeat the row before's tool, grant, agent or session. The
	// evaluator counts a limit per session by the session the gateway saw
	// (counted); the affected calls name the stored one.
	var tool, grant, session, counted, agent, recorded string
	keep := func(c *analytics.Chunk, col, row int, into *string) {
		if b := c.Bytes(col, row); string(b) != *into {
			*into = string(b)
		}
	}
	each := func(c *analytics.Chunk) error {
		micros := c.Micros(1)
		for row := range c.Len() {
			keep(c, 2, row, &tool)
			keep(c, 3, row, &grant)
			keep(c, 4, row, &session)
			keep(c, 5, row, &agent)
			keep(c, 11, row, &counted)
			ts := time.UnixMicro(micros[row]).UTC()
			call := policy.Call{TS: ts, Tool: tool, Grant: grant, Session: counted, Agent: agent}
			if args := c.Bytes(8, row); len(args) > 0 {
				var m map[string]any
				if json.Unmarshal(args, &m) == nil {
					call.Args = m
				}
			}
			keep(c, 6, row, &recorded)
			if call.Args == nil && recorded != policy.Allowed && len(carry.refusals) > 0 && carry.applies(string(c.Bytes(10, row))) {
				call.Refused = carry.refusals[string(c.Bytes(9, row))]
			}
			v := ev.Evaluate(call)
			tr := r.tool(tool)
			tr.add(v.Decision, 1)
			if recorded != policy.Allowed && v.Decision == policy.Allowed {
				tr.NewlyAllowed++
				acc.noteNewly(AffectedCall{TS: ts, ID: c.String(0, row), Tool: tool, Session: session, Agent: agent, Recorded: recorded, Replayed: v.Decision})
			}
			sk := c.Bytes(7, row)
			if len(inLoop) > 0 && inside(inLoop[tool+"\x00"+string(sk)], ts) {
				tr.Loop.refused(v, recorded == policy.Allowed)
			}
			if recorded == policy.Allowed && v.Decision != policy.Allowed {
				tr.Changed++
				tr.changedBy(v, 1)
				acc.add(AffectedCall{TS: ts, ID: c.String(0, row), Tool: tool, Session: session, Agent: agent,
					Recorded: recorded, Replayed: v.Decision, Rule: v.Rule}, string(sk), firstN)
			}
		}
		return nil
	}
	for lo := q.from; lo.Before(q.to); lo = lo.Add(streamSlice) {
		slice := q
		slice.from, slice.to = lo, lo.Add(streamSlice)
		if slice.to.After(q.to) {
			slice.to = q.to
		}
		if err := analytics.ScanChunks(ctx, q.db, text, slice.args(sql.Named("tools", tools)), streamKinds, each); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	return nil
}
