package recommend

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/render"
	"golang.org/x/sync/errgroup"
)

// Grants lists the grants of a server's calls in the window (from, to],
// sorted; calls without a grant are counted apart (ungranted).
func Grants(ctx context.Context, db *sql.DB, server string, from, to time.Time) (grants []string, ungranted int64, err error) {
	q := query{db: db, server: server, from: from, to: to}
	rows, err := q.rows(ctx, "grants", `
SELECT coalesce("grant", ''), count(*) FROM calls WHERE `+inWindow+` GROUP BY ALL ORDER BY 1`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		var n int64
		if err := rows.Scan(&g, &n); err != nil {
			return nil, 0, fmt.Errorf("grants: %w", err)
		}
		if g == "" {
			ungranted = n
			continue
		}
		grants = append(grants, g)
	}
	return grants, ungranted, rows.Err()
}

// grantFigures counts, in one query over q's scope's window (the server's
// for RecommendGrants), the figures of each grant and of the scope, every
// grant together (without their dates: scopeFigures adds them): the days
// grant_days lists from its rows, the rest of the window from its calls
// (figuresSQL). grants are the grants with calls, sorted, and ungranted
// the calls without one (as Grants).
func grantFigures(ctx context.Context, q query) (byGrant map[string]*figures, all *figures, grants []string, ungranted int64, err error) {
	days, err := analytics.FigureDays(ctx, q.db, q.server, q.grant, q.from, q.to)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("window figures: %w", err)
	}
	parts, args := outsideParts(q.from, q.to, days)
	rows, err := q.rows(ctx, "window figures", figuresSQL(parts, days), withDays(args, days)...)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	defer rows.Close()
	byGrant = map[string]*figures{}
	for rows.Next() {
		var total bool
		var g string
		f := &figures{}
		if err := scanFigures(rows, f, &total, &g); err != nil {
			return nil, nil, nil, 0, fmt.Errorf("window figures: %w", err)
		}
		switch {
		case total: // the grouping set (), there even without calls
			all = f
		case g == "": // no scope's: an empty grant is every grant
			ungranted = f.window.Calls
		default:
			grants = append(grants, g)
			byGrant[g] = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("window figures: %w", err)
	}
	return byGrant, all, grants, ungranted, nil
}

// Set is the recommendation for a server whose calls carry grants: one
// proposal per grant, because a policy is attached to a grant (SPEC §5).
type Set struct {
	Server      string    `json:"server"`
	GeneratedAt time.Time `json:"generated_at"`
	Window      Window    `json:"window"`
	Grants      []string  `json:"grants"`
	// UngrantedCalls are the window's calls that carry no grant: no
	// per-grant policy covers them.
	UngrantedCalls int64              `json:"ungranted_calls"`
	Policies       map[string]*Report `json:"policies"`
}

// Reports returns the per-grant recommendations in grant order.
func (s *Set) Reports() []*Report {
	out := make([]*Report, 0, len(s.Grants))
	for _, g := range s.Grants {
		out = append(out, s.Policies[g])
	}
	return out
}

// PathSegment is a name as one folder name: percent-encoded as a URL path
// segment (so /, \, control characters, % and spaces are encoded, and
// distinct names give distinct folders), with a leading dot encoded too
// (%2E), so that it is never ".", ".." or hidden. An empty name gives "%".
func PathSegment(name string) string {
	if name == "" {
		return "%"
	}
	s := url.PathEscape(name)
	if strings.HasPrefix(s, ".") {
		s = "%2E" + s[1:]
	}
	return s
}

// WriteSet renders a set in format f: json, text, markdown or diff (a policy
// document, or Intercept YAML, is one grant's: --grant chooses it).
func WriteSet(w io.Writer, s *Set, f string, color bool) error {
	var out string
	switch f {
	case "json":
		return encodeJSON(w, s)
	case "markdown":
		out = SetMarkdown(s)
	case "diff":
		out = SetDiff(s)
	case "text":
		out = SetText(s, color)
	default:
		return fmt.Errorf("--format %s prints one policy, and %s has %d grants (%s): pass --grant G, or --out DIR for every grant's policy.json",
			f, s.Server, len(s.Grants), strings.Join(s.Grants, ", "))
	}
	_, err := w.Write([]byte(out))
	return err
}

// SetDiff is every grant's unified diff, one file per grant folder.
func SetDiff(s *Set) string {
	var b strings.Builder
	for _, r := range s.Reports() {
		seg := PathSegment(r.Grant)
		b.WriteString(diffOf(r, "current/"+seg+"/policy.json", "proposed/"+seg+"/policy.json"))
	}
	return b.String()
}

type setRow struct {
	calls, findings, widen, allowed, hidden, changed, newly int64
}

