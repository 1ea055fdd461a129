// Package report builds mcptrail's reports: what the agents did on one MCP
// server over a window, what changed since the previous report, and what to
// tighten (the recommendation with its replay impact and PR folder), with
// charts rendered on the server as SVG. A report renders as JSON (stable,
// machine-consumable), Markdown (with its charts as SVG files beside it) and
// one self-contained HTML file (charts as inline <svg>). Schedules from the
// `reports:` section of config.yaml run them from the daemon.
//
// Every aggregate is computed in DuckDB; Go orders, compares and renders.
package report

import (
	"errors"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// Version is the version of the JSON document; it changes only when a field
// changes meaning or disappears.
const Version = 1

// ErrNoCalls means the server has no calls in the report's window.
var ErrNoCalls = recommend.ErrNoCalls

// Report is one server's report for one window. Its JSON form is the
// machine-consumable report and the baseline of the next one.
type Report struct {
	Version     int       `json:"version"`
	Server      string    `json:"server"`
	Schedule    string    `json:"schedule,omitempty"`
	GeneratedAt time.Time `json:"generated_at"`
	Window      Window    `json:"window"`
	Totals      Totals    `json:"totals"`
	// Volume is the calls per bucket (a UTC day, or an hour for windows of
	// two days or less) and decision, every bucket of the window present.
	Volume Volume `json:"volume"`
	// Tools holds every tool called in the window, busiest first.
	Tools []ToolStats `json:"tools"`
	// Agents are the busiest agents, at most Options.TopN.
	Agents []AgentStats `json:"agents"`
	// HourByTool counts the busiest tools' calls per UTC hour of the day.
	HourByTool HourMatrix `json:"hour_by_tool"`
	// AgentTools counts the busiest agents' calls of the busiest tools.
	AgentTools AgentToolMatrix `json:"agent_tools"`
	// LastAccess is, per tool and grant, the last allowed call up to the
	// window's end and the window's calls.
	LastAccess []LastAccess `json:"last_access"`
	// Polling is the distribution of polls per loop of each polling_loop
	// finding, over the recommendation's window.
	Polling []PollingLoop `json:"polling"`
	// Limits sets each proposed rate limit against the observed peaks in its
	// own unit (calls per window per scope value), over the
	// recommendation's window.
	Limits         []LimitPeak    `json:"limits"`
	Changes        Changes        `json:"changes"`
	Recommendation Recommendation `json:"recommendation"`
	// Backtest scores the proposal trained before the window on the window.
	Backtest *Backtest `json:"backtest,omitempty"`

	// the full recommendation, for the PR folder: rec for a server whose
	// calls carry no grant, set (one proposal per grant) otherwise.
	rec *recommend.Report
	set *recommend.Set
}

// Window is the reported history.
type Window struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Days     float64   `json:"days"`
	Calls    int64     `json:"calls"`
	Sessions int64     `json:"sessions"`
	Agents   int64     `json:"agents"`
	Tools    int64     `json:"tools"`
}

// Totals are the window's calls by the gateway's decision and upstream
// outcome. ErrorRate is errors / allowed calls; DenialRate is calls not
// allowed (denied, hidden, rate-limited, held for approval) / calls.
type Totals struct {
	Calls            int64   `json:"calls"`
	Allowed          int64   `json:"allowed"`
	Denied           int64   `json:"denied"`
	Hidden           int64   `json:"hidden"`
	RateLimited      int64   `json:"rate_limited"`
	ApprovalRequired int64   `json:"approval_required"`
	Errors           int64   `json:"errors"`
	ErrorRate        float64 `json:"error_rate"`
	DenialRate       float64 `json:"denial_rate"`
}

// Volume is the calls over time.
type Volume struct {
	Bucket string   `json:"bucket"` // "day" or "hour" (UTC)
	Rows   []Bucket `json:"rows"`
}

// Bucket is one day's (or hour's) calls by decision.
type Bucket struct {
	Start            time.Time `json:"start"`
	Calls            int64     `json:"calls"`
	Allowed          int64     `json:"allowed"`
	Denied           int64     `json:"denied"`
	Hidden           int64     `json:"hidden"`
	RateLimited      int64     `json:"rate_limited"`
	ApprovalRequired int64     `json:"approval_required"`
	Errors           int64     `json:"errors"`
}

