package recommend

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
)

// TestCallMinutesMatchTheCalls: the peaks per session and minute read from
// the call minutes equal those counted from the calls, and a replay whose
// per-session, per-minute limits take their buckets from the minutes (the
// others' from the calls) gives the replay counted from the calls alone,
// for the server and for one grant, with limits of one call a minute, of
// other scopes, of an hour and of a day; minutes of another window are not
// used.
// Each holds before Recluster counted the sealed days' peaks (every day
// from the calls), after (the days inside the window from session_peaks,
// the rest from the calls) and with the middle day taken off the list
// again (the counted days two ranges), for a window of whole days and one
// that starts and ends inside days; the recommendation of each is the
// same in all three.
func TestCallMinutesMatchTheCalls(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	store := trafficStore(t, 4, 8000, 3*24*time.Hour, end, func(i int, e *audit.Event) {
		if i%9 == 0 {
			e.Session, e.Gateway = "", "" // counted under the grant
		}
		if i%5 == 2 {
			e.Decision = audit.Denied // counted by a limit, not in the peaks
		}
	})
	db := store.DB()
	var grant string
	require.NoError(t, db.QueryRow(`SELECT "grant" FROM calls WHERE "grant" IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC LIMIT 1`).Scan(&grant))

	variants := []policy.Limit{
		{Window: policy.WindowMinute, Max: 1, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 1, Scope: policy.ScopeAgent},
		{Window: policy.WindowHour, Max: 3, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeGrant},
		{Window: policy.WindowMinute, Max: 3, Scope: policy.ScopeSession},
		{Window: policy.WindowDay, Max: 2, Scope: policy.ScopeSession},
		{Window: policy.WindowDay, Max: 1, Scope: policy.ScopeSession},
	}
	windows := [][2]time.Time{
		{end.Add(-3 * 24 * time.Hour), end},
		{end.Add(-3*24*time.Hour + 90*time.Minute + 30*time.Second), end.Add(-5*time.Hour - 30*time.Minute)},
	}
	recommendations := map[string]string{}
	for _, counted := range []string{"none", "all", "gap"} {
		switch counted {
		case "all":
			res, err := store.Recluster(ctx, end)
			require.NoError(t, err)
			require.Equal(t, 3, res.CountedDays, "the three sealed days counted")
		case "gap":
			// The middle day off the list (as a late event leaves it):
			// the first and last days from their rows, two ranges apart,
			// the middle one from its calls.
			middle, _ := analytics.ToolDay(end.Add(-36 * time.Hour))
			res, err := db.Exec(`DELETE FROM counted_days WHERE day = ?`, middle)
			require.NoError(t, err)
			n, err := res.RowsAffected()
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
		}
		for wi, w := range windows {
			for _, g := range []string{"", grant} {
				name := fmt.Sprintf("counted=%s/window=%d/grant=%s", counted, wi, g)
				t.Run(name, func(t *testing.T) {
					q := query{db: db, server: "proxmox-mcp", grant: g, from: w[0], to: w[1]}
					checkCallMinutes(t, q, variants, counted == "all" && wi == 0)
					params := DefaultParams()
					params.Window = w[1].Sub(w[0])
					r, err := Recommend(ctx, db, Options{Server: q.server, Grant: g, Now: w[1], Params: params})
					require.NoError(t, err)
					r.GeneratedAt = time.Time{}
					out, err := json.Marshal(r)
					require.NoError(t, err)
					key := fmt.Sprintf("%d/%s", wi, g)
					if counted == "none" {
						recommendations[key] = string(out)
						return
					}
					assert.Equal(t, recommendations[key], string(out), "the recommendation with the days counted")
				})
			}
		}
	}
}

