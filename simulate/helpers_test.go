package simulate

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// testNow is a Wednesday noon, so the default windows cover full working weeks.
var testNow = time.Date(2025, 6, 4, 12, 0, 0, 0, time.UTC)

func collect(t testing.TB, opts Options) ([]audit.Event, Stats) {
	t.Helper()
	var evs []audit.Event
	st, err := Generate(context.Background(), opts, func(e audit.Event) error {
		evs = append(evs, e)
		return nil
	})
	require.NoError(t, err)
	return evs, st
}

func bySession(evs []audit.Event) map[string][]audit.Event {
	m := map[string][]audit.Event{}
	for _, e := range evs {
		m[e.Session] = append(m[e.Session], e)
	}
	return m
}

// run is a maximal streak, inside one session, of calls of one tool with one
// args_hash, right after a call of another tool: the shape SPEC §5 calls a
// polling loop (or a retry storm when its calls fail).
type run struct {
	session   string
	start     audit.Event // the call before the streak
	calls     []audit.Event
	intervals []time.Duration
}

func (r run) tool() string { return r.calls[0].Tool }

func (r run) errors() int {
	n := 0
	for _, c := range r.calls {
		if c.Status == "error" {
			n++
		}
	}
	return n
}

// cv is the coefficient of variation of the streak's intervals.
func (r run) cv() float64 {
	if len(r.intervals) == 0 {
		return 0
	}
	var sum, sq float64
	for _, d := range r.intervals {
		sum += d.Seconds()
	}
	mean := sum / float64(len(r.intervals))
	for _, d := range r.intervals {
		sq += (d.Seconds() - mean) * (d.Seconds() - mean)
	}
	return sqrt(sq/float64(len(r.intervals))) / mean
}

func sqrt(x float64) float64 {
	z := x
	if z == 0 {
		return 0
	}
	for i := 0; i < 60; i++ {
		z = (z + x/z) / 2
	}
	return z
}

// runs finds every streak of at least min repeated calls.
func runs(evs []audit.Event, min int) []run {
	var out []run
	sessions := bySession(evs)
	ids := make([]string, 0, len(sessions))
	for id := range sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := sessions[id]
		for i := 1; i < len(s); {
			if s[i].Tool == s[i-1].Tool {
				i++
				continue
			}
			j := i + 1
			for j < len(s) && s[j].Tool == s[i].Tool && s[j].ArgsHash == s[i].ArgsHash {
				j++
			}
			if j-i >= min {
				r := run{session: id, start: s[i-1], calls: s[i:j]}
				for k := i + 1; k < j; k++ {
					r.intervals = append(r.intervals, s[k].TS.Sub(s[k-1].TS))
				}
				out = append(out, r)
			}
			i = j
		}
	}
	return out
}
