// Package recommend derives a least-privilege policy for one MCP server from
// its call history: detectors computed in DuckDB SQL produce findings with
// evidence and confidence, the findings shape a proposed policy.json, and the
// proposal is replayed over the same history with the policy package's
// evaluator before anyone sees it. Renderers turn the result into text, JSON,
// Markdown (a PR body), the policy, a diff, Intercept YAML or a PR folder.
package recommend

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/policy"
)

// Params are the thresholds of SPEC §5 (config keys recommend.*).
type Params struct {
	Window       time.Duration
	MinDays      int
	MinSessions  int
	Headroom     float64
	MinLimit     int
	RareMaxCalls int
	RareMaxDays  int
	// RareMaxSessionShare: a risky tool used by at most this share of the
	// scope's sessions (with allowed calls) is rarely used.
	RareMaxSessionShare float64
	PollMinCalls        int
	PollMaxInterval     time.Duration
	PollMaxCV           float64
	RunawayFactor       float64
	Grace               time.Duration
	// The regression watch (regression.go, config regression.*): how long
	// after a policy version appears its calls are compared, with how much
	// history before it, and how many refused calls and what rise in the
	// share of sessions refused make a regression. Zero takes the default.
	RegressionWatch      time.Duration
	RegressionBaseline   time.Duration
	RegressionMinRefused int
	RegressionMinShare   float64
}

// DefaultParams are the defaults of SPEC §7.
func DefaultParams() Params {
	return Params{
		Window: 30 * 24 * time.Hour, MinDays: 7, MinSessions: 20, Headroom: 1.5, MinLimit: 5,
		RareMaxCalls: 5, RareMaxDays: 3, RareMaxSessionShare: 0.01, PollMinCalls: 3, PollMaxInterval: 60 * time.Second,
		PollMaxCV: 0.5, RunawayFactor: 3, Grace: 14 * 24 * time.Hour,
		RegressionWatch: DefaultRegressionWatch, RegressionBaseline: DefaultRegressionBaseline,
		RegressionMinRefused: DefaultRegressionMinRefused, RegressionMinShare: DefaultRegressionMinShare,
	}
}

// Options select what to analyse.
type Options struct {
	Server string
	Grant  string // "" analyses every grant together
	Now    time.Time
	Params Params
	// Catalog is the server's classified tool list; nil when none is known.
	Catalog []catalog.Classification
	// ToolAdded maps a tool to when an import first listed it, for grace;
	// tools of the server's first import are absent (no grace).
	ToolAdded map[string]time.Time
	// Current is the policy in force, nil when unknown.
	Current *policy.Policy
	// CurrentServerWide says that Current is the server-wide policy, in
	// force for a grant that has none of its own.
	CurrentServerWide bool
	// Previous is the policy recorded before Current, nil when none: a
	// regression's revert restores its rule for the tool.
	Previous *policy.Policy
	// Suppressions in force or expired; expired ones do not apply.
	Suppressions []analytics.Suppression
	// SuppressionLog lists changes to suppressions, shown in the output.
	SuppressionLog []analytics.SuppressionChange
	// Log receives the time each stage took, at debug level; nil is quiet.
	Log *slog.Logger
	// Target is the output format: for "intercept" the proposed limits are
	// also computed in that gateway's scope (intercept.go, Report.Gateway).
	Target string
	// ProposalOnly stops once the policy is proposed: the Report holds
	// the window, gates, confidence, the findings of the detectors that
	// shape the policy (unused and risky tools, polling loops, retry
	// storms, rate limits), the policy and the runaway loops, and no
	// replay, rule changes, patch or gateway limits, nor the findings that
	// are only reported (denied probes, unknown tools, allow candidates,
	// regressions, loosenings). A backtest, which replays the proposal
	// over another window, needs no more of its training run.
	ProposalOnly bool
	// figures are the scope's window figures when RecommendGrants has
	// counted every grant's in one pass (grantFigures); nil: counted here.
	figures *figures
	// usage is the scope's tool usage when RecommendGrants has read every
	// grant's in one pass (grantUsage); nil: read here.
	usage map[string]*usage
}

// Report is the recommendation for one server (SPEC §5).
type Report struct {
	Server      string          `json:"server"`
	Grant       string          `json:"grant"`
	GeneratedAt time.Time       `json:"generated_at"`
	Window      Window          `json:"window"`
	Confidence  string          `json:"confidence"`
	Draft       bool            `json:"draft"`
	Gates       []Gate          `json:"gates"`
	Findings    []Finding       `json:"findings"`
	Policy      *policy.Policy  `json:"policy"`
	Current     *policy.Policy  `json:"current"`
	Patch       json.RawMessage `json:"patch"`
	Replay      Replay          `json:"replay"`
	// RuleChanges lists, for every tool the proposal changes, the current
	// rule (or, with no current policy, the window's decisions) and the
	// proposed one.
	RuleChanges []RuleChange `json:"rule_changes"`
	// SuppressionChanges are the changes to suppressions made in the window.
	SuppressionChanges []analytics.SuppressionChange `json:"suppression_changes"`
	// Gateway is the proposal in the scope of Options.Target's gateway; nil
	// when the target enforces policy.json's own scopes.
	Gateway *GatewayPolicy `json:"-"`
	// Recorded is what recording the run in the finding history did; nil
	// when the run was not recorded (AdvanceHistory).
	Recorded *Recorded `json:"-"`
	// Runaway are the runaway polling loops found in the window, for the
	// backtest's count of runaway polls a proposal cuts.
	Runaway []RunawayLoop `json:"-"`
	// PollsPerLoop counts the window's polling loops of each shape by their
	// number of polls, for the report's histograms: the loops the detector
	// found, so that the report does not look for them again.
	PollsPerLoop map[LoopShape][]LoopCount `json:"-"`
}

