package simulate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHourOfWeek(t *testing.T) {
	for _, tt := range []struct {
		at   time.Time
		want int
	}{
		{time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC), 0}, // a Monday
		{time.Date(2025, 6, 4, 12, 30, 0, 0, time.UTC), 60},
		{time.Date(2025, 6, 8, 23, 59, 59, 0, time.UTC), 167},
		{time.Date(1969, 12, 29, 0, 0, 0, 0, time.UTC), 0}, // before the epoch
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), 72},
	} {
		assert.Equal(t, tt.want, hourOfWeek(tt.at.UnixMilli()), tt.at)
	}
}

func TestProfilesAverageOne(t *testing.T) {
	for name, p := range map[string]profile{"office": officeHours, "every day": everyDay, "flat": aroundTheClock, "nightly": nightly} {
		var sum float64
		for _, x := range p {
			require.GreaterOrEqual(t, x, 0.0)
			sum += x
		}
		assert.InDelta(t, 1, sum/hoursPerWeek, 1e-9, name)
	}
}

// TestIntensityInverse: inverse finds the first millisecond whose integral
// reaches x, across zero-rate hours and week boundaries.
func TestIntensityInverse(t *testing.T) {
	in := (&kind{prof: &nightly}).intensity()
	r := newRNG(1, 1)
	base := time.Date(2025, 6, 4, 12, 0, 0, 0, time.UTC).UnixMilli()
	x0 := in.at(base)
	for i := 0; i < 2000; i++ {
		x := x0 + r.float()*3*in.weekTotal()
		ms := in.inverse(x)
		require.GreaterOrEqual(t, in.at(ms), x-1e-9)
		require.Less(t, in.at(ms-1), x)
		h := hourOfWeek(ms - 1) // the hour that reached x has a positive rate
		require.Positive(t, in.rate[h])
	}
	assert.InDelta(t, in.weekTotal(), in.at(base+7*msPerDay)-in.at(base), 1e-6)
}
