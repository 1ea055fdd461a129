package report

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// TestLimitPeaksMatchTheirDefinitions: each limit's figures against its
// peaks equal those its definitions give, counted plainly per tool over the
// two weeks of the proxmox scenario (thousands of sessions): the scope
// values with a call, those whose busiest window is over the limit, the
// peaks' median and 99th percentile as quantile_disc takes them, the
// busiest window, the windows with a call and those over the limit, the
// calls beyond it, and how many values peaked at each count; for every
// scope and window, with limits under and over the peaks, for the server
// and for one grant.
func TestLimitPeaksMatchTheirDefinitions(t *testing.T) {
	ctx := context.Background()
	store := proxmoxStore(t)
	db := store.DB()
	var tools []string
	rows, err := db.QueryContext(ctx, `SELECT tool FROM calls WHERE tool IS NOT NULL GROUP BY tool ORDER BY count(*) DESC, tool LIMIT 6`)
	require.NoError(t, err)
	for rows.Next() {
		var tool string
		require.NoError(t, rows.Scan(&tool))
		tools = append(tools, tool)
	}
	require.NoError(t, rows.Err())
	require.Len(t, tools, 6)
	var grant string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT "grant" FROM calls WHERE "grant" IS NOT NULL GROUP BY ALL ORDER BY count(*) DESC LIMIT 1`).Scan(&grant))

	for _, g := range []string{"", grant} {
		q := querier{db: db, server: server, grant: g, from: fixedNow.Add(-2 * week), to: fixedNow}
		for _, scope := range []string{"session", "agent", "grant"} {
			for _, window := range []string{"minute", "hour", "day"} {
				t.Run(fmt.Sprintf("%s/%s/grant=%s", scope, window, g), func(t *testing.T) {
					var ls []LimitPeak
					for i, tool := range tools {
						ls = append(ls, LimitPeak{Tool: tool, Limit: Limit{Max: 1 + i*i*3, Window: window, Scope: scope}, Histogram: []PeakCount{}})
					}
					require.NoError(t, q.limitPeaks(ctx, ls))
					over := 0
					for _, l := range ls {
						want := plainLimitPeak(t, q, l)
						assert.Equal(t, want, l, l.Tool)
						over += int(l.ScopesOver)
					}
					assert.Positive(t, over, "some values over their limits")
				})
			}
		}
	}
}

// plainLimitPeak counts l's figures from q's calls of its tool, one
// definition at a time.
func plainLimitPeak(t *testing.T, q querier, l LimitPeak) LimitPeak {
	t.Helper()
	per := `SELECT ` + recommend.ScopeKeySQL(l.Limit.Scope) + ` AS k, epoch_ms(ts) // $bucket AS w, count(*) AS n
		FROM calls WHERE ` + q.calls() + ` AND tool = $tool AND decision IN ('allowed', 'rate_limited') GROUP BY ALL`
	pk := `SELECT k, max(n) AS peak FROM (` + per + `) GROUP BY k`
	args := q.args(sql.Named("bucket", policy.WindowLength(l.Limit.Window).Milliseconds()), sql.Named("tool", l.Tool), sql.Named("mx", l.Limit.Max))
	want := LimitPeak{Tool: l.Tool, Limit: l.Limit, Histogram: []PeakCount{}}
	var p50, p99, mx sql.NullFloat64
	require.NoError(t, q.db.QueryRow(`SELECT
		(SELECT count(*) FROM (`+pk+`)), (SELECT count(*) FROM (`+pk+`) WHERE peak > $mx),
		(SELECT quantile_disc(peak, 0.5) FROM (`+pk+`)), (SELECT quantile_disc(peak, 0.99) FROM (`+pk+`)),
		(SELECT max(peak) FROM (`+pk+`)),
		(SELECT count(*) FROM (`+per+`)), (SELECT count(*) FROM (`+per+`) WHERE n > $mx),
		(SELECT coalesce(sum(n - $mx), 0) FROM (`+per+`) WHERE n > $mx)`, args...).Scan(
		&want.Scopes, &want.ScopesOver, &p50, &p99, &mx, &want.Windows, &want.WindowsOver, &want.CallsOver))
	want.PeakP50, want.PeakP99, want.PeakMax = p50.Float64, p99.Float64, mx.Float64
	rows, err := q.db.Query(`SELECT peak, count(*) FROM (`+pk+`) GROUP BY peak ORDER BY peak`, args...)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var c PeakCount
		require.NoError(t, rows.Scan(&c.Peak, &c.Scopes))
		want.Histogram = append(want.Histogram, c)
	}
	require.NoError(t, rows.Err())
	return want
}
