package simulate

import (
	"math"
	"sort"
)

const (
	msPerSecond  = int64(1000)
	msPerMinute  = 60 * msPerSecond
	msPerHour    = 60 * msPerMinute
	msPerDay     = 24 * msPerHour
	hoursPerWeek = 168
	// epochHourOfWeek is the hour of the week (Monday 00:00 UTC = 0) at the
	// Unix epoch, a Thursday.
	epochHourOfWeek = 72
)

// profile is a relative intensity for each hour of the week, Monday 00:00 UTC
// first, normalised to a mean of 1 so that a rate "per day" keeps its meaning.
type profile [hoursPerWeek]float64

func normalised(p profile) profile {
	var sum float64
	for _, x := range p {
		sum += x
	}
	for i := range p {
		p[i] *= hoursPerWeek / sum
	}
	return p
}

// officeHours: humans drive the agents, so traffic follows the working day,
// with a lunch dip and quiet weekends.
var officeHours = workday(0.2)

// everyDay has the working day's shape on every day of the week: a small
// dataset keeps its size whichever days its window covers.
var everyDay = workday(1)

// workday is the daily shape of human-driven traffic; weekends get the given
// share of a weekday's volume.
func workday(weekend float64) profile {
	day := [24]float64{
		0.08, 0.05, 0.05, 0.05, 0.05, 0.08, 0.15, 0.4, // 00-07
		1.1, 2.0, 2.3, 2.2, 1.4, 1.9, 2.2, 2.1, // 08-15
		1.8, 1.2, 0.7, 0.45, 0.35, 0.3, 0.2, 0.12, // 16-23
	}
	var p profile
	for d := 0; d < 7; d++ {
		f := 1.0
		if d >= 5 {
			f = weekend
		}
		for h := 0; h < 24; h++ {
			p[d*24+h] = day[h] * f
		}
	}
	return normalised(p)
}

// aroundTheClock: dashboards refresh whether or not anyone looks at them.
var aroundTheClock = func() profile {
	var p profile
	for i := range p {
		p[i] = 1
	}
	return p
}()

// nightly: batch jobs scheduled between 01:00 and 04:00 UTC every day.
var nightly = func() profile {
	var p profile
	for d := 0; d < 7; d++ {
		p[d*24+1], p[d*24+2], p[d*24+3] = 1, 2, 1
	}
	return normalised(p)
}()

// intensity is a piecewise-constant rate (units per hour for each hour of the
// week) with its integral, so that a Poisson process that follows it can be
// drawn by inversion: exponential steps in "integrated" time mapped back to
// wall time.
type intensity struct {
	rate   [hoursPerWeek]float64
	prefix [hoursPerWeek + 1]float64 // prefix[i] = sum of rate[:i]
}

func newIntensity(rate profile) *intensity {
	in := &intensity{rate: rate}
	for i, x := range rate {
		in.prefix[i+1] = in.prefix[i] + x
	}
	return in
}

func (in *intensity) weekTotal() float64 { return in.prefix[hoursPerWeek] }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// hourOfWeek is the hour of the week (Monday 00:00 UTC = 0) of ms.
func hourOfWeek(ms int64) int {
	h := floorDiv(ms, msPerHour) + epochHourOfWeek
	return int(h - floorDiv(h, hoursPerWeek)*hoursPerWeek)
}

// at is the integral of the rate from a fixed origin up to ms (Unix millis).
func (in *intensity) at(ms int64) float64 {
	h := floorDiv(ms, msPerHour)
	within := ms - h*msPerHour
	hh := h + epochHourOfWeek
	week := floorDiv(hh, hoursPerWeek)
	how := hh - week*hoursPerWeek
	// The explicit conversions round each product, so no platform fuses them
	// into a multiply-add with a different result.
	return float64(float64(week)*in.weekTotal()) + in.prefix[how] + float64(in.rate[how]*float64(within)/float64(msPerHour))
}

// inverse returns the first millisecond whose integral reaches x.
func (in *intensity) inverse(x float64) int64 {
	total := in.weekTotal()
	week := math.Floor(x / total)
	rem := x - float64(week*total)
	i := sort.Search(hoursPerWeek, func(i int) bool { return in.prefix[i+1] > rem })
	if i == hoursPerWeek { // rounding put rem at the very end of the week
		week++
		rem = 0
		i = sort.Search(hoursPerWeek, func(i int) bool { return in.prefix[i+1] > 0 })
	}
	frac := (rem - in.prefix[i]) / in.rate[i]
	hh := int64(week)*hoursPerWeek + int64(i) - epochHourOfWeek
	return hh*msPerHour + int64(math.Ceil(frac*float64(msPerHour)))
}