// LoopShape is a polling loop's polled tool and the tool whose call
// started it.
type LoopShape struct{ Tool, Start string }

// LoopCount is how many loops of a shape made Polls polls.
type LoopCount struct{ Polls, Loops int64 }

// Window describes the analysed history.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Days int       `json:"days"`
	// HistoryDays are the window's days that the scope's history covers
	// (whole days from its first call, or the window's start): fewer than
	// Days when the history is younger than the window.
	HistoryDays int   `json:"history_days"`
	Calls       int64 `json:"calls"`
	// SessionSources count the window's calls by where their session came
	// from (SPEC §3): the analyses say which they used.
	SessionSources SessionSources `json:"session_sources"`
	Sessions       int64          `json:"sessions"`
	Agents         int64          `json:"agents"`
}

// Gate is one data-sufficiency check; a failed gate lowers confidence.
type Gate struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Optional gates (a catalog, a current policy) only lower the
	// confidence when they fail: what they check is missing, not wrong.
	Optional bool `json:"optional,omitempty"`
}

// Mark is how a gate reads next to its name: ok, FAIL for a required gate
// that failed, missing for an optional one.
func (g Gate) Mark() string {
	switch {
	case g.OK:
		return "ok"
	case g.Optional:
		return "missing"
	}
	return "FAIL"
}

// Finding kinds (SPEC §5).
const (
	KindUnusedTool     = "unused_tool"
	KindRiskyTool      = "risky_tool"
	KindPollingLoop    = "polling_loop"
	KindRateLimit      = "rate_limit"
	KindRetryStorm     = "retry_storm"
	KindDeniedProbe    = "denied_probe"
	KindUnknownTool    = "unknown_tool"
	KindAllowCandidate = "allow_candidate"
	// KindLoosening is a tool whose access the proposal widens: refused →
	// approval or allowed, approval → allowed, a limit raised, removed or
	// counted over a broader scope, conditions dropped, or calls the gateway
	// refused that would pass.
	KindLoosening = "loosening"
	// KindRegression: a new policy version refuses a tool the scope used
	// before it (regression.go).
	KindRegression = "regression"
)

// Action ops.
const (
	OpHide            = "hide"
	OpRequireApproval = "require_approval"
	OpRateLimit       = "rate_limit"
	OpAllow           = "allow"
	OpNone            = "none"
	// OpWiden marks a loosening: the proposal widens the tool's access as
	// its evidence says (applied, and loud about it).
	OpWiden = "widen"
	// OpRevert restores a regressed tool's rule (Action.Patch, against the
	// current policy); never applied to the proposal by itself.
	OpRevert = "revert"
)

// Confidence levels.
const (
	High   = "high"
	Medium = "medium"
	Low    = "low"
)

// Finding is one recommendation with the evidence that produced it.
type Finding struct {
	ID         string         `json:"id"`
	Kind       string         `json:"kind"`
	Tool       string         `json:"tool"`
	Severity   string         `json:"severity"`
	Confidence string         `json:"confidence"`
	Summary    string         `json:"summary"`
	Evidence   map[string]any `json:"evidence"`
	Action     Action         `json:"action"`
	Suppressed *Suppressed    `json:"suppressed,omitempty"`
	// History is the finding's place in the finding history; nil when the
	// run was not recorded (recommend/history.go, SPEC §5).
	History *History `json:"history,omitempty"`
}

// Action is what the proposed policy does about a finding.
type Action struct {
	Op    string        `json:"op"`
	Limit *policy.Limit `json:"limit,omitempty"`
	// Restore and Patch are a revert's: the tool's rule as it was, and the
	// RFC 6902 JSON Patch that restores it in the current policy (null with
	// no current policy recorded).
	Restore *policy.ToolRule `json:"restore,omitempty"`
	Patch   json.RawMessage  `json:"patch,omitempty"`
}

// Suppressed explains why a finding is left out of the proposal.
type Suppressed struct {
	Reason string    `json:"reason"`
	By     string    `json:"by,omitempty"`
	Until  time.Time `json:"until"`
}

