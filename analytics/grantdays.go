package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// grant_days holds, per server, grant (empty for calls without one) and
// UTC day, what a recommendation's window figures count: the day's calls,
// those the gateway allowed, the calls per session source, the hashes of
// the session keys of its calls with one (DuckDB's hash of SessionKey, as
// the figures count them), those of the sessions with an allowed call, and
// its agents. It is counted with session_peaks, in the same transaction,
// and listed with it in counted_days, so that the write paths that
// take a day off that list (a late call, an archived day deleted, a
// restore) do so for both. A window's figures then read a row per grant
// and day and the hashes in it for its listed days, where grouping every
// call of the window by grant, session, agent and day took ~0.5 s at 5M
// calls.
const grantDaysSchema = `
CREATE TABLE grant_days (
	server           VARCHAR NOT NULL,
	"grant"          VARCHAR NOT NULL,
	day              BIGINT NOT NULL,
	calls            BIGINT NOT NULL,
	allowed          BIGINT NOT NULL,
	event            BIGINT NOT NULL,
	conversation     BIGINT NOT NULL,
	trace            BIGINT NOT NULL,
	derived          BIGINT NOT NULL,
	gateway          BIGINT NOT NULL,
	sessions         UBIGINT[] NOT NULL,
	allowed_sessions UBIGINT[] NOT NULL,
	agents           VARCHAR[] NOT NULL
);`

// grantDaysSQL counts the calls that where selects into grant_days' rows,
// in its column order.
func grantDaysSQL(where string) string {
	return `
SELECT server, coalesce("grant", ''), epoch_ms(ts) // 86400000, count(*),
       count(*) FILTER (decision = 'allowed'),
       count(*) FILTER (session_source = 'event'), count(*) FILTER (session_source = 'conversation'),
       count(*) FILTER (session_source = 'trace'), count(*) FILTER (session_source = 'derived'),
       count(*) FILTER (session_source = 'gateway'),
       coalesce(list(DISTINCT hash(` + SessionKey + `)) FILTER (` + SessionKey + ` <> ''), []::UBIGINT[]),
       coalesce(list(DISTINCT hash(` + SessionKey + `)) FILTER (` + SessionKey + ` <> '' AND decision = 'allowed'), []::UBIGINT[]),
       coalesce(list(DISTINCT agent) FILTER (agent IS NOT NULL), []::VARCHAR[])
FROM calls WHERE ` + where + `
GROUP BY ALL`
}

// countGrantDays counts day's calls into grant_days, replacing the rows
// an earlier count left, on conn inside the caller's transaction.
func countGrantDays(ctx context.Context, conn *sql.Conn, day int64) error {
	if err := recountDay(ctx, conn, "grant_days", grantDaysSQL, day); err != nil {
		return fmt.Errorf("grant days: %w", err)
	}
	return nil
}

// countListedGrantDays is migration 12's: the days session_peaks_days
// lists already are counted into grant_days from their calls, in one pass
// (the list's name until migration 13).
func countListedGrantDays(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, `INSERT INTO grant_days `+grantDaysSQL(
		`epoch_ms(ts) // 86400000 IN (SELECT day FROM session_peaks_days)`))
	return err
}

// FigureDays are the days wholly inside the window (from, to] whose
// grant_days rows count all their calls, in order: PeakDays' days, the
// first one only when no call of the scope at all (of a tool or not) is
// at from.
func FigureDays(ctx context.Context, q querier, server, grant string, from, to time.Time) ([]int64, error) {
	return sealedDays(ctx, q, server, grant, from, to, `true`)
}
