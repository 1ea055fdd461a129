package backtest

import (
	"maps"
	"math"
	"slices"
)

// summarize gives each grant's metrics across the folds that scored it, in
// grant order.
func summarize(folds []Fold) []Summary {
	type acc struct {
		sum   Summary
		named map[string][]float64
	}
	names := []string{"under_privilege_calls", "under_privilege_rate", "over_privilege_tools", "over_privilege_rate",
		"runaway_polls_cut", "newly_allowed"}
	by := map[string]*acc{}
	for _, f := range folds {
		for _, s := range f.Grants {
			if s.NoTestTraffic {
				continue
			}
			a := by[s.Grant]
			if a == nil {
				a = &acc{sum: Summary{Grant: s.Grant}, named: map[string][]float64{}}
				by[s.Grant] = a
			}
			a.sum.Folds++
			if s.Draft {
				a.sum.Drafts++
			}
			add := func(name string, v *float64) {
				if v != nil {
					a.named[name] = append(a.named[name], *v)
				}
			}
			num := func(v int64) *float64 { f := float64(v); return &f }
			add(names[0], num(s.Under.Calls))
			add(names[1], s.Under.Rate)
			add(names[2], num(int64(s.Over.Count)))
			add(names[3], s.Over.Rate)
			add(names[4], num(s.RunawayPollsCut))
			add(names[5], num(s.NewlyAllowed))
		}
	}
	out := []Summary{}
	for _, g := range slices.Sorted(maps.Keys(by)) {
		a := by[g]
		a.sum.Metrics = []Metric{}
		for _, n := range names {
			vs := a.named[n]
			if len(vs) == 0 {
				continue
			}
			m := Metric{Name: n, Folds: len(vs), Min: slices.Min(vs), Max: slices.Max(vs)}
			for _, v := range vs {
				m.Mean += v
			}
			m.Mean = math.Round(m.Mean/float64(len(vs))*1e4) / 1e4
			a.sum.Metrics = append(a.sum.Metrics, m)
		}
		out = append(out, a.sum)
	}
	return out
}
