package recommend

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// quantileSorted is quantile of values already sorted: the definition
// quantileSelect is held to.
func quantileSorted(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	return s[int(math.Floor(q*float64(len(s)-1)+1e-9))]
}

// TestQuantileSelectIsTheSortedRank: selection gives, for every rank, what
// sorting gives, on values with many repeats (loops' counts of polls), on
// distinct values, and with NaNs.
func TestQuantileSelectIsTheSortedRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := map[string]func(int) float64{
		"repeats":  func(int) float64 { return float64(rng.IntN(12)) },
		"distinct": func(int) float64 { return rng.NormFloat64() },
		"nans": func(i int) float64 {
			if i%7 == 0 {
				return math.NaN()
			}
			return float64(rng.IntN(5))
		},
		"sorted":   func(i int) float64 { return float64(i) },
		"reversed": func(i int) float64 { return float64(-i) },
	}
	for name, value := range inputs {
		for _, n := range []int{1, 2, 3, 10, 101, 5000} {
			v := make([]float64, n)
			for i := range v {
				v[i] = value(i)
			}
			sorted := slices.Clone(v)
			slices.Sort(sorted)
			for _, q := range []float64{0, 0.05, 0.5, 0.95, 0.99, 1} {
				want := quantileSorted(sorted, q)
				got := quantileSelect(slices.Clone(v), q)
				if math.IsNaN(want) {
					require.True(t, math.IsNaN(got), "%s, n %d, q %g", name, n, q)
					continue
				}
				require.Equal(t, want, got, "%s, n %d, q %g", name, n, q)
			}
			for k := 0; k < n; k += max(1, n/97) {
				s := slices.Clone(v)
				got := nthSmallest(s, k)
				if math.IsNaN(sorted[k]) {
					require.True(t, math.IsNaN(got), "%s, n %d, rank %d", name, n, k)
				} else {
					require.Equal(t, sorted[k], got, "%s, n %d, rank %d", name, n, k)
				}
			}
		}
	}
	require.Zero(t, quantileSelect(nil, 0.5))
}

// BenchmarkLoopQuantiles: the quantiles of one polled tool's loops
// (75,000 loops, as ops-bot's over 5M calls: polls with many repeats,
// gaps and variations distinct), by sorting each and by selection.
func BenchmarkLoopQuantiles(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 75000
	polls, gaps := make([]float64, n), make([]float64, n)
	for i := range n {
		polls[i], gaps[i] = float64(3+rng.IntN(40)), 5+rng.NormFloat64()
	}
	b.Run("sort", func(b *testing.B) {
		for b.Loop() {
			p, g, c := slices.Clone(polls), slices.Clone(gaps), slices.Clone(gaps)
			slices.Sort(p)
			slices.Sort(g)
			slices.Sort(c)
			_ = quantileSorted(p, 0.5) + quantileSorted(p, 0.95) + quantileSorted(g, 0.5) + quantileSorted(c, 0.5)
		}
	})
	b.Run("select", func(b *testing.B) {
		for b.Loop() {
			p, g, c := slices.Clone(polls), slices.Clone(gaps), slices.Clone(gaps)
			_ = quantileSelect(p, 0.5) + quantileSelect(p, 0.95) + quantileSelect(g, 0.5) + quantileSelect(c, 0.5)
		}
	})
}
