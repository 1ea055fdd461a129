package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// DefaultSessionGap is recommend.session_gap's default: the longest pause
// within a derived session, as web analytics sessionises page views.
const DefaultSessionGap = 30 * time.Minute

// insertCalls is the statement that stores a staged batch (the view or
// table staged) in calls, leaving out ids already stored between its two
// parameters (the batch's lowest and highest ts); its third parameter is
// ingested_at.
//
// It also decides each call's session (SPEC §3): the event's own; else its
// conversation id, as "conversation:<id>"; else its trace id, as
// "trace:<id>" (both from attrs, where decoders put them); else, for an
// event with an agent, a derived session: the run of calls of one agent
// under one grant through one gateway, split where calls pause for longer
// than gap. A run continues across batches and restarts through
// derived_sessions, which holds each key's current run and its last call
// (recordDerivedSessions); its id is "derived:" and the id of its first
// event. An event with none of these keeps no session, and the analyses
// let its gateway instance stand in. session_source records which it was.
func insertCalls(staged string, gap time.Duration) string {
	return `
INSERT INTO calls
WITH n AS (
	SELECT s.*, nullif(s.attrs['` + audit.AttrConversationID + `'], '') AS conv, nullif(s.attrs['` + audit.AttrTraceID + `'], '') AS trace
	FROM ` + staged + ` s WHERE s.id NOT IN (SELECT id FROM calls WHERE ts BETWEEN ? AND ?)
), k AS (
	SELECT n.id, n.ts, n.server, n.agent, coalesce(n."grant", '') AS g, coalesce(n.gateway, '') AS gw,
	       p.session AS prev_session, p.last_ts AS prev_ts
	FROM n LEFT JOIN derived_sessions p
	     ON p.server = n.server AND p.agent = n.agent AND p."grant" = coalesce(n."grant", '') AND p.gateway = coalesce(n.gateway, '')
	WHERE n.session IS NULL AND n.conv IS NULL AND n.trace IS NULL AND n.agent IS NOT NULL
), starts AS (
	SELECT *, coalesce(epoch_ms(ts) - epoch_ms(coalesce(lag(ts) OVER w, prev_ts)) > ` + strconv.FormatInt(gap.Milliseconds(), 10) + `, true) AS starts
	FROM k WINDOW w AS (PARTITION BY server, agent, g, gw ORDER BY ts, id)
), runs AS (
	SELECT *, sum(starts::INTEGER) OVER (PARTITION BY server, agent, g, gw ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS run
	FROM starts
), d AS (
	SELECT id, CASE WHEN run = 0 THEN prev_session
	                ELSE 'derived:' || first_value(id) OVER (PARTITION BY server, agent, g, gw, run ORDER BY ts, id) END AS session
	FROM runs
)
SELECT s.id, s.ts, s.server, s.tool, s.method, s.decision, s.status, s.gateway, s."grant", s.agent,
	coalesce(s.session, 'conversation:' || s.conv, 'trace:' || s.trace, d.session),
	s.request_id, s.rule, s.reason, s.error_code, s.latency_ms, s.args_hash, s.arg_keys,
	s.args::JSON, s.policy_version, s.attrs, ?::TIMESTAMPTZ,
	CASE WHEN s.session IS NOT NULL THEN '` + audit.SessionFromEvent + `'
	     WHEN s.conv IS NOT NULL THEN '` + audit.SessionFromConversation + `'
	     WHEN s.trace IS NOT NULL THEN '` + audit.SessionFromTrace + `'
	     WHEN d.session IS NOT NULL THEN '` + audit.SessionDerived + `'
	     WHEN s.gateway IS NOT NULL THEN '` + audit.SessionFromGateway + `' END
FROM n s LEFT JOIN d ON d.id = s.id`
}

// recordDerivedSessions moves each key's current run in derived_sessions
// to the newest derived call of the batch ingested at now. A batch of
// older events (a backfill) never moves a key's run back in time.
func recordDerivedSessions(ctx context.Context, conn *sql.Conn, now time.Time) error {
	_, err := conn.ExecContext(ctx, `
INSERT INTO derived_sessions
SELECT server, agent, coalesce("grant", ''), coalesce(gateway, ''), arg_max(session, ts), max(ts)
FROM calls WHERE ingested_at = ? AND session_source = 'derived'
GROUP BY ALL
ON CONFLICT DO UPDATE SET
	session = CASE WHEN excluded.last_ts >= derived_sessions.last_ts THEN excluded.session ELSE derived_sessions.session END,
	last_ts = greatest(excluded.last_ts, derived_sessions.last_ts)`, now)
	if err != nil {
		return fmt.Errorf("append: derived sessions: %w", err)
	}
	return nil
}
