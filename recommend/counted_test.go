package recommend_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// TestSessionLimitCountsCallsWithoutProtocolSessionUnderGrant: a gateway
// counts a limit per session by the protocol session it saw; the calls it
// saw without one (stored under a conversation, a trace or a derived
// session) share their grant's counter. The replay counts them so: with
// three calls a minute allowed per session, four protocol sessions of
// three calls each pass, and the twelve calls of four conversations and
// three of a derived session in the same minute, fifteen on the grant's
// counter, lose twelve. So before the sealed day is counted into
// session_peaks and after, on the SQL path and through the evaluator.
func TestSessionLimitCountsCallsWithoutProtocolSessionUnderGrant(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	minute := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var evs []audit.Event
	add := func(session, agent string, attrs map[string]string, n int) {
		for range n {
			evs = append(evs, audit.Event{ID: fmt.Sprintf("c%03d", len(evs)), TS: minute.Add(time.Duration(len(evs)) * time.Second),
				Server: "srv", Tool: "poll", Method: "tools/call", Decision: audit.Allowed, Grant: "g", Agent: agent,
				Session: session, Attrs: attrs})
		}
	}
	for i := range 4 {
		add(fmt.Sprintf("s%d", i), "a", nil, 3)
		add("", "a", map[string]string{audit.AttrConversationID: fmt.Sprintf("conv%d", i)}, 3)
	}
	add("", "b", nil, 3) // agent b's derived session
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	var sources string
	require.NoError(t, store.DB().QueryRow(`SELECT string_agg(DISTINCT session_source, ',' ORDER BY session_source) FROM calls`).Scan(&sources))
	require.Equal(t, "conversation,derived,event", sources)

	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
		"poll": {Limits: []policy.Limit{{Counter: "poll", Window: policy.WindowMinute, Max: 3, Scope: policy.ScopeSession}}},
	}}
	require.NoError(t, p.Validate())
	opts := recommend.ReplayOptions{Server: "srv", From: minute.Add(-24 * time.Hour), To: minute.Add(24 * time.Hour), Policy: p}
	check := func(t *testing.T) {
		fast, _ := fastAndExact(t, store, opts)
		assert.EqualValues(t, 12, fast.RateLimited, "the grant's counter refuses all but three of the fifteen calls without a protocol session")
		assert.EqualValues(t, len(evs)-12, fast.Allowed)
	}
	t.Run("from the calls", check)
	res, err := store.Recluster(ctx, minute.Add(48*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, res.CountedDays)
	var rows, grantRow int
	require.NoError(t, store.DB().QueryRow(`SELECT count(*), count(*) FILTER (session IS NULL AND peak = 15) FROM session_peaks`).Scan(&rows, &grantRow))
	assert.Equal(t, 5, rows, "a row per protocol session and one for the grant")
	assert.Equal(t, 1, grantRow, "the fifteen calls without a protocol session counted in the grant's row")
	t.Run("from session_peaks", check)
}

// A policy is attached to a grant, so each grant counts its own sessions
// and agents: a session (or agent) seen under two grants in one minute has
// a counter in each, in a replay over every grant as in the evaluator, on
// the SQL path before and after its day is counted into session_peaks
// (whose rows are per grant: merging them across grants lost the count).
func TestSessionAndAgentCountersArePerGrant(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	minute := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var evs []audit.Event
	add := func(tool, grant, session string) {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("c%03d", len(evs)), TS: minute.Add(time.Duration(len(evs)) * time.Second),
			Server: "srv", Tool: tool, Method: "tools/call", Decision: audit.Allowed, Grant: grant, Agent: "a", Session: session})
	}
	for _, tool := range []string{"by_session", "by_agent"} {
		add(tool, "g1", "s")
		add(tool, "g2", "s")
		add(tool, "g2", "s") // the second call of g2's counter: refused
	}
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	limit := func(scope string) *policy.ToolRule {
		return &policy.ToolRule{Limits: []policy.Limit{{Counter: scope, Window: policy.WindowMinute, Max: 1, Scope: scope}}}
	}
	p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{
		"by_session": limit(policy.ScopeSession), "by_agent": limit(policy.ScopeAgent)}}
	opts := recommend.ReplayOptions{Server: "srv", From: minute.Add(-24 * time.Hour), To: minute.Add(24 * time.Hour), Policy: p}
	check := func(t *testing.T) {
		fast, _ := fastAndExact(t, store, opts)
		for _, tool := range []string{"by_session", "by_agent"} {
			assert.EqualValues(t, 1, fast.ByTool[tool].RateLimited, tool)
		}
	}
	t.Run("from the calls", check)
	res, err := store.Recluster(ctx, minute.Add(48*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, res.CountedDays)
	t.Run("from session_peaks", check)
}
