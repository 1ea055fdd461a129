package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/audit"
)

// DefaultSessionGap is recommend.session_gap's default: the longest pause
// within a derived session, as web analytics sessionises page views.
const DefaultSessionGap = 30 * time.Minute

// A batch is stored in two statements. deriveSessions decides the derived
// sessions of the batch's new events that need one, into the temporary
// table batch_sessions, from their keys alone (batch_keys, which staging
// collects); insertCalls then stores the batch from its Arrow view, taking
// those sessions by id. One statement that read the view in a CTE for both
// had DuckDB copy the whole batch first (~90 MB for 122,880 rows), as it
// materialises a CTE read twice; and a filter over the view is no option:
// DuckDB pushes it into the Arrow scan, which then misreads the C stream's
// list columns (a crash in its list conversion).
//
// A call's session (SPEC §3) is the event's own; else its conversation id,
// as "conversation:<id>"; else its trace id, as "trace:<id>" (both from
// attrs, where decoders put them); else, for an event with an agent, a
// derived session: the run of calls of one agent under one grant through
// one gateway, split where calls pause for longer than gap. A run continues
// across batches and restarts through derived_sessions, which holds each
// key's current run and its last call (recordDerivedSessions); its id is
// "derived:" and the id of its first event. An event with none of these
// keeps no session, and the analyses let its gateway instance stand in.
// session_source records which it was.

// sessionKeys is what deriveSessions needs of an event that gets a derived
// session if it is new: its id, time and derived-session key.
type sessionKeys struct {
	id, server, agent, grant, gateway string
	ts                                time.Time
}

// needsDerivedSession tells whether an event gets a derived session if it
// is new (and then keysOf gives what deriving it takes).
func needsDerivedSession(e *audit.Event) bool {
	return e.Session == "" && e.Agent != "" && e.Attrs[audit.AttrConversationID] == "" && e.Attrs[audit.AttrTraceID] == ""
}

// keysOf copies e's keys: the batch's events are reused once staged.
func keysOf(e *audit.Event) sessionKeys {
	return sessionKeys{id: strings.Clone(e.ID), server: strings.Clone(e.Server), agent: strings.Clone(e.Agent),
		grant: strings.Clone(e.Grant), gateway: strings.Clone(e.Gateway), ts: e.TS}
}

// batchKeysTable is the temporary table the keys are appended to.
const batchKeysTable = `CREATE OR REPLACE TEMP TABLE batch_keys (
	id VARCHAR NOT NULL, ts TIMESTAMPTZ NOT NULL, server VARCHAR NOT NULL, agent VARCHAR NOT NULL, g VARCHAR NOT NULL, gw VARCHAR NOT NULL)`

// deriveSessionsSQL fills batch_sessions (id, session) for the events of
// batch_keys not stored among the calls between its two parameters (the
// batch's lowest and highest ts).
func deriveSessionsSQL(gap time.Duration) string {
	return `
CREATE OR REPLACE TEMP TABLE batch_sessions AS
WITH k AS (
	SELECT b.*, p.session AS prev_session, p.last_ts AS prev_ts
	FROM batch_keys b LEFT JOIN derived_sessions p ON p.server = b.server AND p.agent = b.agent AND p."grant" = b.g AND p.gateway = b.gw
	WHERE b.id NOT IN (SELECT id FROM calls WHERE ts BETWEEN ? AND ?)
), starts AS (
	SELECT *, coalesce(epoch_ms(ts) - epoch_ms(coalesce(lag(ts) OVER w, prev_ts)) > ` + strconv.FormatInt(gap.Milliseconds(), 10) + `, true) AS starts
	FROM k WINDOW w AS (PARTITION BY server, agent, g, gw ORDER BY ts, id)
), runs AS (
	SELECT *, sum(starts::INTEGER) OVER (PARTITION BY server, agent, g, gw ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS run
	FROM starts
)
SELECT id, CASE WHEN run = 0 THEN prev_session
                ELSE 'derived:' || first_value(id) OVER (PARTITION BY server, agent, g, gw, run ORDER BY ts, id) END AS session
FROM runs`
}

// deriveSessions appends keys to batch_keys and decides their sessions
// into batch_sessions, on conn inside the caller's transaction.
func deriveSessions(ctx context.Context, conn *sql.Conn, keys []sessionKeys, lo, hi time.Time, gap time.Duration) error {
	if _, err := conn.ExecContext(ctx, batchKeysTable); err != nil {
		return fmt.Errorf("append: batch keys: %w", err)
	}
	err := AppendRows(conn, "temp", "batch_keys", keys, func(k *sessionKeys) []driver.Value {
		return []driver.Value{k.id, k.ts, k.server, k.agent, k.grant, k.gateway}
	}, func(k *sessionKeys) string { return "event " + k.id })
	if err != nil {
		return fmt.Errorf("append: batch keys: %w", err)
	}
	if _, err := conn.ExecContext(ctx, deriveSessionsSQL(gap), lo, hi); err != nil {
		return fmt.Errorf("append: derive sessions: %w", err)
	}
	return nil
}

// dropBatchSessions drops deriveSessions' tables.
func dropBatchSessions(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `DROP TABLE batch_keys; DROP TABLE batch_sessions`); err != nil {
		return fmt.Errorf("append: drop batch sessions: %w", err)
	}
	return nil
}

// insertCalls stores the staged batch (the view staged) in calls, leaving
// out ids already stored between its two parameters (the batch's lowest and
// highest ts), with the sessions of batch_sessions when derived is set; its
// third parameter is ingested_at.
func insertCalls(staged string, derived bool, archived []string) string {
	from, session := staged+` s`, `NULL::VARCHAR`
	if derived {
		from, session = from+` LEFT JOIN batch_sessions d ON d.id = s.id`, `d.session`
	}
	stored := ``
	if len(archived) > 0 {
		stored = ` AND s.id NOT IN (SELECT id FROM ` + parquetScan(archived) + `)`
	}
	return `
INSERT INTO calls
WITH n AS (
	SELECT s.*, nullif(s.attrs['` + audit.AttrConversationID + `'], '') AS conv, nullif(s.attrs['` + audit.AttrTraceID + `'], '') AS trace, ` + session + ` AS derived
	FROM ` + from + `
	WHERE s.id NOT IN (SELECT id FROM calls WHERE ts BETWEEN ? AND ?)` + stored + `
)
SELECT id, ts, server, tool, method, decision, status, gateway, "grant", agent,
	coalesce(session, 'conversation:' || conv, 'trace:' || trace, derived),
	request_id, rule, reason, error_code, latency_ms, args_hash, arg_keys,
	args::JSON, policy_version, attrs, ?::TIMESTAMPTZ,
	CASE WHEN session IS NOT NULL THEN '` + audit.SessionFromEvent + `'
	     WHEN conv IS NOT NULL THEN '` + audit.SessionFromConversation + `'
	     WHEN trace IS NOT NULL THEN '` + audit.SessionFromTrace + `'
	     WHEN derived IS NOT NULL THEN '` + audit.SessionDerived + `'
	     WHEN gateway IS NOT NULL THEN '` + audit.SessionFromGateway + `' END
FROM n`
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