// ToolStats is one tool's use in the window. Latencies (milliseconds, of
// allowed calls that report one) are null when none does.
type ToolStats struct {
	Tool       string    `json:"tool"`
	Calls      int64     `json:"calls"`
	Allowed    int64     `json:"allowed"`
	Refused    int64     `json:"refused"`
	Errors     int64     `json:"errors"`
	ErrorRate  float64   `json:"error_rate"`
	DenialRate float64   `json:"denial_rate"`
	Sessions   int64     `json:"sessions"`
	Agents     int64     `json:"agents"`
	P50        *float64  `json:"latency_p50_ms"`
	P95        *float64  `json:"latency_p95_ms"`
	P99        *float64  `json:"latency_p99_ms"`
	Max        *float64  `json:"latency_max_ms"`
	FirstSeen  time.Time `json:"first_seen"` // first call ever, any decision
}

// AgentStats is one agent's activity in the window.
type AgentStats struct {
	Agent    string `json:"agent"`
	Calls    int64  `json:"calls"`
	Sessions int64  `json:"sessions"`
	Tools    int64  `json:"tools"`
	Refused  int64  `json:"refused"`
	Errors   int64  `json:"errors"`
}

// HourMatrix is calls per tool (rows) and UTC hour of the day (columns).
type HourMatrix struct {
	Tools  []string    `json:"tools"`
	Counts [][24]int64 `json:"counts"`
}

// AgentToolMatrix is calls per agent (rows) and tool (columns) in the
// window; Refused counts those the gateway did not allow.
type AgentToolMatrix struct {
	Agents  []string  `json:"agents"`
	Tools   []string  `json:"tools"`
	Calls   [][]int64 `json:"calls"`
	Refused [][]int64 `json:"refused"`
}

// LastAccess is when one grant last had a call of one tool allowed, over the
// whole history up to the window's end. Grant is "(none)" for calls without
// one, and "" for a catalog tool that no grant ever called.
type LastAccess struct {
	Tool  string `json:"tool"`
	Grant string `json:"grant"`
	// LastAllowed is the last allowed call, nil when none was ever allowed;
	// LastRefused the last call refused.
	LastAllowed *time.Time `json:"last_allowed"`
	LastRefused *time.Time `json:"last_refused"`
	// Allowed and Refused count the window's calls.
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
}

// LimitPeak is one proposed rate limit against the peaks observed in its
// unit: calls of Tool per Limit.Window per scope value (session, grant or
// agent), counting the calls the policy's other rules let through.
type LimitPeak struct {
	Tool string `json:"tool"`
	// Grant is the grant whose proposal sets the limit, measured over its
	// calls ("" for a server without grants).
	Grant     string `json:"grant,omitempty"`
	FindingID string `json:"finding_id"`
	Kind      string `json:"kind"`
	Limit     Limit  `json:"limit"`
	// Scopes are the scope values with a call; ScopesOver those whose peak
	// exceeds the limit.
	Scopes     int64 `json:"scopes"`
	ScopesOver int64 `json:"scopes_over"`
	// PeakP50, PeakP99 and PeakMax summarise the scope values' peaks.
	PeakP50 float64 `json:"peak_p50"`
	PeakP99 float64 `json:"peak_p99"`
	PeakMax float64 `json:"peak_max"`
	// Windows are the (scope value, window) pairs with a call; WindowsOver
	// those over the limit, and CallsOver the calls beyond the limit in them.
	Windows     int64 `json:"windows"`
	WindowsOver int64 `json:"windows_over"`
	CallsOver   int64 `json:"calls_over"`
	// Histogram counts the scope values by their peak.
	Histogram []PeakCount `json:"histogram"`
}

// PeakCount is how many scope values peaked at exactly Peak calls in one window.
type PeakCount struct {
	Peak   int64 `json:"peak"`
	Scopes int64 `json:"scopes"`
}

