package recommend

import (
	"context"
	"database/sql"
	"fmt"
)

// callMinutes are a scope's calls in its window counted per tool, session
// scope key and one-minute window, in a temporary table on one connection.
// Two steps of a recommendation group the same calls the same way: the
// rate-limit peaks per session and minute (detectRateLimits) and the
// replay's buckets over a per-session, per-minute limit (overflow).
// Grouping a window's calls into their buckets is the costly part of each
// (millions of groups); counted once here, the replay reads the table.
type callMinutes struct {
	conn  *sql.Conn
	scope query // the scope and window the table counts
	built bool
}

// openCallMinutes holds a connection for q's scope's call minutes; close
// releases it.
func openCallMinutes(ctx context.Context, q query) (*callMinutes, error) {
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("call minutes: %w", err)
	}
	return &callMinutes{conn: conn, scope: q}, nil
}

func (m *callMinutes) close() {
	if m.built {
		_, _ = m.conn.ExecContext(context.Background(), `DROP TABLE IF EXISTS call_minutes`)
	}
	_ = m.conn.Close()
}

// covers says whether the table counts q's scope and window.
func (m *callMinutes) covers(q query) bool {
	return m != nil && m.built && m.scope.server == q.server && m.scope.grant == q.grant &&
		m.scope.from.Equal(q.from) && m.scope.to.Equal(q.to)
}

// sessionPeaks is query.peaks for the session scope and the minute window:
// it counts every tool's calls per session key and minute into the table
// (n: the calls peaks measure, allowed or rate-limited; n_all: every call,
// what a limit counts), reads the peaks of tools from it, then keeps the
// buckets of two calls or more: the only ones a limit of at least one call
// can overflow.
func (m *callMinutes) sessionPeaks(ctx context.Context, names map[uint64]string, tools []string) (map[string]*peakStats, error) {
	q := m.scope
	done := q.timed("peaks session minute")
	if _, err := m.conn.ExecContext(ctx, `
CREATE OR REPLACE TEMP TABLE call_minutes AS
SELECT hash(tool) AS th, `+sessionScopeKey+` AS k, epoch_ms(ts) // 60000 AS w,
       count(*) FILTER (decision IN ('allowed', 'rate_limited')) AS n, count(*) AS n_all
FROM calls WHERE `+inWindow+` AND tool IS NOT NULL
GROUP BY ALL`, q.args()...); err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	m.built = true
	rows, err := m.conn.QueryContext(ctx, `
WITH pk AS (
	SELECT th, k, max(n) AS peak, sum(n) AS calls FROM call_minutes
	WHERE n > 0 AND th IN (SELECT hash(unnest($tools::VARCHAR[])))
	GROUP BY ALL
)
SELECT th, quantile_disc(peak, 0.5), quantile_disc(peak, 0.9), quantile_disc(peak, 0.99), max(peak), count(*), sum(calls)
FROM pk GROUP BY th`, sql.Named("tools", stringList(tools)))
	if err != nil {
		return nil, fmt.Errorf("peaks: %w", err)
	}
	out, err := scanPeaks(rows, names)
	if err != nil {
		return nil, err
	}
	done()
	if _, err := m.conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE call_minutes AS
SELECT th, k, w, n_all FROM call_minutes WHERE n_all >= 2`); err != nil {
		return nil, fmt.Errorf("call minutes: %w", err)
	}
	return out, nil
}

// overflowBucketsFromMinutesSQL fills overflow_buckets (see query.overflow): the
// buckets of every limit per session and minute of at least one call from
// the table, the others' from the calls.
const overflowBucketsFromMinutesSQL = `
CREATE OR REPLACE TEMP TABLE overflow_buckets AS
SELECT lid AS b_lid, k AS b_k, w AS b_w, lim AS b_lim
FROM call_minutes JOIN replay_limits ON th = hash(limit_tool)
WHERE ` + fromMinutes + ` AND n_all > lim
UNION ALL
SELECT lid, ` + limitKeyExpr + `, epoch_ms(ts) // bucket_ms, any_value(lim)
FROM calls JOIN replay_limits ON tool = limit_tool
WHERE ` + inWindow + ` AND NOT (` + fromMinutes + `)
GROUP BY ALL HAVING count(*) > any_value(lim)`

// fromMinutes are the limits whose buckets call_minutes holds.
const fromMinutes = `limit_scope = 'session' AND bucket_ms = 60000 AND lim >= 1`
