package recommend

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/policy"
)

// TestCallMinutesMatchTheCalls: the peaks per session and minute read from
// the call minutes equal those counted from the calls, and a replay whose
// per-session, per-minute limits take their buckets from the minutes (the
// others' from the calls) gives the replay counted from the calls alone,
// for the server and for one grant, with limits of one call a minute (the
// buckets of two calls the table keeps), of other scopes and of an hour;
// minutes of another window are not used.
func TestCallMinutesMatchTheCalls(t *testing.T) {
	ctx := context.Background()
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	db := trafficStore(t, 4, 8000, 3*24*time.Hour, end, func(i int, e *audit.Event) {
		if i%9 == 0 {
			e.Session, e.Gateway = "", "" // counted under the grant
		}
	}).DB()
	var grant string
	require.NoError(t, db.QueryRow(`SELECT "grant" FROM calls WHERE "grant" IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC LIMIT 1`).Scan(&grant))

	variants := []policy.Limit{
		{Window: policy.WindowMinute, Max: 1, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 1, Scope: policy.ScopeAgent},
		{Window: policy.WindowHour, Max: 3, Scope: policy.ScopeSession},
		{Window: policy.WindowMinute, Max: 2, Scope: policy.ScopeGrant},
		{Window: policy.WindowMinute, Max: 3, Scope: policy.ScopeSession},
	}
	for _, g := range []string{"", grant} {
		t.Run("grant="+g, func(t *testing.T) {
			q := query{db: db, server: "proxmox-mcp", grant: g, from: end.Add(-3 * 24 * time.Hour), to: end}
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
			other := q
			other.from = other.from.Add(time.Minute)
			assert.False(t, m.covers(other), "another window")

			p := &policy.Policy{Version: "1", Default: policy.DefaultAllow, Tools: map[string]*policy.ToolRule{}}
			for i, l := range variants {
				l.Counter = fmt.Sprintf("limit_%d", i)
				p.Tools[tools[i]] = &policy.ToolRule{Limits: []policy.Limit{l}}
			}
			require.NoError(t, p.Validate())
			o := ReplayOptions{Server: q.server, Grant: q.grant, From: q.from, To: q.to, Policy: p}
			plain, err := Run(ctx, db, o)
			require.NoError(t, err)
			o.minutes = m
			withMinutes, err := Run(ctx, db, o)
			require.NoError(t, err)
			assert.Positive(t, plain.RateLimited, "the limits bite")
			assert.Equal(t, plain, withMinutes)
			var fromTable int
			require.NoError(t, m.conn.QueryRowContext(ctx, `SELECT count(*) FROM overflow_buckets JOIN replay_limits ON b_lid = lid
				WHERE limit_scope = 'session' AND bucket_ms = 60000 AND b_lim = 1`).Scan(&fromTable))
			assert.Positive(t, fromTable, "buckets of two calls over a limit of one came from the minutes")
		})
	}
}
