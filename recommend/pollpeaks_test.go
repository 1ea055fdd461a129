package recommend

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
)

// TestPollPeaksCountEveryWindowFromTheCalls: the peaks of a polled tool per
// session and window, and its windows by how many calls they hold inside
// and outside its runaway loops, equal those counted here from the calls
// themselves, for the minute, hour and day together and for hour and day
// alone; a call inside two loops of its session counts once. The calls spread over three days, with bursts inside one minute
// and pauses of hours; sessionless calls count under the grant, a session
// whose calls all fall inside a loop has no peak, and calls of another
// tool, denied calls and calls outside the window do not count.
func TestPollPeaksCountEveryWindowFromTheCalls(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	from := end.Add(-3 * 24 * time.Hour)
	const tool, other = "get_task_status", "start_vm"
	rng := rand.New(rand.NewPCG(7, 11))
	var evs []audit.Event
	add := func(session, tool string, ts time.Time, d audit.Decision) {
		agent := "bot"
		if session == "" {
			agent = "" // else the store derives a session (SPEC §3)
		}
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e%d", len(evs)), TS: ts, Server: "proxmox-mcp", Tool: tool,
			Method: "tools/call", Decision: d, Grant: "ops-bot", Agent: agent, Session: session})
	}
	for s := range 40 {
		session := fmt.Sprintf("s%02d", s)
		if s%10 == 9 {
			session = "" // under the grant's key
		}
		at := from.Add(time.Duration(rng.Int64N(int64(70 * time.Hour))))
		for range 5 + rng.IntN(120) {
			d := audit.Allowed
			switch rng.IntN(12) {
			case 0:
				d = audit.RateLimited
			case 1:
				d = audit.Denied
			}
			add(session, tool, at, d)
			if rng.IntN(6) == 0 {
				add(session, other, at.Add(time.Millisecond), audit.Allowed)
			}
			// Mostly seconds apart, at times a burst in one minute, at
			// times an hour's pause.
			gap := time.Duration(1+rng.IntN(40)) * time.Second
			switch rng.IntN(20) {
			case 0:
				gap = 50 * time.Millisecond
			case 1:
				gap = time.Duration(30+rng.IntN(90)) * time.Minute
			}
			at = at.Add(gap)
		}
	}
	add("s01", tool, from, audit.Allowed) // at the window's start: outside it
	add("s01", tool, end.Add(time.Second), audit.Allowed)
	store := tempStore(t)
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	db := store.DB()

	// Runaway loops: a stretch of some sessions' calls each, one of them
	// of the sessionless calls; one session's loop holds all its calls (it
	// has no peak).
	type span struct {
		key    string
		t0, t1 time.Time
	}
	var loops []span
	bySession := map[string][]time.Time{}
	for _, e := range evs {
		if e.Tool == tool {
			bySession[e.Session] = append(bySession[e.Session], e.TS)
		}
	}
	for _, s := range []string{"s03", "s07", "s12", "", "s25"} {
		ts := bySession[s]
		require.NotEmpty(t, ts, s)
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		loops = append(loops, span{s, ts[len(ts)/4], ts[len(ts)*3/4]})
	}
	whole := bySession["s30"]
	slices.SortFunc(whole, func(a, b time.Time) int { return a.Compare(b) })
	loops = append(loops, span{"s30", whole[0], whole[len(whole)-1]})
	// Loops of one session that overlap, or share the millisecond where
	// one ends and the next begins: their calls count once.
	ts := bySession["s03"]
	loops = append(loops, span{"s03", ts[len(ts)/8], ts[len(ts)/2]})
	ts = bySession["s12"]
	loops = append(loops, span{"s12", ts[len(ts)*3/4], ts[len(ts)-1]})
	var runaway []run
	for _, l := range loops {
		r := run{Tool: tool, FirstMS: l.t0.UnixMilli(), LastMS: l.t1.UnixMilli()}
		require.NoError(t, db.QueryRow(`SELECT hash(coalesce(?, ''))`, l.key).Scan(&r.SessionHash))
		runaway = append(runaway, r)
	}
	inLoop := func(e audit.Event) bool {
		for _, l := range loops {
			ms := e.TS.UnixMilli()
			if l.key == e.Session && ms >= l.t0.UnixMilli() && ms <= l.t1.UnixMilli() {
				return true
			}
		}
		return false
	}

	// want counts the window's buckets per key from the calls.
	want := func(window string) (*peakStats, windowBuckets) {
		type bucket struct {
			key string
			w   int64
		}
		normal, loop := map[bucket]int64{}, map[bucket]int64{}
		for _, e := range evs {
			if e.Tool != tool || !e.TS.After(from) || e.TS.After(end) || (e.Decision != audit.Allowed && e.Decision != audit.RateLimited) {
				continue
			}
			b := bucket{"s:" + e.Session, e.TS.UnixMilli() / policy.WindowLength(window).Milliseconds()}
			if e.Session == "" {
				b.key = "g:ops-bot"
			}
			if inLoop(e) {
				loop[b]++
			} else {
				normal[b]++
			}
		}
		wb := windowBuckets{Runaway: bucketCounts{}, Normal: bucketCounts{}}
		peak, calls := map[string]int64{}, int64(0)
		for b, n := range normal {
			wb.Normal[n]++
			peak[b.key] = max(peak[b.key], n)
			calls += n
		}
		for _, n := range loop {
			wb.Runaway[n]++
		}
		peaks := slices.Sorted(func(yield func(int64) bool) {
			for _, p := range peak {
				if !yield(p) {
					return
				}
			}
		})
		at := func(q float64) float64 {
			return float64(peaks[max(int(math.Ceil(float64(len(peaks))*q)), 1)-1])
		}
		return &peakStats{Tool: tool, Scopes: int64(len(peaks)), Calls: calls, Max: float64(peaks[len(peaks)-1]),
			P50: at(0.5), P90: at(0.9), P99: at(0.99)}, wb
	}

	q := query{db: db, server: "proxmox-mcp", grant: "ops-bot", from: from, to: end}
	for _, windows := range [][]string{policy.Windows, {policy.WindowHour, policy.WindowDay}, {policy.WindowDay}} {
		t.Run(fmt.Sprint(windows), func(t *testing.T) {
			stats, buckets, err := q.pollPeaks(ctx, tool, policy.ScopeSession, windows, runaway)
			require.NoError(t, err)
			for _, w := range windows {
				ws, wb := want(w)
				assert.Equal(t, ws, stats[w], w)
				assert.Equal(t, wb, buckets[w], w)
				require.NotEmpty(t, wb.Runaway, "%s: calls inside loops", w)
				require.Greater(t, ws.Max, 1.0, "%s: a key with several calls in a window", w)
			}
			assert.Len(t, stats, len(windows))
		})
	}
}
