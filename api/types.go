// Package api is the daemon's typed HTTP API: the requests the CLI sends to a
// running `mcptrail serve` instead of opening the database itself, the
// handler that guards and answers them (bearer token, same-origin checks,
// body limits, panics recovered), and the CLI's client, which sends the token
// only to a daemon that proves it holds it.
//
// Every request is a JSON object of named fields: there is no command line to
// smuggle a command or a flag through. A client never names a path on the
// daemon's host: input files travel as their content, and output folders come
// back as files that the client writes itself. docs/API.md is the contract.
package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/internal/duration"
)

// Endpoints. Each takes POST with a JSON body and answers with frames (see
// Frame); Hello and Status take GET.
const (
	PathHello        = "/api/v1/hello"
	PathStatus       = "/api/v1/status"
	PathQuery        = "/api/v1/query"
	PathQueries      = "/api/v1/queries"
	PathRecommend    = "/api/v1/recommend"
	PathReplay       = "/api/v1/replay"
	PathReport       = "/api/v1/report"
	PathCatalogImp   = "/api/v1/catalog/import"
	PathCatalogList  = "/api/v1/catalog/list"
	PathSuppress     = "/api/v1/suppress"
	PathUnsuppress   = "/api/v1/unsuppress"
	PathSuppressions = "/api/v1/suppressions"
	PathPolicies     = "/api/v1/policies"
	PathForget       = "/api/v1/policies/forget"
	PathFindings     = "/api/v1/findings"
	PathBacktest     = "/api/v1/backtest"
)

// Request is implemented by every request type.
type Request interface {
	CommonFields() *Common
	// Path is the endpoint that takes the request.
	Path() string
	// Files are the folders' worth of files a request uploads (the
	// previous reports of report --out), relative to the output folder.
	uploads() []File
	// wantsOut reports whether the command writes an output folder.
	wantsOut() bool
}

// Common are the fields every request may carry.
type Common struct {
	// Database is the absolute path of the database the client means. A
	// daemon that holds another answers 409, and the CLI opens that file
	// itself. It is compared, never opened.
	Database string `json:"database,omitempty"`
	// Now replaces the clock, for reproducible output (--now).
	Now *time.Time `json:"now,omitempty"`
}

func (c *Common) CommonFields() *Common { return c }
func (c *Common) uploads() []File       { return nil }
func (c *Common) wantsOut() bool        { return false }

// File is an input or output file, by content. Name is a label for input
// files (it appears in messages and records, e.g. the policy's source) and a
// relative path inside the output folder for output files.
type File struct {
	Name    string `json:"name"`
	Content []byte `json:"content"` // base64 in JSON
}

// Duration is a time.Duration written as text in JSON ("30d", "72h", "1m30s").
type Duration time.Duration

