package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/render"
)

func newSuppressCmd(a *app) *cobra.Command {
	req := &api.SuppressRequest{}
	cmd := &cobra.Command{
		Use:   "suppress FINDING_ID --reason R --until DATE | --all-of KIND --server S --reason R --until DATE",
		Short: "Accept or dismiss a finding (or every finding of a kind) until a date",
		Long: `Keep a finding out of future proposals until DATE (YYYY-MM-DD, an RFC 3339
time, or a duration from now such as 30d). The finding is still listed, marked
suppressed; after DATE it applies again. Every change is recorded and shown in
recommendations and reports.

An id that matches nothing this database has seen (an unknown kind, server,
grant, tool or agent) is refused, since it would silently suppress nothing;
--force keeps it anyway. A loosening's suppression accepts the ways it widens
now: a later widening of the tool in another way applies again.

--all-of KIND suppresses every open finding of that kind that recommend finds
now on --server (and --grant): a way to accept what exists on the day CI starts
to gate on findings. With --format intercept, it finds them as recommend
--format intercept does, so that a loosening's suppression also accepts what
the Intercept output widens (the current policy's limits Intercept cannot
count as they are).`,
		Example: `  mcptrail suppress unused_tool:proxmox-mcp:*:create_vm --reason "DR drills" --until 2027-03-01 --by alice
  mcptrail suppress --all-of unused_tool --server proxmox-mcp --reason "accepted at adoption" --until 90d`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.By == "" {
				req.By = os.Getenv("USER")
			}
			switch {
			case len(args) == 1 && req.AllOf != "":
				return usageErrorf("give a FINDING_ID or --all-of KIND, not both")
			case len(args) == 1:
				req.FindingID = args[0]
			case req.AllOf == "":
				return usageErrorf("give a FINDING_ID (copy it from mcptrail recommend) or --all-of KIND --server S")
			}
			if _, err := a.checkSuppress(req); err != nil {
				return err
			}
			if req.AllOf != "" {
				settings, err := a.settings()
				if err != nil {
					return err
				}
				req.Settings = settings
			}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runSuppress(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Reason, "reason", "", "why the finding is accepted (required)")
	fl.StringVar(&req.Until, "until", "", "when the suppression expires: YYYY-MM-DD, RFC 3339 or a duration like 90d (required)")
	fl.StringVar(&req.By, "by", "", "who decided (default $USER)")
	fl.BoolVar(&req.Force, "force", false, "keep a suppression whose id matches nothing this database has seen")
	fl.StringVar(&req.AllOf, "all-of", "", "suppress every open finding of this kind (with --server)")
	fl.StringVar(&req.Server, "server", "", "with --all-of: the server")
	fl.StringVar(&req.Grant, "grant", "", "with --all-of: only this grant's findings")
	fl.StringVar(&req.Since, "since", "", "with --all-of: the window recommend reads (default recommend.window)")
	fl.StringVar(&req.Format, "format", "", "with --all-of: the output the findings are for, intercept to include what its output widens")
	return cmd
}

// checkSuppress validates a suppression and returns when it ends.
func (a *app) checkSuppress(req *api.SuppressRequest) (time.Time, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return time.Time{}, usageErrorf("--reason is required: say why the finding is accepted")
	}
	if req.Until == "" {
		return time.Time{}, usageErrorf("--until is required: suppressions expire (e.g. 2027-03-01 or 90d)")
	}
	end, err := parseUntil(req.Until, a.now)
	if err != nil {
		return time.Time{}, usageErrorf("--until %q: %v", req.Until, err)
	}
	if !end.After(a.now) {
		return time.Time{}, usageErrorf("--until %s is not in the future", end.Format(time.RFC3339))
	}
	if req.AllOf != "" {
		if !findingKinds[req.AllOf] {
			return time.Time{}, usageErrorf("--all-of %q: want a finding kind: %s", req.AllOf, strings.Join(sortedKinds(), ", "))
		}
		if req.Server == "" {
			return time.Time{}, usageErrorf("--all-of needs --server: the server whose findings to suppress")
		}
		if req.Format != "" && req.Format != recommend.FormatIntercept {
			return time.Time{}, usageErrorf("--format %q: want intercept (or leave it out for the policy.json proposal's findings)", req.Format)
		}
		return end, nil
	}
	if req.Format != "" {
		return time.Time{}, usageErrorf("--format goes with --all-of: a finding given by its id is suppressed as the last recorded run saw it")
	}
	if err := checkFindingID(req.FindingID); err != nil {
		return time.Time{}, usageErrorf("%v", err)
	}
	return end, nil
}

