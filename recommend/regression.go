package recommend

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
)

// The regression watch (SPEC §5, "Regressions"): when the calls of a scope
// start to carry a new policy_version, the calls under it during the first
// RegressionWatch are compared with the RegressionBaseline before it. A tool
// the scope used before that the new version now refuses (hidden, denied,
// behind approval or rate-limited) for a larger share of its sessions is a
// regression; its finding proposes the revert as a JSON Patch against the
// current policy. Tools nobody used before are never a regression, so a
// version that refuses only unused tools raises nothing.

// Defaults of the regression keys of Params.
const (
	DefaultRegressionWatch      = 24 * time.Hour
	DefaultRegressionBaseline   = 14 * 24 * time.Hour
	DefaultRegressionMinRefused = 1
	DefaultRegressionMinShare   = 0.2
)

// Regression is a tool the scope used before a policy version appeared and
// that the version refuses.
type Regression struct {
	Server, Grant, Tool string
	// Version is the new policy_version, Previous the version of the last
	// call before it ("" when that call carried none).
	Version, Previous string
	// Since is the first call under Version; the calls compared are those
	// under Version in [Since, WatchTo] against every call of the scope in
	// [BaselineFrom, Since).
	Since, WatchTo, BaselineFrom time.Time

	BaselineAllowed, BaselineDays          int64
	BaselineFirst                          time.Time // the tool's first allowed call in the baseline
	BaselineSessions, BaselineRefusedSess  int64
	Calls, Refused                         int64
	Hidden, Denied, ApprovalRequired, Rate int64
	Sessions, RefusedSessions, Agents      int64
	// Share is the rise in the share of the tool's sessions with a refused
	// call: under Version, less the baseline's.
	Share float64
	// Vanished: no call under Version, where the baseline's rate predicts
	// Expected, and the current policy refuses the tool.
	Vanished bool
	Expected float64
	// Examples are the first refused calls under Version.
	Examples []RefusedCall
	SQL      string
}

// RefusedCall is one refused call given as evidence.
type RefusedCall struct {
	TS       time.Time `json:"ts"`
	Agent    string    `json:"agent"`
	Session  string    `json:"session"`
	Decision string    `json:"decision"`
	Rule     string    `json:"rule"`
}

// regressionParams are p's regression keys, defaults where unset.
func (p Params) regressionParams() (watch, baseline time.Duration, minRefused int, minShare float64) {
	watch, baseline, minRefused, minShare = p.RegressionWatch, p.RegressionBaseline, p.RegressionMinRefused, p.RegressionMinShare
	if watch <= 0 {
		watch = DefaultRegressionWatch
	}
	if baseline <= 0 {
		baseline = DefaultRegressionBaseline
	}
	if minRefused <= 0 {
		minRefused = DefaultRegressionMinRefused
	}
	if minShare <= 0 {
		minShare = DefaultRegressionMinShare
	}
	return
}

// versionChange is the newest policy version of a scope and where it began.
type versionChange struct {
	version, previous string
	since             time.Time
}

