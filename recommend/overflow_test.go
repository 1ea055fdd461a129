package recommend_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// The SQL fast path counts a plain bucket's calls past its limit (every
// call allowed, of one agent and one session) without numbering them, and
// numbers only the plain buckets that may hold the earliest affected calls,
// those a runaway loop overlaps and every other bucket: each kind of
// bucket, with few or many earliest calls listed and with or without a
// loop, decides as the evaluator does.
func TestReplayOverflowOfPlainBucketsMatchesEvaluator(t *testing.T) {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "o.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var evs []audit.Event
	day := func(d int) time.Time { return time.Date(2026, 11, 25+d, 1, 0, 0, 0, time.UTC) }
	var at time.Time
	// add stores n calls of poll from the clock on, a minute apart, the
	// decisions in turn.
	add := func(session, gateway string, agents []string, n int, ds ...audit.Decision) {
		for i := range n {
			evs = append(evs, audit.Event{ID: fmt.Sprintf("o%03d", len(evs)), TS: at, Server: "srv", Tool: "poll",
				Method: "tools/call", Decision: ds[i%len(ds)], Grant: "g", Agent: agents[i%len(agents)], Session: session, Gateway: gateway})
			at = at.Add(time.Minute)
		}
	}
	a1 := []string{"a1"}
	ok := audit.Allowed
	// A plain bucket that starts first and holds its calls past the limit
	// last, after two that hold the earliest ones, one and two.
	at = day(0).Add(30 * time.Minute)
	add("s10", "gw", a1, 1, ok)
	at = day(0).Add(21 * time.Hour)
	add("s10", "gw", a1, 11, ok)
	at = day(0).Add(time.Hour)
	add("s11", "gw", a1, 4, ok)
	add("s12", "gw", a1, 5, ok)
	at = day(1)
	add("s1", "gw", a1, 6, ok)                        // plain, 3 past a limit of 3 a day
	add("s2", "gw", a1, 6, ok, ok, audit.RateLimited) // refused calls among them
	add("s9", "gw", a1, 2, ok)                        // under the limit
	at = day(2)
	add("s3", "gw", []string{"a1", "a2"}, 6, ok) // two agents
	add("s4", "gw", a1, 8, ok)                   // plain
	at = day(3)
	add("s5", "gw", a1, 5, ok)
	add("s6", "gw", a1, 5, ok)
	loopFrom := at.Add(2 * time.Minute)
	add("s7", "gw", a1, 5, ok) // plain, its last three calls in a runaway loop
	loopTo := at.Add(-time.Minute)
	// No session and no agent (with an agent the store derives a session,
	// SPEC §3): the grant's key, and two gateways' session keys.
	add("", "gw1", []string{""}, 3, ok)
	add("", "gw2", []string{""}, 3, ok)
	add("s8", "gw", []string{""}, 5, ok) // no agent
	at = day(4)
	add("s1", "gw", a1, 5, ok) // a session's next day
	_, err = store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)

	// A loop names its session by the hash of its key, as text.
	var s7 uint64
	require.NoError(t, store.DB().QueryRow(`SELECT hash('s7')`).Scan(&s7))
	loops := []recommend.RunawayLoop{{Tool: "poll", Session: strconv.FormatUint(s7, 10), SessionHash: s7, First: loopFrom, Last: loopTo, Polls: 3}}
	for _, scope := range []string{policy.ScopeSession, policy.ScopeGrant, policy.ScopeAgent} {
		for _, window := range []string{policy.WindowDay, policy.WindowHour} {
			p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
				"poll": {Limits: []policy.Limit{{Counter: "poll", Window: window, Max: 3, Scope: scope}}},
			}}
			require.NoError(t, p.Validate())
			for _, firstN := range []int{1, 2, 20} {
				for _, withLoops := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/first %d/loops %v", scope, window, firstN, withLoops), func(t *testing.T) {
						opts := recommend.ReplayOptions{Server: "srv", From: day(0), To: day(5), Policy: p, FirstN: firstN}
						if withLoops {
							opts.Loops = loops
						}
						fast, _ := fastAndExact(t, store, opts)
						require.Positive(t, fast.RateLimited)
					})
				}
			}
		}
	}
}