// findingKinds are the kinds of SPEC §5.
var findingKinds = map[string]bool{
	recommend.KindUnusedTool: true, recommend.KindRiskyTool: true, recommend.KindPollingLoop: true,
	recommend.KindRateLimit: true, recommend.KindRetryStorm: true, recommend.KindDeniedProbe: true,
	recommend.KindUnknownTool: true, recommend.KindAllowCandidate: true, recommend.KindLoosening: true,
	recommend.KindRegression: true,
}

func sortedKinds() []string {
	out := make([]string, 0, len(findingKinds))
	for k := range findingKinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkSeen refuses a finding id that names what this database never saw:
// a typo would otherwise suppress nothing and look as if it did.
func checkSeen(ctx context.Context, store *analytics.Store, id string) error {
	parts := strings.SplitN(id, ":", 4)
	kind, server, grant, subject := parts[0], parts[1], parts[2], parts[3]
	var miss []string
	if !findingKinds[kind] {
		miss = append(miss, fmt.Sprintf("kind %q is not one of %s", kind, strings.Join(sortedKinds(), ", ")))
	}
	seen, err := store.NamesSeen(ctx, server)
	if err != nil {
		return err
	}
	switch {
	case !seen.Server:
		miss = append(miss, fmt.Sprintf("server %q has no calls, catalog or policy", server))
	default:
		if grant != "*" && !seen.Grants[grant] {
			miss = append(miss, fmt.Sprintf("grant %q has no calls on %s", grant, server))
		}
		var names []string
		known := seen.Tools
		switch kind {
		case recommend.KindPollingLoop:
			names = strings.Split(subject, ">")
		case recommend.KindDeniedProbe:
			names, known = []string{subject}, seen.Principals
		default:
			names = []string{subject}
		}
		for _, n := range names {
			if !known[n] && !inRecordedPolicy(ctx, store, server, n) {
				miss = append(miss, fmt.Sprintf("%q was never seen on %s", n, server))
			}
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return fmt.Errorf("%s matches nothing this database has seen: %s; copy the id from mcptrail recommend, or pass --force to suppress it anyway",
		id, strings.Join(miss, "; "))
}

// inRecordedPolicy reports whether a recorded policy of server names tool
// (an unused tool can be known only from the current policy).
func inRecordedPolicy(ctx context.Context, store *analytics.Store, server, tool string) bool {
	recs, err := store.CurrentPolicies(ctx, server)
	if err != nil {
		return false
	}
	for _, r := range recs {
		var doc struct {
			Tools map[string]json.RawMessage `json:"tools"`
			Hide  []string                   `json:"hide"`
		}
		if json.Unmarshal(r.Document, &doc) != nil {
			continue
		}
		if _, ok := doc.Tools[tool]; ok || slices.Contains(doc.Hide, tool) {
			return true
		}
	}
	return false
}

// runSuppress records a suppression, or one for every open finding of a
// kind.
func (a *app) runSuppress(ctx context.Context, store *analytics.Store, req *api.SuppressRequest) error {
	end, err := a.checkSuppress(req)
	if err != nil {
		return err
	}
	if req.AllOf != "" {
		return a.suppressAllOf(ctx, store, req, end)
	}
	if !req.Force {
		if err := checkSeen(ctx, store, req.FindingID); err != nil {
			return err
		}
	}
	covers, err := acceptedWidening(ctx, store, req)
	if err != nil {
		return err
	}
	return a.suppressOne(ctx, store, req.FindingID, covers, req, end)
}

// acceptedWidening is what a suppression of a loosening accepts: the kinds
// of change of the finding as last recorded (nil for another kind). A
// loosening not recorded with them is refused without --force, which
// suppresses it whatever it comes to widen.
func acceptedWidening(ctx context.Context, store *analytics.Store, req *api.SuppressRequest) ([]string, error) {
	if !strings.HasPrefix(req.FindingID, recommend.KindLoosening+":") {
		return nil, nil
	}
	f, err := store.Finding(ctx, req.FindingID)
	if err != nil {
		return nil, err
	}
	if (f == nil || f.Changes == nil) && !req.Force {
		return nil, usageErrorf("%s: no recorded run says how this loosening widens access, so a suppression could not tell a later, other widening from it: "+
			"run mcptrail recommend --server S first (or --force to suppress every widening of the tool)", req.FindingID)
	}
	if f == nil {
		return nil, nil
	}
	return f.Changes, nil
}

// suppressAllOf runs the recommender as recommend would (one report per
// grant on a server with grants, unless --grant names one) and suppresses
// each open finding of the kind: the ids a server-wide run gives
// (kind:server:*:tool) are not those recommend reports per grant.
func (a *app) suppressAllOf(ctx context.Context, store *analytics.Store, req *api.SuppressRequest, end time.Time) error {
	a.applySettings(req.Settings)
	params := a.recommendParams()
	var err error
	if params.Window, err = parseSince(req.Since, params.Window, "30d, 2w or 72h"); err != nil {
		return err
	}
	o := a.grantsOptions(store, req.Server, params, req.Format, "", nil)
	o.Grant, o.Record = req.Grant, nil // finding nothing to record: suppress is no run of recommend
	calls, done, err := a.callsDB(ctx, store, a.now, params.Window)
	if err != nil {
		return err
	}
	defer done()
	r, set, err := recommend.RecommendGrants(ctx, calls, o)
	if err != nil {
		return err
	}
	reports := []*recommend.Report{r}
	if set != nil {
		reports = set.Reports()
	}
	var findings []recommend.Finding
	for _, r := range reports {
		findings = append(findings, r.Findings...)
	}
	n := 0
	for _, f := range findings {
		if f.Kind != req.AllOf || f.Suppressed != nil {
			continue
		}
		var covers []string
		if f.Kind == recommend.KindLoosening {
			covers = recommend.WideningKinds(f.Evidence)
		}
		if err := a.suppressOne(ctx, store, f.ID, covers, req, end); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no open %s finding on %s: nothing to suppress", req.AllOf, req.Server)
	}
	return nil
}

// suppressOne records one suppression and says so; covers are the kinds
// of widening a loosening's suppression accepts.
func (a *app) suppressOne(ctx context.Context, store *analytics.Store, id string, covers []string, req *api.SuppressRequest, end time.Time) error {
	action, err := store.Suppress(ctx, analytics.Suppression{FindingID: id, Reason: req.Reason, Owner: req.By, Until: end, CreatedAt: a.now,
		Covers: covers})
	if err != nil {
		return err
	}
	verb := "suppressed"
	if action == "update" {
		verb = "updated the suppression of"
	}
	accepting := ""
	if covers != nil {
		accepting = " (accepting: " + strings.Join(covers, "; ") + ")"
	}
	fmt.Fprintf(a.stdout, "%s %s until %s%s\n", verb, id, end.Format("2006-01-02"), accepting)
	return nil
}

// checkFindingID accepts ids as recommend prints them: kind:server:grant:subject.
func checkFindingID(id string) error {
	if parts := strings.SplitN(id, ":", 4); len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return fmt.Errorf("%q is not a finding id: copy one from mcptrail recommend (kind:server:grant:tool)", id)
	}
	return nil
}

func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := duration.Parse(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, errors.New("want YYYY-MM-DD, an RFC 3339 time or a duration such as 90d")
}

func newUnsuppressCmd(a *app) *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "unsuppress FINDING_ID",
		Short: "Remove a suppression: the finding applies again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = os.Getenv("USER")
			}
			req := &api.UnsuppressRequest{FindingID: args[0], By: by}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runUnsuppress(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who decided (default $USER)")
	return cmd
}

func newSuppressionsCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "suppressions",
		Short: "List suppressions, active and expired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &api.SuppressionsRequest{Format: format}
			if _, err := tableOrJSON(format); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runSuppressions(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	return cmd
}

// runUnsuppress removes a suppression.
func (a *app) runUnsuppress(ctx context.Context, store *analytics.Store, req *api.UnsuppressRequest) error {
	if err := store.Unsuppress(ctx, req.FindingID, req.By, a.now); err != nil {
		if errors.Is(err, analytics.ErrNoSuppression) {
			return fmt.Errorf("%s is not suppressed (mcptrail suppressions lists them)", req.FindingID)
		}
		return err
	}
	fmt.Fprintf(a.stdout, "unsuppressed %s\n", req.FindingID)
	return nil
}

// tableOrJSON reads a --format that takes table or json.
func tableOrJSON(format string) (render.Format, error) {
	f, err := render.ParseFormat(format)
	if err != nil || f == render.CSV {
		return f, usageErrorf("unknown --format %q: allowed values are table, json", format)
	}
	return f, nil
}

// runSuppressions lists suppressions, active and expired.
func (a *app) runSuppressions(ctx context.Context, store *analytics.Store, req *api.SuppressionsRequest) error {
	f, err := tableOrJSON(req.Format)
	if err != nil {
		return err
	}
	sups, err := store.Suppressions(ctx)
	if err != nil {
		return err
	}
	w := render.New(f, a.stdout)
	_ = w.Header([]string{"finding_id", "status", "until", "by", "reason", "created_at", "covers"})
	for _, s := range sups {
		status := "active"
		if !s.Until.After(a.now) {
			status = "expired"
		}
		_ = w.Row([]any{s.FindingID, status, s.Until, s.Owner, s.Reason, s.CreatedAt, strings.Join(s.Covers, "; ")})
	}
	return w.Close()
}