// newVersion is the scope's newest policy version in use at now: of the
// versions with a call in the hour before the scope's newest call (up to
// now; during a rollout both versions are in use, after a rollback only the
// old one), the one first seen last in (now − lookback, now], when a call of
// the scope precedes it within the baseline (a first version has nothing to
// compare with) and none of those calls carries it: a version in use before
// the window is not new there, its first call in the window is only where
// the window cut it; nil when there is none.
func newVersion(ctx context.Context, db *sql.DB, q query, lookback time.Duration, p Params) (*versionChange, error) {
	_, baseline, _, _ := p.regressionParams()
	v, err := newestVersion(ctx, db, q.scopeLit(), q.to.Add(-lookback), q.to)
	if err != nil || v == nil {
		return nil, err
	}
	before := q.scopeLit() + ` AND ts >= ` + sqlTime(v.since.Add(-baseline)) + ` AND ts < ` + sqlTime(v.since)
	// Asked first: where the version was in use, the first row groups read
	// answer it; the last call before it needs every row group of the
	// baseline.
	var inUse bool
	err = db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM calls WHERE `+before+` AND policy_version = `+sqlString(v.version)+`)`).Scan(&inUse)
	if err != nil {
		return nil, fmt.Errorf("regressions: %s before %s: %w", v.version, v.since.Format(time.RFC3339), err)
	}
	if inUse {
		return nil, nil // in use before the window: not new
	}
	var prev sql.NullString
	err = db.QueryRowContext(ctx, `SELECT policy_version FROM calls WHERE `+before+` ORDER BY ts DESC LIMIT 1`).Scan(&prev)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil // the first version of the scope's history
	}
	if err != nil {
		return nil, fmt.Errorf("regressions: version before %s: %w", v.version, err)
	}
	v.previous = prev.String
	return v, nil
}

// newestVersion is newVersion's version and its first call in (from, to]
// under scope (nil when no call there carries a version), as one query
// over the window's calls finds them:
//
//	SELECT version, since FROM (
//		SELECT policy_version AS version, min(ts) AS since, max(ts) AS last,
//		       max(max(ts)) OVER () AS newest
//		FROM calls WHERE scope AND ts > from AND ts <= to AND policy_version IS NOT NULL
//		GROUP BY ALL)
//	WHERE last > newest - INTERVAL 1 HOUR ORDER BY since DESC, version LIMIT 1
//
// but in steps that read the window's last and first days alone where
// they can (the calls are stored in time order per grant, so a day's
// bounds skip the others' row groups): the newest call is looked for on
// the last day, the versions of the hour before it are the candidates,
// and a candidate with a call on the first day has its first call there.
// A candidate without one began later than every one with, and only then
// is the rest of the window read, for those candidates; so is the window
// for its newest call when the last day has none. The one query read the
// versions and times of every call of the window, a cost that grows with
// its calls: over 5M calls of 4 grants, where one version is in use
// throughout, the detector took 78 ms for all grants with it and ~59 ms
// with these steps, and a whole recommendation 11% less time and ~20 MiB
// less memory: no other step read the version column's blocks.
func newestVersion(ctx context.Context, db *sql.DB, scope string, from, to time.Time) (*versionChange, error) {
	versioned := scope + ` AND policy_version IS NOT NULL`
	var newest sql.NullTime
	for _, r := range lastDayFirst(from, to) {
		err := db.QueryRowContext(ctx, `SELECT max(ts) FROM calls WHERE `+versioned+
			` AND ts > `+sqlTime(r[0])+` AND ts <= `+sqlTime(r[1])).Scan(&newest)
		if err != nil {
			return nil, fmt.Errorf("regressions: newest call: %w", err)
		}
		if newest.Valid {
			break
		}
	}
	if !newest.Valid {
		return nil, nil
	}
	// A version whose last call in the window is within the hour before
	// the newest (strictly after its start).
	candidates, err := analytics.QueryColumn[string](ctx, db, `SELECT DISTINCT policy_version FROM calls WHERE `+versioned+
		` AND ts > `+sqlTime(laterOf(from, newest.Time.Add(-time.Hour)))+` AND ts <= `+sqlTime(newest.Time))
	if err != nil {
		return nil, fmt.Errorf("regressions: policy versions of the last hour: %w", err)
	}
	firstDay := from.Add(24 * time.Hour)
	if firstDay.After(to) {
		firstDay = to
	}
	since, err := firstCalls(ctx, db, versioned, from, firstDay, candidates)
	if err != nil {
		return nil, err
	}
	var later []string
	for _, c := range candidates {
		if _, ok := since[c]; !ok {
			later = append(later, c)
		}
	}
	if len(later) > 0 {
		if since, err = firstCalls(ctx, db, versioned, firstDay, to, later); err != nil {
			return nil, err
		}
	}
	var v *versionChange
	for version, first := range since {
		if v == nil || first.After(v.since) || first.Equal(v.since) && version < v.version {
			v = &versionChange{version: version, since: first}
		}
	}
	return v, nil
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// lastDayFirst splits the window (from, to] into its last day and the rest
// before it, in that order, as (lo, hi] pairs; an empty part is left out.
// A step that wants the window's newest call reads the first and stops
// where it finds one: the calls are stored in time order per grant, so the
// day's bounds skip the other row groups.
func lastDayFirst(from, to time.Time) [][2]time.Time {
	lastDay := laterOf(from, to.Add(-24*time.Hour))
	var out [][2]time.Time
	for _, r := range [][2]time.Time{{lastDay, to}, {from, lastDay}} {
		if r[1].After(r[0]) {
			out = append(out, r)
		}
	}
	return out
}

// firstCalls are the first calls in (from, to] of the versions given, of
// the calls where selects; a version without one there is left out.
func firstCalls(ctx context.Context, db *sql.DB, where string, from, to time.Time, versions []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(versions) == 0 || !to.After(from) {
		return out, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT policy_version, min(ts) FROM calls WHERE `+where+
		` AND ts > `+sqlTime(from)+` AND ts <= `+sqlTime(to)+` AND list_contains(`+sqlList(versions)+`, policy_version) GROUP BY ALL`)
	if err != nil {
		return nil, fmt.Errorf("regressions: first calls of %s: %w", strings.Join(versions, ", "), err)
	}
	defer rows.Close()
	for rows.Next() {
		var version string
		var first time.Time
		if err := rows.Scan(&version, &first); err != nil {
			return nil, fmt.Errorf("regressions: first calls: %w", err)
		}
		out[version] = first.UTC()
	}
	return out, rows.Err()
}