// Replay is what a policy would have done to the window's calls.
type Replay struct {
	ReplayTotals
	ByTool map[string]*ToolReplay `json:"by_tool"`
	// FirstAffected are the earliest calls the gateway allowed that the
	// policy would refuse.
	FirstAffected []AffectedCall `json:"first_affected"`
	// FirstNewlyAllowed are the earliest calls the gateway refused that the
	// policy would allow (at most a few per tool).
	FirstNewlyAllowed []AffectedCall `json:"first_newly_allowed"`
}

// ReplayTotals are a replay's counts over all tools; reports quote them.
type ReplayTotals struct {
	Calls            int64 `json:"calls"`
	Allowed          int64 `json:"allowed"`
	Denied           int64 `json:"denied"`
	Hidden           int64 `json:"hidden"`
	RateLimited      int64 `json:"rate_limited"`
	ApprovalRequired int64 `json:"approval_required"`
	// Changed counts calls the gateway allowed that this policy would not.
	Changed int64 `json:"changed"`
	// NewlyAllowed counts calls the gateway refused (denied, hidden,
	// rate-limited or held for approval) that this policy would allow.
	NewlyAllowed     int64 `json:"newly_allowed"`
	SessionsAffected int64 `json:"sessions_affected"`
	AgentsAffected   int64 `json:"agents_affected"`
	// RateLimitedSessions are the sessions with a call the policy's limits
	// refuse; RunawaySessions how many of them had a runaway polling loop.
	RateLimitedSessions int64 `json:"rate_limited_sessions"`
	RunawaySessions     int64 `json:"rate_limited_runaway_sessions"`
	// RunawayPollsCut counts the calls inside ReplayOptions.Loops that the
	// policy's limits refuse (0 when no loops were given).
	RunawayPollsCut int64 `json:"-"`
}

// ToolReplay is the replay of one tool's calls.
type ToolReplay struct {
	Calls            int64 `json:"calls"`
	Allowed          int64 `json:"allowed"`
	Denied           int64 `json:"denied"`
	Hidden           int64 `json:"hidden"`
	RateLimited      int64 `json:"rate_limited"`
	ApprovalRequired int64 `json:"approval_required"`
	Changed          int64 `json:"changed"`
	NewlyAllowed     int64 `json:"newly_allowed"`
	SessionsAffected int64 `json:"sessions_affected"`
	// ChangedBy splits Changed by what refuses the calls now: the decision
	// and the rule (policy.RuleHidden, policy.RuleDefaultDeny, a deny_if's or
	// a limit's pointer); the backtest reports it, recommend's outputs leave
	// it out.
	ChangedBy map[Cause]int64 `json:"-"`
	// Loop are the calls inside ReplayOptions.Loops (counted in the fields
	// above too).
	Loop LoopCalls `json:"-"`
}

// Cause is why a replayed policy refuses a call: its decision and the rule
// that decided.
type Cause struct{ Decision, Rule string }

// RunawayLoop is one runaway polling loop the detectors found: the polled
// tool's calls in one session (its sessionID) from First to Last.
type RunawayLoop struct {
	Tool, Session string
	SessionHash   uint64
	First, Last   time.Time
	Polls         int64
}

// AffectedCall is one call whose decision a replayed policy changes.
type AffectedCall struct {
	TS       time.Time `json:"ts"`
	ID       string    `json:"id"`
	Tool     string    `json:"tool"`
	Session  string    `json:"session,omitempty"`
	Agent    string    `json:"agent,omitempty"`
	Recorded string    `json:"recorded"`
	Replayed string    `json:"replayed"`
	Rule     string    `json:"rule,omitempty"`
}

// unusedSpan is the stretch of history behind "not used in the last …":
// the window, or the days the history covers when it is younger.
func (w Window) unusedSpan() string {
	if w.HistoryDays > 0 && w.HistoryDays < w.Days {
		return fmt.Sprintf("%d days of history (the window is %d days)", w.HistoryDays, w.Days)
	}
	return fmt.Sprintf("%d days", w.Days)
}

// SessionSources count calls by the source of their session.
type SessionSources struct {
	Event        int64 `json:"event"`
	Conversation int64 `json:"conversation"`
	Trace        int64 `json:"trace"`
	Derived      int64 `json:"derived"`
	Gateway      int64 `json:"gateway"`
}

// Note says, when most calls have no session of their own, what stood in
// for them, and that the gateway cannot count such sessions; "" otherwise.
func (s SessionSources) Note(calls int64) string {
	if calls == 0 || s.Event*2 >= calls {
		return ""
	}
	var parts []string
	for _, p := range []struct {
		n    int64
		name string
	}{{s.Derived, "derived from agent runs"}, {s.Trace, "trace ids"}, {s.Conversation, "conversation ids"}, {s.Gateway, "the gateway instance"}, {s.Event, "protocol sessions"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", p.name, 100*float64(p.n)/float64(calls)))
		}
	}
	return "sessions: " + strings.Join(parts, ", ") + " of calls; a gateway cannot count these, so limits are per agent or grant"
}
