package backtest

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// score replays a proposal over the test window (from, to].
func score(ctx context.Context, db *sql.DB, o Options, r *recommend.Report, from, to time.Time) (Score, error) {
	s := Score{Grant: r.Grant, Draft: r.Draft, Confidence: r.Confidence, FailedGates: []string{}, TrainCalls: r.Window.Calls,
		Under: Under{ByTool: []ToolUnder{}, Examples: []recommend.AffectedCall{}}, Over: Over{Tools: []string{}}}
	for _, g := range r.Gates {
		if !g.OK {
			s.FailedGates = append(s.FailedGates, g.Name+": "+g.Detail)
		}
	}
	allowed := allowedTools(r.Policy)
	s.Over.AllowedTools = len(allowed)
	runaway, err := testLoops(ctx, db, o, r.Grant, from, to)
	if errors.Is(err, recommend.ErrNoCalls) {
		s.NoTestTraffic = true
		return s, nil
	}
	if err != nil {
		return s, err
	}
	// As recommend replays its own window: with the current policy, whose
	// conditional refusals of calls without stored arguments the
	// proposal's same conditions refuse again.
	rp, err := recommend.Run(ctx, db, recommend.ReplayOptions{Server: o.Server, Grant: r.Grant, From: from, To: to,
		Policy: r.Policy, Current: r.Current, Loops: runaway, FirstN: o.Examples * 20})
	if err != nil {
		return s, err
	}
	s.TestCalls = rp.Calls
	s.RunawayPollsCut = rp.RunawayPollsCut
	s.NewlyAllowed = rp.NewlyAllowed
	for _, t := range slices.Sorted(maps.Keys(rp.ByTool)) {
		tr := rp.ByTool[t]
		s.RunawayPolls += tr.Loop.Calls
		s.LegitimateCalls += legitimate(tr)
		if tu, ok := toolUnder(t, tr); ok {
			s.Under.ByTool = append(s.Under.ByTool, tu)
			s.Under.Calls += tu.Calls
		}
	}
	s.Under.Rate = ratio(float64(s.Under.Calls), float64(s.LegitimateCalls))
	sort.SliceStable(s.Under.ByTool, func(i, j int) bool { return s.Under.ByTool[i].Calls > s.Under.ByTool[j].Calls })
	s.Under.Examples = examples(rp.FirstAffected, runaway, o.Examples)
	for _, t := range allowed {
		if tr := rp.ByTool[t]; tr == nil || legitimate(tr) == 0 {
			s.Over.Tools = append(s.Over.Tools, t)
		}
	}
	s.Over.Count = len(s.Over.Tools)
	s.Over.Rate = ratio(float64(s.Over.Count), float64(s.Over.AllowedTools))
	return s, nil
}

// testLoops are a grant's runaway loops of the test window (from, to], as
// the detectors find them there with the grant's inputs (its catalog and
// current policy decide which polled tools go behind approval and so have
// none), or as the caller found them already.
func testLoops(ctx context.Context, db *sql.DB, o Options, grant string, from, to time.Time) ([]recommend.RunawayLoop, error) {
	if o.KnownLoops != nil {
		if loops, ok := o.KnownLoops(grant, from, to); ok {
			return loops, nil
		}
	}
	opts := recommend.Options{}
	if o.Inputs != nil {
		var err error
		if opts, err = o.Inputs(ctx, grant); err != nil {
			return nil, err
		}
	}
	opts.Server, opts.Grant, opts.Now, opts.Params = o.Server, grant, to, o.Params
	opts.Params.Window = o.Test
	return recommend.RunawayLoops(ctx, db, opts)
}

// allowedTools are the tools a policy allows: listed under tools, not
// hidden and not behind approval, in name order.
func allowedTools(p *policy.Policy) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, t := range slices.Sorted(maps.Keys(p.Tools)) {
		if t == policy.HideAll || slices.Contains(p.Hide, t) || slices.Contains(p.Hide, policy.HideAll) {
			continue
		}
		if slices.ContainsFunc(p.Tools[t].DenyIf, func(d policy.DenyRule) bool { return d.IsApproval() }) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// ratio is n/d rounded to four decimals, or nil when d is 0.
func ratio(n, d float64) *float64 {
	if d == 0 {
		return nil
	}
	r := math.Round(n/d*1e4) / 1e4
	return &r
}

// legitimate counts a tool's legitimate test calls: those the gateway
// allowed (allowed now − newly allowed + changed), less those inside the
// window's runaway loops.
func legitimate(tr *recommend.ToolReplay) int64 {
	return tr.Allowed - tr.NewlyAllowed + tr.Changed - tr.Loop.Allowed
}

// toolUnder is a tool's under-privilege: its legitimate calls the proposal
// refuses, by cause, leaving out the runaway polls it refuses.
func toolUnder(t string, tr *recommend.ToolReplay) (ToolUnder, bool) {
	tu := ToolUnder{Tool: t, Calls: tr.Changed - tr.Loop.Changed}
	if tu.Calls <= 0 {
		return tu, false
	}
	for c, n := range tr.ChangedBy {
		if n -= tr.Loop.ChangedBy[c]; n > 0 {
			tu.Causes = append(tu.Causes, Cause{Decision: c.Decision, Rule: c.Rule, Calls: n})
		}
	}
	sort.Slice(tu.Causes, func(i, j int) bool {
		a, b := tu.Causes[i], tu.Causes[j]
		if a.Calls != b.Calls {
			return a.Calls > b.Calls
		}
		return a.Decision+a.Rule < b.Decision+b.Rule
	})
	return tu, true
}

// examples are the first n refused calls outside the runaway loops (by
// tool and time: an example carries its raw session, a loop its hash).
func examples(first []recommend.AffectedCall, loops []recommend.RunawayLoop, n int) []recommend.AffectedCall {
	out := []recommend.AffectedCall{}
	for _, c := range first {
		if len(out) == n {
			break
		}
		if !slices.ContainsFunc(loops, func(l recommend.RunawayLoop) bool {
			return l.Tool == c.Tool && !c.TS.Before(l.First) && !c.TS.After(l.Last)
		}) {
			out = append(out, c)
		}
	}
	return out
}