// checkCallMinutes compares the call minutes of q's window with the calls;
// wholeDays: its days are counted in session_peaks, which it then proves
// the peaks come from.
func checkCallMinutes(t *testing.T, q query, variants []policy.Limit, wholeDays bool) {
	ctx := context.Background()
	db := q.db
	tools := queryTools(t, db, `SELECT tool FROM calls WHERE `+inWindow+` AND tool IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC, tool`, q.args()...)
	require.GreaterOrEqual(t, len(tools), len(variants))
	names, err := q.toolNames(ctx, tools)
	require.NoError(t, err)

	m, err := openCallMinutes(ctx, q)
	require.NoError(t, err)
	defer m.close()
	assert.False(t, m.covers(q), "nothing counted yet")
	fromMinutes, err := m.sessionPeaks(ctx, names, tools)
	require.NoError(t, err)
	fromCalls, err := q.peaks(ctx, names, tools, policy.ScopeSession, policy.WindowMinute)
	require.NoError(t, err)
	require.NotEmpty(t, fromCalls)
	assert.Equal(t, fromCalls, fromMinutes)
	require.True(t, m.covers(q))
	one, err := m.sessionPeaks(ctx, names, tools[:1])
	require.NoError(t, err)
	require.NotNil(t, fromCalls[tools[0]])
	assert.Equal(t, map[string]*peakStats{tools[0]: fromCalls[tools[0]]}, one, "one tool's peaks asked alone")
	other := q
	other.from = other.from.Add(time.Minute)
	assert.False(t, m.covers(other), "another window")

	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{}}
	for i, l := range variants {
		l.Counter = fmt.Sprintf("limit_%d", i)
		p.Tools[tools[i]] = &policy.ToolRule{Limits: []policy.Limit{l}}
	}
	require.NoError(t, p.Validate())
	o := ReplayOptions{Server: q.server, Grant: q.grant, From: q.from, To: q.to, Policy: p, plain: true}
	plain, err := Run(ctx, db, o)
	require.NoError(t, err)
	o.plain = false
	own, err := Run(ctx, db, o) // its own minutes where days are counted
	require.NoError(t, err)
	o.minutes = m
	withMinutes, err := Run(ctx, db, o)
	require.NoError(t, err)
	assert.Positive(t, plain.RateLimited, "the limits bite")
	assert.Equal(t, plain, withMinutes)
	assert.Equal(t, plain, own)
	var fromTable int
	require.NoError(t, m.conn.QueryRowContext(ctx, `SELECT count(*) FROM overflow_buckets JOIN replay_limits ON b_lid = lid
		WHERE limit_scope = 'session' AND bucket_ms = 60000 AND b_lim = 1`).Scan(&fromTable))
	assert.Positive(t, fromTable, "buckets of two calls over a limit of one, of the keys the minutes found over it")

	// A polled tool's minutes without runaway loops, from the call
	// minutes (pollWindows), are pollPeaks' own from the calls: its peaks,
	// and its minutes over a limit by how many calls they hold.
	over := 0
	for _, tool := range tools[:min(6, len(tools))] {
		want, wantBuckets, err := q.pollPeaks(ctx, tool, policy.ScopeSession, []string{policy.WindowMinute}, nil)
		require.NoError(t, err)
		for _, lim := range []int{1, 2, 4} {
			st, b, err := m.pollWindows(ctx, names, tool, func(*peakStats) int { return lim })
			require.NoError(t, err)
			assert.Equal(t, want[policy.WindowMinute], st, tool)
			wantOver := bucketCounts{}
			for n, c := range wantBuckets[policy.WindowMinute].Normal {
				if n > int64(lim) {
					wantOver[n] = c
				}
			}
			assert.Equal(t, wantOver, b.Normal, "%s: its minutes over %d", tool, lim)
			assert.Empty(t, b.Runaway)
			over += len(b.Normal)
		}
	}
	assert.Positive(t, over, "minutes over a limit")

	if !wholeDays {
		return
	}
	// The stored rows are what was read: with their peaks doubled, so are
	// the window's.
	_, err = m.conn.ExecContext(ctx, `UPDATE session_peaks SET peak = peak * 2`)
	require.NoError(t, err)
	again, err := m.sessionPeaks(ctx, names, tools)
	require.NoError(t, err)
	assert.Equal(t, fromMinutes, again, "the peaks are read once")
	m.peaks = nil
	doubled, err := m.sessionPeaks(ctx, names, tools)
	require.NoError(t, err)
	_, err = m.conn.ExecContext(ctx, `UPDATE session_peaks SET peak = peak / 2`)
	require.NoError(t, err)
	twice := 0
	for tool, st := range fromCalls {
		// A peak at the window's last instant is counted from the calls.
		assert.GreaterOrEqual(t, doubled[tool].Max, st.Max, tool)
		if doubled[tool].Max == 2*st.Max {
			twice++
		}
	}
	assert.Greater(t, twice, len(fromCalls)/2, "most tools' busiest minutes read from session_peaks")
}