// PollingLoop is the shape of one polling_loop finding's loops.
type PollingLoop struct {
	FindingID string `json:"finding_id"`
	// Grant is the grant whose proposal holds the finding, its loops counted
	// over its calls ("" for a server without grants).
	Grant     string `json:"grant,omitempty"`
	Tool      string `json:"tool"`
	StartTool string `json:"start_tool"`
	Loops     int64  `json:"loops"`
	// Limit is the proposed limit on the polled tool, nil when none.
	Limit *Limit `json:"limit"`
	// RunawayThreshold is the loop length above which a loop counts as
	// runaway (recommend.runaway_factor × the p95 loop length).
	RunawayThreshold float64 `json:"runaway_threshold_polls"`
	// Histogram counts the loops by their number of polls.
	Histogram []PollCount `json:"histogram"`
}

// Limit is a proposed rate limit.
type Limit struct {
	Max    int    `json:"max"`
	Window string `json:"window"`
	Scope  string `json:"scope"`
}

// PollCount is how many loops had exactly Polls polls.
type PollCount struct {
	Polls int64 `json:"polls"`
	Loops int64 `json:"loops"`
}

// Changes is what changed since the previous report of the same folder.
type Changes struct {
	// Previous is the report compared with; nil for the first report.
	Previous *PreviousRef `json:"previous"`
	// NewTools are tools whose first call ever came after the previous
	// report's window (or, for the first report, inside this window).
	NewTools []NewTool `json:"new_tools"`
	// GoneTools were used (had an allowed call) in the previous report's
	// window and are not in this one.
	GoneTools []string `json:"gone_tools"`
	// NewFindings are open findings the previous report did not have.
	NewFindings []FindingRef `json:"new_findings"`
	// ResolvedFindings were open in the previous report and are gone.
	ResolvedFindings []FindingRef `json:"resolved_findings"`
	// SuppressedFindings were open in the previous report and are now
	// suppressed; ReopenedFindings were suppressed, or accepted (the
	// current policy held their change, and no longer does), and are open
	// again.
	SuppressedFindings []FindingRef `json:"suppressed_findings"`
	ReopenedFindings   []FindingRef `json:"reopened_findings"`
	// AcceptedFindings are findings whose change the current policy now
	// holds; only from the finding history (History).
	AcceptedFindings []FindingRef `json:"accepted_findings,omitempty"`
	// History is set when the finding lists come from the finding history
	// (SPEC §5) rather than from the previous report.
	History *HistoryRef `json:"history,omitempty"`
	// SuppressionChanges are the changes to suppressions since the previous
	// report's window ended (or in this window, for the first report).
	SuppressionChanges []analytics.SuppressionChange `json:"suppression_changes"`
}

// findingList is one titled list of changed findings, as every renderer shows it.
type findingList struct {
	title string
	refs  []FindingRef
}

// findingLists returns the changed findings in the order renderers show them.
func (c Changes) findingLists() []findingList {
	return []findingList{
		{"New findings", c.NewFindings},
		{"Resolved findings", c.ResolvedFindings},
		{"Suppressed since", c.SuppressedFindings},
		{"Reopened (a suppression ended, or the policy no longer holds the change)", c.ReopenedFindings},
		{"Accepted (now in the current policy)", c.AcceptedFindings},
	}
}

// PreviousRef names the previous report.
type PreviousRef struct {
	Folder      string    `json:"folder"`
	GeneratedAt time.Time `json:"generated_at"`
	WindowTo    time.Time `json:"window_to"`
}

// NewTool is a tool seen for the first time.
type NewTool struct {
	Tool      string    `json:"tool"`
	FirstSeen time.Time `json:"first_seen"`
	Calls     int64     `json:"calls"`
}

// FindingRef identifies a finding in the changes.
type FindingRef struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Tool     string `json:"tool"`
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
}