// regressionCols are the per-tool counts of a version change, as the
// detector reads them and as evidence.sql names them. b are the baseline's
// calls, w the new version's.
var regressionCols = []struct{ name, expr string }{
	{"baseline_allowed", "count(*) FILTER (b AND decision = 'allowed')"},
	{"baseline_days", "count(DISTINCT epoch_ms(ts) // 86400000) FILTER (b AND decision = 'allowed')"},
	{"baseline_first_allowed", "min(ts) FILTER (b AND decision = 'allowed')"},
	{"baseline_sessions", "count(DISTINCT " + sessionKey + ") FILTER (b)"},
	{"baseline_refused_sessions", "count(DISTINCT " + sessionKey + ") FILTER (b AND decision <> 'allowed')"},
	{"calls", "count(*) FILTER (w)"},
	{"refused", "count(*) FILTER (w AND decision <> 'allowed')"},
	{"hidden", "count(*) FILTER (w AND decision = 'hidden')"},
	{"denied", "count(*) FILTER (w AND decision = 'denied')"},
	{"approval_required", "count(*) FILTER (w AND decision = 'approval_required')"},
	{"rate_limited", "count(*) FILTER (w AND decision = 'rate_limited')"},
	{"sessions", "count(DISTINCT " + sessionKey + ") FILTER (w)"},
	{"refused_sessions", "count(DISTINCT " + sessionKey + ") FILTER (w AND decision <> 'allowed')"},
	{"agents_refused", "count(DISTINCT agent) FILTER (w AND decision <> 'allowed')"},
}

// regressionFrom is the calls a version change compares, flagged b (the
// baseline) and w (under the new version in the watch).
func regressionFrom(q query, v *versionChange, watchTo, baselineFrom time.Time) string {
	w := "policy_version = " + sqlString(v.version) + " AND ts >= " + sqlTime(v.since) + " AND ts <= " + sqlTime(watchTo)
	return `(SELECT *, ts < ` + sqlTime(v.since) + ` AS b, ` + w + ` AS w FROM calls
WHERE ` + q.scopeLit() + ` AND ts >= ` + sqlTime(baselineFrom) + ` AND ts <= ` + sqlTime(watchTo) + `) c`
}