// TestOverflowReadsEveryDayOfAKeyOverItsLimit: a replay whose buckets
// over a per-session, per-minute limit come from the call minutes reads
// the calls of the sessions over it on the days they have calls, from
// their first to their last (fillOverflowBuckets): a session with one
// call on the first day and its busiest minute on the last is found over
// the limit there, whether its days are counted (its rows merged), read
// from the calls (the window's edges), or both (the middle day off the
// list), as the replay counted from the calls alone finds it.
func TestOverflowReadsEveryDayOfAKeyOverItsLimit(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	day0 := end.Add(-72 * time.Hour)
	const tool = "get_vm_status"
	var evs []audit.Event
	add := func(session string, at time.Time) {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("e%d", len(evs)), TS: at, Server: "proxmox-mcp", Tool: tool, Method: "tools/call",
			Decision: audit.Allowed, Grant: "ops-bot", Agent: "bot", Session: session, Gateway: "gw1"})
	}
	add("busy", day0.Add(3*time.Hour))
	for i := range 3 {
		add("busy", day0.Add(68*time.Hour+time.Duration(i)*time.Second))
	}
	for d := range 3 {
		for i := range 4 {
			add(fmt.Sprintf("calm-%d-%d", d, i), day0.Add(time.Duration(24*d+5+i)*time.Hour))
		}
	}
	store := tempStore(t)
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	db := store.DB()
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
		tool: {Limits: []policy.Limit{{Counter: "status", Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeSession}}}}}
	require.NoError(t, p.Validate())
	windows := [][2]time.Time{{day0, end}, {day0.Add(time.Hour), end.Add(-time.Hour)}}
	for _, counted := range []string{"none", "all", "gap"} {
		switch counted {
		case "all":
			res, err := store.Recluster(ctx, end)
			require.NoError(t, err)
			require.Equal(t, 3, res.CountedDays)
		case "gap":
			middle, _ := analytics.ToolDay(day0.Add(36 * time.Hour))
			_, err := db.Exec(`DELETE FROM counted_days WHERE day = ?`, middle)
			require.NoError(t, err)
		}
		for wi, w := range windows {
			t.Run(fmt.Sprintf("counted=%s/window=%d", counted, wi), func(t *testing.T) {
				q := query{db: db, server: "proxmox-mcp", grant: "ops-bot", from: w[0], to: w[1]}
				m, err := openCallMinutes(ctx, q)
				require.NoError(t, err)
				defer m.close()
				require.NoError(t, m.count(ctx, false))
				o := ReplayOptions{Server: q.server, Grant: q.grant, From: q.from, To: q.to, Policy: p, plain: true}
				plain, err := Run(ctx, db, o)
				require.NoError(t, err)
				require.Equal(t, int64(1), plain.RateLimited, "the busy minute's third call")
				o.plain, o.minutes = false, m
				withMinutes, err := Run(ctx, db, o)
				require.NoError(t, err)
				assert.Equal(t, plain, withMinutes)
			})
		}
	}
}

// TestPeakCountsGiveDuckDBsPercentiles: the percentiles scanPeakCounts
// reads from counts of keys per peak are those DuckDB's quantile_disc
// gives over the keys' peaks, for sets of one key to thousands, with few
// and many distinct peaks.
func TestPeakCountsGiveDuckDBsPercentiles(t *testing.T) {
	ctx := context.Background()
	db := tempStore(t).DB()
	_, err := db.ExecContext(ctx, `CREATE TEMP TABLE keys (set_id BIGINT, peak BIGINT, calls BIGINT)`)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	const sets = 300
	for i := range sets {
		n := 1 + rng.IntN(3000)
		if i%3 == 0 {
			n = 1 + rng.IntN(12)
		}
		spread := 1 + rng.IntN(200)
		_, err := db.ExecContext(ctx, `INSERT INTO keys SELECT ?, 1 + (hash(range, ?) % ?)::BIGINT, 1 + range % 7 FROM range(?)`, i, i, spread, n)
		require.NoError(t, err)
	}
	for i := range sets {
		want := &peakStats{Tool: "t"}
		require.NoError(t, db.QueryRowContext(ctx, `SELECT quantile_disc(peak, 0.5), quantile_disc(peak, 0.9), quantile_disc(peak, 0.99), max(peak), count(*), sum(calls)
			FROM keys WHERE set_id = ?`, i).Scan(&want.P50, &want.P90, &want.P99, &want.Max, &want.Scopes, &want.Calls))
		rows, err := db.QueryContext(ctx, `SELECT 7::UBIGINT, peak, count(*), sum(calls) FROM keys WHERE set_id = ? GROUP BY peak`, i)
		require.NoError(t, err)
		got, err := scanPeakCounts(rows, map[uint64]string{7: "t"})
		require.NoError(t, err)
		require.Equal(t, want, got["t"], "set %d", i)
	}
}

// TestDayRangesJoinConsecutiveDays: the counted days as ranges of
// consecutive days, in order, whatever order and repeats they come in;
// none for none.
func TestDayRangesJoinConsecutiveDays(t *testing.T) {
	assert.Empty(t, dayRanges(nil))
	assert.Equal(t, [][2]int64{{5, 5}}, dayRanges([]int64{5}))
	assert.Equal(t, [][2]int64{{1, 3}, {5, 6}, {9, 9}}, dayRanges([]int64{9, 2, 1, 5, 3, 6, 2}))
	assert.Equal(t, "(day BETWEEN $dlo0 AND $dhi0 OR day BETWEEN $dlo1 AND $dhi1)", listedDays([]int64{1, 2, 4}))
	assert.Equal(t, "false", listedDays(nil))
	assert.Len(t, withDays([]any{1}, []int64{1, 2, 4}), 5, "the scope's argument and two bounds per range")
}