// Recommendation summarises `mcptrail recommend` for the server; the full
// recommendation is in the PR folder.
type Recommendation struct {
	From       time.Time        `json:"from"`
	To         time.Time        `json:"to"`
	Days       int              `json:"days"`
	Confidence string           `json:"confidence"`
	Draft      bool             `json:"draft"`
	Gates      []recommend.Gate `json:"gates"`
	Counts     Counts           `json:"counts"`
	Findings   []Finding        `json:"findings"`
	Replay     Replay           `json:"replay"`
	// ReplaySentence says what the proposed policy would have done.
	ReplaySentence string `json:"replay_sentence"`
	// PolicyTools and PolicyHidden size the proposed policy.
	PolicyTools  int `json:"policy_tools"`
	PolicyHidden int `json:"policy_hidden"`
	// PRFolder is the PR-ready folder written beside the report (relative
	// to the report's folder), "" when it was not written.
	PRFolder string `json:"pr_folder"`
	// Grants is the recommendation of each grant, in grant order, for a
	// server whose calls carry grants (one policy per grant, SPEC §5); the
	// fields above then add the grants up (findings, counts, policy sizes
	// and replay totals summed, the lowest confidence, a draft when any
	// grant's is, each gate's detail naming its grant). Absent for a server
	// without grants.
	Grants []GrantRecommendation `json:"grants,omitempty"`
	// UngrantedCalls are the window's calls that carry no grant: no
	// per-grant policy covers them.
	UngrantedCalls int64 `json:"ungranted_calls,omitempty"`
}

// GrantRecommendation summarises one grant's proposal.
type GrantRecommendation struct {
	Grant      string `json:"grant"`
	Calls      int64  `json:"calls"`
	Confidence string `json:"confidence"`
	Draft      bool   `json:"draft"`
	// Counts are the grant's changes by what they do; Counts.Widen is the
	// number of loosenings.
	Counts Counts `json:"counts"`
	// Loosenings are the grant's unsuppressed loosening findings: where the
	// proposal widens access.
	Loosenings []recommend.Widening `json:"loosenings"`
	// RuleChanges are the grant's proposed changes, current rule →
	// proposed rule, the widening ones first.
	RuleChanges []recommend.RuleChange `json:"rule_changes"`
	// Replay is both sides of the grant's replay: changed (allowed then,
	// refused now) and newly_allowed (refused then, allowed now).
	Replay         Replay `json:"replay"`
	ReplaySentence string `json:"replay_sentence"`
	PolicyTools    int    `json:"policy_tools"`
	PolicyHidden   int    `json:"policy_hidden"`
	// PRFolder is the grant's folder of the PR folder (policy.json,
	// policy.diff), "" when it was not written.
	PRFolder string `json:"pr_folder"`
}

// Counts are the recommendation's changes by what they do.
type Counts struct {
	Findings   int `json:"findings"`
	Hide       int `json:"hide"`
	Approval   int `json:"require_approval"`
	RateLimits int `json:"rate_limits"`
	Reported   int `json:"reported"`
	Suppressed int `json:"suppressed"`
	// Widen counts the unsuppressed loosening findings: tools whose access
	// the proposal widens (listed in the PR folder).
	Widen int `json:"widen"`
}

// Finding is one finding of the recommendation, without its evidence.
type Finding struct {
	ID string `json:"id"`
	// Grant is the grant whose proposal holds the finding ("" for a server
	// without grants).
	Grant      string `json:"grant,omitempty"`
	Kind       string `json:"kind"`
	Tool       string `json:"tool"`
	Severity   string `json:"severity"`
	Confidence string `json:"confidence"`
	Summary    string `json:"summary"`
	Action     string `json:"action"`
	Suppressed bool   `json:"suppressed"`
}

// Replay is what the proposed policy would have done to the recommendation
// window's calls: the totals of recommend.Replay (the per-tool and per-call
// detail is in the PR folder).
type Replay = recommend.ReplayTotals

// FullRecommendations returns the recommendation behind the report: one
// report per grant in grant order, or the one of a server without grants
// (nil for a report read back from JSON).
func (r *Report) FullRecommendations() []*recommend.Report {
	if r.set != nil {
		return r.set.Reports()
	}
	if r.rec != nil {
		return []*recommend.Report{r.rec}
	}
	return nil
}

// errNoServers means no server had calls in a schedule's window.
var errNoServers = errors.New("no server has calls in the window")
