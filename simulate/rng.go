package simulate

import (
	"math"
	"math/bits"
)

// rng is xoshiro256**. It is defined here rather than taken from math/rand so
// that the stream (and so every golden file built from it) is fixed by this
// code, not by the Go release.
type rng struct{ s [4]uint64 }

// newRNG seeds a generator from seed and a stream number with splitmix64, so
// that independent streams (background traffic, planted incidents,
// calibration) never overlap.
func newRNG(seed int64, stream uint64) *rng {
	x := uint64(seed) ^ (stream * 0x9e3779b97f4a7c15)
	var r rng
	for i := range r.s {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		r.s[i] = z ^ (z >> 31)
	}
	return &r
}

func (r *rng) u64() uint64 {
	s := &r.s
	out := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return out
}

// float returns a uniform value in [0, 1).
func (r *rng) float() float64 { return float64(r.u64()>>11) * 0x1p-53 }

// intn returns a uniform value in [0, n); n must be positive.
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.u64(), uint64(n))
	return int(hi)
}

// between returns a uniform value in [lo, hi].
func (r *rng) between(lo, hi int) int { return lo + r.intn(hi-lo+1) }

func (r *rng) chance(p float64) bool { return r.float() < p }

// exp returns an exponential variate with mean 1.
func (r *rng) exp() float64 { return -math.Log(1 - r.float()) }

// normal returns a standard normal variate (Box–Muller; the second value is
// dropped so that the stream position never depends on earlier calls' parity).
func (r *rng) normal() float64 {
	u := 1 - r.float() // (0, 1]
	v := r.float()
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*v)
}

// lognormal returns a value whose median is median and whose log has standard
// deviation sigma: the usual shape of latencies and think times.
func (r *rng) lognormal(median, sigma float64) float64 {
	return median * math.Exp(float64(sigma*r.normal()))
}

// skewed returns an index in [0, n) biased towards 0: a few VMs get most of
// the attention, as in real clusters.
func (r *rng) skewed(n int) int {
	u := r.float()
	i := int(float64(n) * float64(u*u))
	if i >= n {
		i = n - 1
	}
	return i
}

// weighted returns an index of w chosen with probability proportional to its
// weight; the weights must not all be zero.
func (r *rng) weighted(w []float64) int {
	var total float64
	for _, x := range w {
		total += x
	}
	x := r.float() * total
	for i, wi := range w {
		if x < wi {
			return i
		}
		x -= wi
	}
	for i := len(w) - 1; i >= 0; i-- {
		if w[i] > 0 {
			return i
		}
	}
	return 0
}

// pick returns a uniformly chosen element of xs.
func pick[T any](r *rng, xs []T) T { return xs[r.intn(len(xs))] }
