package backtest

import (
	"context"
	"time"

	"github.com/mcptrail/mcptrail/recommend"
)

// Options select a backtest.
type Options struct {
	Server string
	// Grant is the one grant to score; "" scores every grant the training
	// window has (as recommend without --grant).
	Grant string
	// Now is the end of the latest fold's test window.
	Now         time.Time
	Train, Test time.Duration
	// Folds is the number of rolling (train, test) windows (default 1),
	// each shifted back by Test from the one after it.
	Folds int
	// Params are the recommender's; Window is replaced by Train.
	Params recommend.Params
	// Inputs gives a grant's recommender inputs (catalog, current policy,
	// suppressions), as for recommend.GrantsOptions.
	Inputs func(ctx context.Context, grant string) (recommend.Options, error)
	// GeneratedAt, when set, is written as generated_at.
	GeneratedAt time.Time
	// Examples is how many refused legitimate calls a score lists (default 5).
	Examples int
	// KnownLoops, when set, gives a grant's runaway loops of the window
	// from → to, where the caller found them already with these Params and
	// Inputs (the report, whose own recommendation reads its window); ok
	// false has the backtest find them.
	KnownLoops func(grant string, from, to time.Time) (loops []recommend.RunawayLoop, ok bool)
}

// Result is a backtest's outcome.
type Result struct {
	Server      string    `json:"server"`
	Grant       string    `json:"grant"`
	GeneratedAt time.Time `json:"generated_at"`
	TrainDays   float64   `json:"train_days"`
	TestDays    float64   `json:"test_days"`
	// Folds are in time order, the latest (ending at Now) last.
	Folds []Fold `json:"folds"`
	// Summary is each grant's metrics across the folds that scored it.
	Summary []Summary `json:"summary"`
}

// Fold is one (train, test) pair of windows; each is (from, to].
type Fold struct {
	Fold      int       `json:"fold"`
	TrainFrom time.Time `json:"train_from"`
	TrainTo   time.Time `json:"train_to"`
	TestFrom  time.Time `json:"test_from"`
	TestTo    time.Time `json:"test_to"`
	// Note says why the fold scored nothing (no calls to train on).
	Note   string  `json:"note,omitempty"`
	Grants []Score `json:"grants"`
}

// Score is one grant's proposal, trained on a fold's training window and
// replayed over its test window.
type Score struct {
	Grant string `json:"grant"`
	// Draft and Confidence are the proposal's: a draft failed a data gate
	// in training (FailedGates says which and why).
	Draft       bool     `json:"draft"`
	Confidence  string   `json:"confidence"`
	FailedGates []string `json:"failed_gates"`
	TrainCalls  int64    `json:"train_calls"`
	TestCalls   int64    `json:"test_calls"`
	// NoTestTraffic: the grant has no call in the test window, so nothing
	// is scored and the rates are null.
	NoTestTraffic bool `json:"no_test_traffic"`
	// RunawayPolls are the test window's calls inside the runaway polling
	// loops the detectors find there.
	RunawayPolls int64 `json:"runaway_polls"`
	// LegitimateCalls are the test window's calls the gateway allowed,
	// outside those loops.
	LegitimateCalls int64 `json:"legitimate_calls"`
	Under           Under `json:"under_privilege"`
	Over            Over  `json:"over_privilege"`
	// RunawayPollsCut are the test window's calls inside runaway polling
	// loops that the proposal's limits refuse.
	RunawayPollsCut int64 `json:"runaway_polls_cut"`
	// NewlyAllowed are the test window's calls the gateway refused that the
	// proposal allows.
	NewlyAllowed int64 `json:"newly_allowed"`
}

// Under is the under-privilege of a proposal: legitimate test calls it refuses.
type Under struct {
	Calls int64 `json:"calls"`
	// Rate is Calls / legitimate calls; null without legitimate calls.
	Rate     *float64                 `json:"rate"`
	ByTool   []ToolUnder              `json:"by_tool"`
	Examples []recommend.AffectedCall `json:"examples"`
}

// ToolUnder is one tool's refused legitimate calls, by cause.
type ToolUnder struct {
	Tool   string  `json:"tool"`
	Calls  int64   `json:"calls"`
	Causes []Cause `json:"causes"`
}

// Cause is what refuses calls: the proposal's decision on them (hidden,
// denied, approval_required, rate_limited) and the rule that decided
// ("(hidden)", "(default deny)", or a deny_if's or limit's JSON pointer).
type Cause struct {
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Calls    int64  `json:"calls"`
}

// Over is the over-privilege of a proposal: tools it allows that no
// legitimate test call used.
type Over struct {
	// AllowedTools counts the tools the proposal allows: listed, not
	// hidden, not behind approval.
	AllowedTools int `json:"allowed_tools"`
	Count        int `json:"count"`
	// Rate is Count / AllowedTools; null when it allows none.
	Rate  *float64 `json:"rate"`
	Tools []string `json:"tools"`
}

// Summary is one grant's metrics across folds.
type Summary struct {
	Grant string `json:"grant"`
	// Folds counts the folds that scored the grant (with test traffic);
	// Drafts how many of those proposals were drafts.
	Folds   int      `json:"folds"`
	Drafts  int      `json:"drafts"`
	Metrics []Metric `json:"metrics"`
}

// Metric is a metric's mean and spread over the folds that define it.
type Metric struct {
	Name  string  `json:"name"`
	Folds int     `json:"folds"`
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}