func rowOf(r *Report) setRow {
	c := countChanges(r)
	return setRow{calls: r.Window.Calls, findings: int64(len(r.Findings)), widen: int64(c.widen),
		allowed: int64(len(r.Policy.Tools)), hidden: int64(len(r.Policy.Hide)), changed: r.Replay.Changed, newly: r.Replay.NewlyAllowed}
}

// SetText is the terminal summary: a line per grant, then each grant's.
func SetText(s *Set, color bool) string {
	t := render.Terminal
	var b strings.Builder
	fmt.Fprintf(&b, "mcptrail recommendations for %s: one policy per grant (%s)\n", t(s.Server), plural(int64(len(s.Grants)), "grant", "grants"))
	fmt.Fprintf(&b, "  %-24s %9s %9s %7s %8s %7s %9s %14s\n", "grant", "calls", "findings", "widens", "allowed", "hidden", "changed", "newly_allowed")
	for _, g := range s.Grants {
		r := rowOf(s.Policies[g])
		fmt.Fprintf(&b, "  %-24s %9d %9d %7d %8d %7d %9d %14d\n", t(g), r.calls, r.findings, r.widen, r.allowed, r.hidden, r.changed, r.newly)
	}
	if s.UngrantedCalls > 0 {
		fmt.Fprintf(&b, "  %s carry no grant: no per-grant policy covers them\n", plural(s.UngrantedCalls, "call", "calls"))
	}
	for _, r := range s.Reports() {
		b.WriteString("\n")
		b.WriteString(Text(r, color))
	}
	return render.Fit(b.String(), render.TextWidth)
}

// SetMarkdown is the PR body for every grant: a summary table, then each
// grant's recommendation one heading level down.
func SetMarkdown(s *Set) string {
	code, cell := render.MarkdownCode, render.MarkdownCodeCell
	var b strings.Builder
	fmt.Fprintf(&b, "## mcptrail: least-privilege policies for %s, one per grant\n\n", code(s.Server))
	b.WriteString("PolicyLayer attaches a policy to a grant, so each grant gets its own proposal, in its folder (`<grant>/policy.json`).\n\n")
	b.WriteString("| Grant | Calls | Findings | Widens access | Tools allowed | Hidden | Allowed then, refused now | Refused then, allowed now |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range s.Grants {
		r := rowOf(s.Policies[g])
		widen := GroupDigits(r.widen)
		if r.widen > 0 {
			widen = "⚠️ " + widen
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", cell(g), GroupDigits(r.calls), GroupDigits(r.findings), widen,
			GroupDigits(r.allowed), GroupDigits(r.hidden), GroupDigits(r.changed), GroupDigits(r.newly))
	}
	b.WriteString("\n")
	if s.UngrantedCalls > 0 {
		fmt.Fprintf(&b, "%s carry no grant: no per-grant policy covers them.\n\n", plural(s.UngrantedCalls, "call", "calls"))
	}
	for _, r := range s.Reports() {
		b.WriteString(markdown(r, 3))
		b.WriteString("\n")
	}
	return b.String()
}

// WriteSetFolder writes the PR-ready folder of a set: DIR/<grant>/policy.json
// and policy.diff per grant, and one PR.md and recommendations.json for all.
func WriteSetFolder(dir string, s *Set) error {
	var js bytes.Buffer
	if err := encodeJSON(&js, s); err != nil {
		return err
	}
	files := []folderFile{{"PR.md", []byte(SetMarkdown(s))}, {"recommendations.json", js.Bytes()}}
	for _, r := range s.Reports() {
		pol, err := r.Policy.Canonical()
		if err != nil {
			return err
		}
		seg := PathSegment(r.Grant)
		files = append(files, folderFile{filepath.Join(seg, "policy.json"), pol},
			folderFile{filepath.Join(seg, "policy.diff"), []byte(diffOf(r, "current/"+seg+"/policy.json", "proposed/"+seg+"/policy.json"))})
	}
	return writeFiles(dir, files)
}

type folderFile struct {
	name string
	data []byte
}

func writeFiles(dir string, files []folderFile) error {
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(p), err)
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// GrantsOptions select a server's recommendation, one proposal per grant.
type GrantsOptions struct {
	Server string
	// Grant is the one grant to recommend for; "" recommends for every
	// grant seen in the window (or once, for a server whose calls carry no
	// grant).
	Grant  string
	Now    time.Time
	Params Params
	// GeneratedAt, when set, is written as every report's generated_at.
	GeneratedAt time.Time
	// Inputs gives one grant's recommender inputs (catalog, current policy,
	// suppressions, target, log); RecommendGrants sets their Server, Grant,
	// Now and Params. The grant is "" for a server whose calls carry none.
	Inputs func(ctx context.Context, grant string) (Options, error)
	// Record, when set, records the run's reports (one per scope) in the
	// finding history before they are returned; it marks their findings
	// (AdvanceHistory). An error fails the run: a recommendation whose
	// recording failed is not shown as if it had been recorded.
	Record func(ctx context.Context, reports []*Report) error
	// Log receives the time the window figures of every grant took, at
	// debug level (each grant's own stages go to its Options.Log); nil is
	// quiet.
	Log *slog.Logger
	// ProposalOnly is every grant's Options.ProposalOnly.
	ProposalOnly bool
}