// ServersWithNewVersions lists the servers with a policy version that has
// calls in (now − RegressionWatch, now] and none in (now − lookback, now −
// RegressionWatch]: a version new within the watch. The regression watch
// looks only at them, so that a store without a recent policy change costs
// one scan per check, not one per scope.
func ServersWithNewVersions(ctx context.Context, db *sql.DB, now time.Time, lookback time.Duration, p Params) ([]string, error) {
	watch, _, _, _ := p.regressionParams()
	recent, older := sqlTime(now.Add(-watch)), sqlTime(now.Add(-lookback))
	rows, err := db.QueryContext(ctx, `
WITH recent AS (
	SELECT DISTINCT server, coalesce("grant", '') AS g, policy_version AS v FROM calls
	WHERE ts > `+recent+` AND ts <= `+sqlTime(now)+` AND policy_version IS NOT NULL
)
SELECT DISTINCT r.server FROM recent r
WHERE NOT EXISTS (
	SELECT 1 FROM calls c
	WHERE c.server = r.server AND coalesce(c."grant", '') = r.g AND c.policy_version = r.v
	  AND c.ts > `+older+` AND c.ts <= `+recent+`)
ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("regressions: new policy versions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("regressions: new policy versions: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// RegressionScope selects the calls Regressions compares.
type RegressionScope struct {
	Server string
	Grant  string // "" for every call of the server
	Now    time.Time
	// Lookback is how far back a version's first call is looked for
	// (recommend.window).
	Lookback time.Duration
	// Current is the policy in force (taken as the new version's), nil when
	// unknown: with it, a used tool that it refuses and that has not been
	// called since is a regression too (vanished).
	Current *policy.Policy
}

// VanishedMinExpected is how many calls of a tool the baseline's rate must
// predict since the new version's first call before its silence counts:
// with fewer, no call is no evidence.
const VanishedMinExpected = 3.0

// Regressions finds the regressions of one scope at sc.Now: its newest
// policy version first seen in (now − lookback, now] (see newVersion),
// compared with the baseline before it. A tool is a regression when the new
// version refused it (refused calls, and a rise in the share of sessions
// refused), or when the current policy refuses it and it vanished: no call
// under the new version where the baseline's rate predicts at least
// VanishedMinExpected (an agent that lists tools does not call a hidden one).
func Regressions(ctx context.Context, db *sql.DB, sc RegressionScope, p Params) ([]Regression, error) {
	server, grant := sc.Server, sc.Grant
	q := query{server: server, grant: grant, to: sc.Now.UTC()}
	v, err := newVersion(ctx, db, q, sc.Lookback, p)
	if err != nil || v == nil {
		return nil, err
	}
	watch, baseline, minRefused, minShare := p.regressionParams()
	watchTo := v.since.Add(watch)
	if watchTo.After(q.to) {
		watchTo = q.to
	}
	baselineFrom := v.since.Add(-baseline)
	from := regressionFrom(q, v, watchTo, baselineFrom)
	exprs := make([]string, len(regressionCols))
	for i, c := range regressionCols {
		exprs[i] = c.expr + " AS " + c.name
	}
	rows, err := db.QueryContext(ctx, `
SELECT tool, `+strings.Join(exprs, ", ")+`
FROM `+from+` WHERE tool IS NOT NULL
GROUP BY tool HAVING baseline_allowed > 0 AND (refused >= `+strconv.Itoa(minRefused)+` OR calls = 0)
ORDER BY tool`)
	if err != nil {
		return nil, fmt.Errorf("regressions of %s: %w", server, err)
	}
	defer rows.Close()
	var out []Regression
	for rows.Next() {
		r := Regression{Server: server, Grant: grant, Version: v.version, Previous: v.previous, Since: v.since,
			WatchTo: watchTo, BaselineFrom: baselineFrom}
		if err := rows.Scan(&r.Tool, &r.BaselineAllowed, &r.BaselineDays, &r.BaselineFirst, &r.BaselineSessions, &r.BaselineRefusedSess,
			&r.Calls, &r.Refused, &r.Hidden, &r.Denied, &r.ApprovalRequired, &r.Rate,
			&r.Sessions, &r.RefusedSessions, &r.Agents); err != nil {
			return nil, fmt.Errorf("regressions of %s: %w", server, err)
		}
		r.BaselineFirst = r.BaselineFirst.UTC()
		if r.Calls == 0 {
			// Vanished: the baseline's rate of allowed calls, from the
			// tool's first one in it, over the time under the new version.
			if span := r.Since.Sub(r.BaselineFirst); span > 0 && r.BaselineDays >= 2 {
				r.Expected = math.Round(float64(r.BaselineAllowed)*float64(watchTo.Sub(r.Since))/float64(span)*10) / 10
			}
			if sc.Current == nil || allowsTool(sc.Current, r.Tool) || r.Expected < VanishedMinExpected {
				continue
			}
			r.Vanished = true
		} else {
			// A rise in the share of sessions refused, not in calls: a limit
			// that cuts one session's runaway loop refuses many calls of few
			// sessions, and is the policy working, not a regression.
			r.Share = share(r.RefusedSessions, r.Sessions) - share(r.BaselineRefusedSess, r.BaselineSessions)
			if r.Share < minShare {
				continue
			}
		}
		r.Share = math.Round(r.Share*1000) / 1000
		r.SQL = "SELECT " + strings.Join(exprs, ",\n       ") + "\nFROM " + from + "\nWHERE tool = " + sqlString(r.Tool)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("regressions of %s: %w", server, err)
	}
	for i := range out {
		if out[i].Examples, err = refusedExamples(ctx, db, from, out[i].Tool); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func share(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// refusedExamples are the first three refused calls of a tool under the new
// version.
func refusedExamples(ctx context.Context, db *sql.DB, from, tool string) ([]RefusedCall, error) {
	rows, err := db.QueryContext(ctx, `
SELECT ts, coalesce(agent, ''), `+sessionKey+`, decision, coalesce(rule, '')
FROM `+from+` WHERE w AND decision <> 'allowed' AND tool = `+sqlString(tool)+`
ORDER BY ts, id LIMIT 3`)
	if err != nil {
		return nil, fmt.Errorf("regressions: refused calls of %s: %w", tool, err)
	}
	defer rows.Close()
	var out []RefusedCall
	for rows.Next() {
		var c RefusedCall
		if err := rows.Scan(&c.TS, &c.Agent, &c.Session, &c.Decision, &c.Rule); err != nil {
			return nil, fmt.Errorf("regressions: refused calls of %s: %w", tool, err)
		}
		c.TS = c.TS.UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}

// detectRegressions adds a regression finding for every tool that the
// scope's newest policy version refuses after the scope used it.
func (s *state) detectRegressions(ctx context.Context) error {
	regs, err := Regressions(ctx, s.q.db, RegressionScope{Server: s.opts.Server, Grant: s.opts.Grant, Now: s.q.to,
		Lookback: s.p.Window, Current: s.opts.Current}, s.p)
	if err != nil {
		return err
	}
	for _, r := range regs {
		restore, patch, how, widens, err := revert(s.opts.Current, s.opts.Previous, r)
		if err != nil {
			return err
		}
		sev := "high"
		if r.Refused < r.Calls {
			sev = "medium" // some calls still pass: a tighter limit, not a tool taken away
		}
		prev := r.Previous
		if prev == "" {
			prev = "(none)"
		}
		summary := fmt.Sprintf("policy version %s (first call %s, after %s) refuses %s: %s of its %s calls since (%s), in %s of %s sessions; before, it was allowed %s times on %s days",
			r.Version, r.Since.Format(time.RFC3339), prev, r.Tool, GroupDigits(r.Refused), GroupDigits(r.Calls), refusedBy(r),
			GroupDigits(r.RefusedSessions), GroupDigits(r.Sessions), GroupDigits(r.BaselineAllowed), GroupDigits(r.BaselineDays))
		if r.Vanished {
			summary = fmt.Sprintf("%s vanished under policy version %s (first call %s, after %s), which the current policy %s: no call since, where the %s allowed calls on %s days before predict %.1f",
				r.Tool, r.Version, r.Since.Format(time.RFC3339), prev, refusalOf(s.opts.Current, r.Tool), GroupDigits(r.BaselineAllowed),
				GroupDigits(r.BaselineDays), r.Expected)
		}
		ev := map[string]any{
			"policy_version": r.Version, "previous_version": r.Previous, "since": r.Since, "watch_to": r.WatchTo,
			"baseline_from": r.BaselineFrom, "baseline_allowed": r.BaselineAllowed, "baseline_days": r.BaselineDays,
			"baseline_sessions": r.BaselineSessions, "baseline_refused_sessions": r.BaselineRefusedSess,
			"calls": r.Calls, "refused": r.Refused, "hidden": r.Hidden, "denied": r.Denied,
			"approval_required": r.ApprovalRequired, "rate_limited": r.Rate, "sessions": r.Sessions,
			"refused_sessions": r.RefusedSessions, "agents_refused": r.Agents, "session_share_rise": r.Share,
			"first_refused": r.Examples, "revert_from": how, "sql": r.SQL, "baseline_first_allowed": r.BaselineFirst,
			"vanished": r.Vanished, "expected_calls": r.Expected, "revert_widens": widens,
		}
		s.add(Finding{Kind: KindRegression, Tool: r.Tool, Severity: sev, Confidence: High, Summary: summary,
			Evidence: ev, Action: Action{Op: OpRevert, Restore: restore, Patch: patch}})
	}
	return nil
}

// refusalOf says how p refuses a tool it does not allow.
func refusalOf(p *policy.Policy, tool string) string {
	if p.Hidden(tool) {
		return "hides"
	}
	return "does not allow"
}

// refusedBy says how the refused calls were refused.
func refusedBy(r Regression) string {
	var parts []string
	for _, d := range []struct {
		n    int64
		name string
	}{{r.Hidden, "hidden"}, {r.Denied, "denied"}, {r.ApprovalRequired, "approval required"}, {r.Rate, "rate-limited"}} {
		if d.n > 0 {
			parts = append(parts, GroupDigits(d.n)+" "+d.name)
		}
	}
	return strings.Join(parts, ", ")
}

// Where a revert takes the tool's rule from (evidence.revert_from).
const (
	RevertFromPrevious = "previous_policy" // the policy recorded before the current one
	RevertFromRefusal  = "refusal_removed" // no earlier policy: the current one without its refusal
	RevertNoPolicy     = "no_policy"       // no current policy recorded: no patch can be written
)

// revert is the tool's rule as it was before the regression and the JSON
// Patch against the current policy that restores it: the rule (and the hide
// entry) of the policy recorded before the current one, or, with none, the
// current rule without what refuses the calls. Everything else in the
// current policy is left as it is. widens says how applying the patch widens
// the current policy (Loosenings), which a revert does by design: a reviewer
// sees every way, not only the refusal the regression is about.
func revert(current, previous *policy.Policy, r Regression) (restore *policy.ToolRule, patch json.RawMessage, how string, widens []string, err error) {
	if current == nil {
		return nil, nil, RevertNoPolicy, []string{}, nil
	}
	target := current.Clone()
	if target.Tools == nil {
		target.Tools = map[string]*policy.ToolRule{}
	}
	how = RevertFromRefusal
	if previous != nil && allowsTool(previous, r.Tool) {
		how = RevertFromPrevious
		if pr := previous.Tools[r.Tool]; pr != nil {
			restore = pr.Clone()
		}
	} else {
		restore = withoutRefusal(current.Tools[r.Tool], r)
	}
	target.Hide = slices.DeleteFunc(target.Hide, func(h string) bool { return h == r.Tool })
	if restore == nil {
		restore = &policy.ToolRule{}
	}
	if current.Default == policy.DefaultAllow && isEmptyRule(restore) {
		delete(target.Tools, r.Tool)
	} else {
		target.Tools[r.Tool] = restore
	}
	if patch, err = policy.Patch(current, target); err != nil {
		return nil, nil, how, nil, fmt.Errorf("revert of %s: %w", r.Tool, err)
	}
	widens = Loosenings(current, target, r.Tool)
	if widens == nil {
		widens = []string{}
	}
	return restore, patch, how, widens, nil
}

// withoutRefusal is a rule with what refused the calls taken out: approval
// (deny_if without conditions) when calls needed approval, the limits when
// calls were rate-limited.
func withoutRefusal(rule *policy.ToolRule, r Regression) *policy.ToolRule {
	if rule == nil {
		return &policy.ToolRule{}
	}
	out := rule.Clone()
	if r.ApprovalRequired > 0 || r.Denied > 0 {
		out.DenyIf = slices.DeleteFunc(out.DenyIf, policy.DenyRule.IsApproval)
	}
	if r.Rate > 0 {
		out.Limits = nil
	}
	return out
}

// revertInPolicy reports whether p holds a regression's revert: the tool is
// not hidden, is allowed, and its rule is the one the revert restores.
func revertInPolicy(f Finding, p *policy.Policy) bool {
	if !allowsTool(p, f.Tool) {
		return false
	}
	want := f.Action.Restore
	if want == nil {
		want = &policy.ToolRule{}
	}
	got := p.Tools[f.Tool]
	if got == nil {
		got = &policy.ToolRule{}
	}
	a, errA := json.Marshal(want)
	b, errB := json.Marshal(got)
	return errA == nil && errB == nil && string(a) == string(b)
}

// allowsTool reports whether p lets calls of tool through at all: not
// hidden, and listed or allowed by default.
func allowsTool(p *policy.Policy, tool string) bool {
	_, listed := p.Tools[tool]
	return !p.Hidden(tool) && (listed || p.Default == policy.DefaultAllow)
}