// MarshalJSON writes Go's duration text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads any duration mcptrail accepts (s, m, h, d, w).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"30d\": %w", err)
	}
	v, err := duration.Parse(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Settings are the client's recommend.* (and regression.*) settings, so that the daemon answers
// as the client would on the file. Absent: the daemon's own.
type Settings struct {
	Window          Duration `json:"window"`
	MinDays         int      `json:"min_days"`
	MinSessions     int      `json:"min_sessions"`
	Headroom        float64  `json:"headroom"`
	MinLimit        int      `json:"min_limit"`
	RareMaxCalls    int      `json:"rare_max_calls"`
	RareMaxDays     int      `json:"rare_max_days"`
	RareMaxShare    float64  `json:"rare_max_session_share"`
	PollMinCalls    int      `json:"poll_min_calls"`
	PollMaxInterval Duration `json:"poll_max_interval"`
	PollMaxCV       float64  `json:"poll_max_cv"`
	RunawayFactor   float64  `json:"runaway_factor"`
	Grace           Duration `json:"grace"`
	// The regression.* keys the recommender reads (zero: the default).
	RegressionWatch      Duration `json:"regression_watch,omitempty"`
	RegressionBaseline   Duration `json:"regression_baseline,omitempty"`
	RegressionMinRefused int      `json:"regression_min_refused,omitempty"`
	RegressionMinShare   float64  `json:"regression_min_share,omitempty"`
	// Overrides is the content of the recommend.overrides file.
	Overrides *File `json:"overrides,omitempty"`
}

// QueryRequest runs a named query (Name with Params) or read-only SQL.
type QueryRequest struct {
	Common
	Name   string            `json:"name,omitempty"`
	SQL    string            `json:"sql,omitempty"`
	Params map[string]string `json:"params,omitempty"`
	Format string            `json:"format,omitempty"` // table (default), csv, json
	// Archive makes calls span the Parquet archive too (storage.archive).
	Archive bool `json:"archive,omitempty"`
}

// QueriesRequest lists the named queries.
type QueriesRequest struct {
	Common
	Format string `json:"format,omitempty"`
}

// RecommendRequest proposes a server's policy.
type RecommendRequest struct {
	Common
	Server  string `json:"server"`
	Grant   string `json:"grant,omitempty"`
	Since   string `json:"since,omitempty"`
	Catalog *File  `json:"catalog,omitempty"` // imported first, like --catalog
	Policy  *File  `json:"policy,omitempty"`  // recorded first, like --policy
	Format  string `json:"format,omitempty"`  // text (default), json, markdown, policy, diff, intercept
	Out     string `json:"out,omitempty"`     // label of the client's --out folder: the PR folder comes back as files
	FailOn  string `json:"fail_on,omitempty"`
	// Baseline is a previous recommendations.json: fail_on then counts only
	// findings that are new or more severe than there.
	Baseline *File     `json:"baseline,omitempty"`
	Color    bool      `json:"color,omitempty"`
	Settings *Settings `json:"settings,omitempty"`

	// AllowLossy writes a format that cannot carry every rule (intercept)
	// without them, listed on stderr and in its header, like --allow-lossy.
	AllowLossy bool `json:"allow_lossy,omitempty"`
}

func (r *RecommendRequest) wantsOut() bool { return r.Out != "" }

// ReplayRequest replays a policy over a server's calls.
type ReplayRequest struct {
	Common
	Server   string    `json:"server"`
	Grant    string    `json:"grant,omitempty"`
	Since    string    `json:"since,omitempty"`
	Policy   File      `json:"policy"`
	Format   string    `json:"format,omitempty"` // text (default), json
	Settings *Settings `json:"settings,omitempty"`
}

// BacktestRequest scores a server's proposals on the windows that follow
// their training windows.
type BacktestRequest struct {
	Common
	Server   string    `json:"server"`
	Grant    string    `json:"grant,omitempty"`
	Train    string    `json:"train,omitempty"`
	Test     string    `json:"test,omitempty"`
	Folds    int       `json:"folds,omitempty"`
	Format   string    `json:"format,omitempty"` // text (default), json, markdown
	Settings *Settings `json:"settings,omitempty"`
}

// ReportRequest builds reports.
type ReportRequest struct {
	Common
	Server string `json:"server,omitempty"`
	Since  string `json:"since,omitempty"`
	Format string `json:"format,omitempty"`
	// Out is the label of the client's --out folder; the report folders come
	// back as files. Previous holds the newest earlier report.json of each
	// server folder there (paths relative to Out), which the new report is
	// compared with.
	Out      string    `json:"out,omitempty"`
	Previous []File    `json:"previous,omitempty"`
	Settings *Settings `json:"settings,omitempty"`
}

func (r *ReportRequest) uploads() []File { return r.Previous }
func (r *ReportRequest) wantsOut() bool  { return r.Out != "" }

// CatalogImportRequest imports a tools/list document.
type CatalogImportRequest struct {
	Common
	Server    string `json:"server,omitempty"`
	Catalog   File   `json:"catalog"`
	Overrides *File  `json:"overrides,omitempty"`
}

// CatalogListRequest lists a server's imported tools.
type CatalogListRequest struct {
	Common
	Server string `json:"server"`
	Format string `json:"format,omitempty"` // table (default), json
}

// SuppressRequest accepts or dismisses a finding until a date: one by its
// id, or every open finding of a kind (AllOf) on a server.
type SuppressRequest struct {
	Common
	FindingID string `json:"finding_id,omitempty"`
	Reason    string `json:"reason"`
	Until     string `json:"until"`
	By        string `json:"by,omitempty"`
	// Force keeps a suppression whose id matches nothing the history knows.
	Force bool `json:"force,omitempty"`
	// AllOf suppresses every current finding of this kind on Server (and
	// Grant), as recommend finds them with Settings.
	AllOf  string `json:"all_of,omitempty"`
	Server string `json:"server,omitempty"`
	Grant  string `json:"grant,omitempty"`
	Since  string `json:"since,omitempty"`
	// Format, with AllOf, is the output the recommendation is for:
	// "intercept" adds its own widenings to a loosening's (what a
	// suppression of it then accepts); "" the policy.json proposal's.
	Format   string    `json:"format,omitempty"`
	Settings *Settings `json:"settings,omitempty"`
}

// UnsuppressRequest removes a suppression.
type UnsuppressRequest struct {
	Common
	FindingID string `json:"finding_id"`
	By        string `json:"by,omitempty"`
}

// SuppressionsRequest lists suppressions.
type SuppressionsRequest struct {
	Common
	Format string `json:"format,omitempty"` // table (default), json
}

// ForgetRequest removes recorded policies of a server: of one grant (""
// is the server-wide one) or of all its grants.
type ForgetRequest struct {
	Common
	Server    string `json:"server"`
	Grant     string `json:"grant,omitempty"`
	AllGrants bool   `json:"all_grants,omitempty"`
}

// FindingsRequest lists the findings that recommend runs recorded for a
// server: of one grant (every grant's when empty), in one state when set.
type FindingsRequest struct {
	Common
	Server string `json:"server"`
	Grant  string `json:"grant,omitempty"`
	State  string `json:"state,omitempty"`  // open, accepted, dismissed, resolved
	Format string `json:"format,omitempty"` // table (default), json, csv
}

// PoliciesRequest lists the recorded current policies.
type PoliciesRequest struct {
	Common
	Server string `json:"server,omitempty"`
	Format string `json:"format,omitempty"` // table (default), json
}

func (*QueryRequest) Path() string         { return PathQuery }
func (*QueriesRequest) Path() string       { return PathQueries }
func (*RecommendRequest) Path() string     { return PathRecommend }
func (*ReplayRequest) Path() string        { return PathReplay }
func (*ReportRequest) Path() string        { return PathReport }
func (*CatalogImportRequest) Path() string { return PathCatalogImp }
func (*CatalogListRequest) Path() string   { return PathCatalogList }
func (*SuppressRequest) Path() string      { return PathSuppress }
func (*UnsuppressRequest) Path() string    { return PathUnsuppress }
func (*SuppressionsRequest) Path() string  { return PathSuppressions }
func (*PoliciesRequest) Path() string      { return PathPolicies }
func (*ForgetRequest) Path() string        { return PathForget }
func (*FindingsRequest) Path() string      { return PathFindings }
func (*BacktestRequest) Path() string      { return PathBacktest }

// newRequest makes an empty request for an endpoint.
func newRequest(path string) Request {
	switch path {
	case PathQuery:
		return &QueryRequest{}
	case PathQueries:
		return &QueriesRequest{}
	case PathRecommend:
		return &RecommendRequest{}
	case PathReplay:
		return &ReplayRequest{}
	case PathReport:
		return &ReportRequest{}
	case PathCatalogImp:
		return &CatalogImportRequest{}
	case PathCatalogList:
		return &CatalogListRequest{}
	case PathSuppress:
		return &SuppressRequest{}
	case PathUnsuppress:
		return &UnsuppressRequest{}
	case PathSuppressions:
		return &SuppressionsRequest{}
	case PathPolicies:
		return &PoliciesRequest{}
	case PathForget:
		return &ForgetRequest{}
	case PathFindings:
		return &FindingsRequest{}
	case PathBacktest:
		return &BacktestRequest{}
	}
	return nil
}

// Frame is one line of an answer (application/x-ndjson). An answer is any
// number of stdout, stderr and file frames in the order they were produced,
// then exactly one frame with Exit set. An answer without it was cut short.
type Frame struct {
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Bytes that are not valid UTF-8 travel in base64 instead.
	StdoutBytes []byte `json:"stdout_bytes,omitempty"`
	File        *File  `json:"file,omitempty"`
	// Truncated is sent before Exit when a query answer stopped at
	// query.max_rows or query.max_bytes.
	Truncated bool `json:"truncated,omitempty"`
	Exit      *int `json:"exit,omitempty"`
}

// Hello is the answer of GET /api/v1/hello?challenge=HEX: the daemon's
// proof that it holds the token (see Proof).
type Hello struct {
	Service string `json:"service"` // "mcptrail"
	API     string `json:"api"`     // "v1"
	Proof   string `json:"proof"`
}

// Status is the answer of GET /api/v1/status.
type Status struct {
	Database string `json:"database"`
	Ready    bool   `json:"ready"`
}

// Error is the body of every answer that is not 200.
type Error struct {
	Error string `json:"error"`
}