// grantsAtOnce is how many grants' recommendations RecommendGrants makes
// at once.
const grantsAtOnce = 2

// RecommendGrants proposes a server's policies as `mcptrail recommend` and
// the report do (SPEC §5): for one grant, or a server whose calls carry
// none, a single report; otherwise a set, one report per grant seen in the
// window. A grant with no calls in the window is an error wrapping
// ErrNoCalls that names the grants that have calls.
func RecommendGrants(ctx context.Context, db *sql.DB, o GrantsOptions) (*Report, *Set, error) {
	from := o.Now.Add(-o.Params.Window)
	server := query{db: db, server: o.Server, from: from, to: o.Now, log: o.Log}
	byGrant, all, grants, ungranted, err := grantFigures(ctx, server)
	if err != nil {
		return nil, nil, err
	}
	// Every grant's tool usage in one pass, when there is one report per
	// grant.
	var usageByGrant map[string]map[string]*usage
	if o.Grant == "" && len(grants) > 0 {
		if usageByGrant, err = grantUsage(ctx, server, o.Params.Window); err != nil {
			return nil, nil, err
		}
	}
	one := func(ctx context.Context, g string) (*Report, error) {
		opts := Options{}
		if o.Inputs != nil {
			var err error
			if opts, err = o.Inputs(ctx, g); err != nil {
				return nil, err
			}
		}
		opts.Server, opts.Grant, opts.Now, opts.Params, opts.ProposalOnly = o.Server, g, o.Now, o.Params, o.ProposalOnly
		opts.figures, opts.usage = byGrant[g], usageByGrant[g]
		if g == "" {
			opts.figures = all
		}
		r, err := Recommend(ctx, db, opts)
		if err != nil {
			return nil, err
		}
		if !o.GeneratedAt.IsZero() {
			r.GeneratedAt = o.GeneratedAt
		}
		return r, nil
	}
	if o.Grant != "" || len(grants) == 0 {
		r, err := one(ctx, o.Grant)
		if err != nil && o.Grant != "" && len(grants) > 0 && errors.Is(err, ErrNoCalls) {
			names := make([]string, len(grants))
			for i, g := range grants {
				names[i] = render.Terminal(g)
			}
			return nil, nil, fmt.Errorf("%w for server %q and grant %q between %s and %s; the grants with calls there are %s: pass one of them to --grant, or leave --grant out for one policy per grant",
				ErrNoCalls, o.Server, o.Grant, from.Format(time.RFC3339), o.Now.Format(time.RFC3339), strings.Join(names, ", "))
		}
		if err == nil && o.Record != nil {
			err = o.Record(ctx, []*Report{r})
		}
		if err != nil {
			return nil, nil, err
		}
		return r, nil, nil
	}
	set := &Set{Server: o.Server, Grants: grants, UngrantedCalls: ungranted, Policies: map[string]*Report{}}
	// Two grants at a time: each leaves a core idle part of the time (its
	// own Go work between queries, the single-threaded ends of DuckDB's),
	// which the other takes (5M calls of 4 grants, alternating pairs: ~11%
	// of the wall time; none at 10M). Every grant's report is its own.
	reports := make([]*Report, len(grants))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(grantsAtOnce)
	// The busiest grants first, so that the last to finish is a small one.
	order := make([]int, len(grants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(byGrant[grants[b]].window.Calls, byGrant[grants[a]].window.Calls)
	})
	for _, i := range order {
		eg.Go(func() (err error) {
			start := time.Now()
			reports[i], err = one(ectx, grants[i])
			if o.Log != nil {
				o.Log.Debug("recommend grant", "grant", grants[i], "took", time.Since(start).Round(time.Millisecond))
			}
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, nil, err
	}
	for i, g := range grants {
		set.Policies[g] = reports[i]
		set.GeneratedAt = reports[i].GeneratedAt
	}
	serverFigures, err := server.scopeFigures(ctx, all)
	if err != nil {
		return nil, nil, err
	}
	set.Window = serverFigures.window
	if o.Record != nil {
		if err := o.Record(ctx, set.Reports()); err != nil {
			return nil, nil, err
		}
	}
	return nil, set, nil
}
