package recommend

import (
	"cmp"
	"math"
)

// quantileSelect is quantile of s: the value at rank ⌊q·(n−1)⌋ of s
// sorted (slices.Sort's order, cmp.Less: NaNs first), found by selection:
// s is reordered, not sorted. A polled tool can have tens of thousands
// of loops, whose polls, gaps and variations were each sorted for one or
// two ranks (~1.5% of a recommendation's CPU over 5M calls); selection
// reads each a few times instead.
func quantileSelect(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	return nthSmallest(s, int(math.Floor(q*float64(len(s)-1)+1e-9)))
}

// nthSmallest reorders s so that s[k] holds what sorting would put there,
// and returns it (quickselect: the range holding rank k is split around
// the median of its ends and middle until it is one value wide).
func nthSmallest(s []float64, k int) float64 {
	lo, hi := 0, len(s)-1
	for lo < hi {
		// Median of three as the pivot, moved to hi.
		mid := lo + (hi-lo)/2
		if cmp.Less(s[mid], s[lo]) {
			s[mid], s[lo] = s[lo], s[mid]
		}
		if cmp.Less(s[hi], s[lo]) {
			s[hi], s[lo] = s[lo], s[hi]
		}
		if cmp.Less(s[mid], s[hi]) {
			s[mid], s[hi] = s[hi], s[mid]
		}
		pivot := s[hi]
		// Three ways: [lo, lt) below the pivot, [lt, gt] equal, (gt, hi] above;
		// many loops share a count of polls.
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch {
			case cmp.Less(s[i], pivot):
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case cmp.Less(pivot, s[i]):
				s[i], s[gt] = s[gt], s[i]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return s[k]
		}
	}
	return s[k]
}
