package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
)

// A database last written by a build of an older schema is read by this
// one: opening it read-only migrates it first, so that the readers find the
// tables they rely on (tool_days from version 6, call_runs from 7) filled
// from its calls.
func TestReadOnlyOpenMigratesAnOlderSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.duckdb")
	const older = 5 // before tool_days
	all := migrations
	migrations = migrations[:older]
	s, err := Open(ctx, path, Options{})
	migrations = all
	require.NoError(t, err)
	ts := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO calls (id, ts, server, tool, method, decision, session, args_hash, ingested_at)
		VALUES ('a', $1, 'proxmox-mcp', 'get_vm_status', 'tools/call', 'allowed', 's1', 'h1', $1),
		       ('b', $1 + INTERVAL 5 SECOND, 'proxmox-mcp', 'get_task_status', 'tools/call', 'allowed', 's1', 'h2', $1),
		       ('c', $1 + INTERVAL 10 SECOND, 'proxmox-mcp', 'get_task_status', 'tools/call', 'allowed', 's1', 'h2', $1)`, ts)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	r, err := Open(ctx, path, Options{ReadOnly: true})
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, SchemaVersion(), count(t, r, `SELECT max(version) FROM schema_migrations`))
	assert.Equal(t, 1, count(t, r, `SELECT count(*) FROM tool_days WHERE tool = 'get_vm_status' AND last_allowed IS NOT NULL`))
	assert.Equal(t, 1, count(t, r, `SELECT count(*) FROM call_runs WHERE th = hash('get_task_status') AND prev_th = hash('get_vm_status') AND polls = 2`))
	assert.Equal(t, 1, count(t, r, `SELECT count(*) FROM run_tails WHERE pk = hash('proxmox-mcp', '', 's1') AND last_th = hash('get_task_status')`))
	_, err = r.DB().ExecContext(ctx, `INSERT INTO calls (id, ts, server, method, decision, ingested_at) VALUES ('b', now(), 's', 'm', 'allowed', now())`)
	assert.Error(t, err, "opened read-only again after migrating")
}

// A DuckDB file mcptrail did not create is opened read-only as it is:
// nothing is written into it.
func TestReadOnlyOpenLeavesAForeignFileAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "other.duckdb")
	s, err := openSandboxed(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.db.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`)
	require.NoError(t, err)
	require.NoError(t, s.db.Close())

	r, err := Open(ctx, path, Options{ReadOnly: true})
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, 0, count(t, r, `SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations'`))
}

// Before version 9 the runs' Go path filed the calls of sessions named by a
// conversation or trace id under their gateway's session. Migrating a
// database kept so rebuilds the runs of those sessions, and of the
// gateways' sessions they were mixed into: they become what the stored
// calls give.
func TestMigrationRebuildsRunsFiledUnderGateways(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.duckdb")
	evs, err := runtraffic.Generate(3, 4000, 12*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
	require.NoError(t, err)
	sessionsFromIDs(evs)
	// What the old path kept: the calls stored as by a gateway that sends
	// neither ids nor agents (the store derives no session), their sessions
	// and agents set afterwards.
	var ids, keys, agents []string
	for i := range evs {
		e := &evs[i]
		key := ""
		if id := e.Attrs[audit.AttrConversationID]; id != "" {
			key = "conversation:" + id
		} else if id := e.Attrs[audit.AttrTraceID]; id != "" {
			key = "trace:" + id
		}
		if key != "" {
			ids, keys, agents = append(ids, e.ID), append(keys, key), append(agents, e.Agent)
			e.Attrs, e.Agent = nil, ""
		}
	}
	require.NotEmpty(t, ids)
	s := openBefore(t, path, 8)
	_, err = s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	dropStandIn(t, s)
	_, err = s.DB().ExecContext(ctx, `UPDATE calls SET session = k.key, session_source = split_part(k.key, ':', 1), agent = k.agent
		FROM (SELECT unnest($1::VARCHAR[]) AS id, unnest($2::VARCHAR[]) AS key, unnest($3::VARCHAR[]) AS agent) k WHERE calls.id = k.id`,
		ids, keys, agents)
	require.NoError(t, err)
	oldRuns, _ := runsState(t, s)
	require.NoError(t, s.Close())

	m, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer m.Close()
	runs, tails, wantRuns, wantTails := rebuiltState(t, m)
	require.NotEqual(t, wantRuns, oldRuns, "the old runs were wrong")
	assert.Equal(t, wantRuns, runs, "runs after the migration")
	assert.Equal(t, wantTails, tails, "tails after the migration")
	assert.Positive(t, count(t, m, `SELECT count(*) FROM call_runs r JOIN calls c ON hash(c.session) = r.skh AND c.session_source = 'conversation'`),
		"runs of conversations")
}

// A migration whose build step fails leaves nothing behind: the error
// names it, its table and its rows are rolled back with its bookkeeping
// row, and the next open applies it whole once it can succeed. Builds run
// on the migration's own connection, inside its transaction (the Arrow
// views tool_day_use is written through live on a connection).
func TestFailedMigrationLeavesNothingBehind(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "calls.duckdb")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{
		{ID: "a", TS: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC), Server: "pve", Tool: "get_vm_status", Decision: audit.Allowed, Session: "s1"},
	}})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	all := migrations
	defer func() { migrations = all }()
	fail := true
	next := migration{SchemaVersion() + 1, "test step", `CREATE TABLE test_step (n BIGINT); INSERT INTO test_step VALUES (1);`,
		func(ctx context.Context, conn *sql.Conn) error {
			if err := recordToolDayUse(ctx, conn, "true"); err != nil { // an Arrow view on conn
				return err
			}
			if fail {
				return errors.New("the step failed")
			}
			return nil
		}}
	migrations = append(slices.Clone(all), next)
	_, err = Open(ctx, path, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("migration %d (test step): the step failed", next.version))

	migrations = all
	r, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	assert.Equal(t, SchemaVersion(), count(t, r, `SELECT max(version) FROM schema_migrations`))
	assert.Equal(t, 0, count(t, r, `SELECT count(*) FROM duckdb_tables() WHERE table_name = 'test_step'`))
	assert.Equal(t, 1, count(t, r, `SELECT count(*) FROM tool_day_use`), "the step's rows rolled back")
	require.NoError(t, r.Close())

	fail = false
	migrations = append(slices.Clone(all), next)
	w, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, next.version, count(t, w, `SELECT max(version) FROM schema_migrations`))
	assert.Equal(t, 1, count(t, w, `SELECT n FROM test_step`))
	assert.Equal(t, 2, count(t, w, `SELECT count(*) FROM tool_day_use`), "the step's rows, beside the batch's")
}

// Before version 16 session_peaks kept the calls of a conversation, trace
// or derived session apart, under that session; the gateway counts them
// under their grant (CountedSession). Migrating a database kept so counts
// its counted days again: its rows become those a fresh count gives.
func TestMigrationCountsSessionPeaksByCountedSessions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.duckdb")
	end := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	evs, err := runtraffic.Generate(3, 4000, 36*time.Hour, end, false)
	require.NoError(t, err)
	sessionsFromIDs(evs)
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	res, err := s.Recluster(ctx, end)
	require.NoError(t, err)
	require.Positive(t, res.CountedDays)
	require.Positive(t, count(t, s, `SELECT count(*) FROM calls WHERE session_source IN ('conversation', 'trace')`))
	const rows = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, session, peak, calls, peak_all, alone), '\n'
		ORDER BY server, "grant", tool, day, session NULLS FIRST) FROM session_peaks`
	var want, old, migrated string
	require.NoError(t, s.DB().QueryRow(rows).Scan(&want))
	// The rows as the older build counted them: by the stored session.
	_, err = s.DB().ExecContext(ctx, `DELETE FROM session_peaks;
INSERT INTO session_peaks
SELECT server, g, tool, w // 1440, s, max(n), sum(n), max(n_all), s IS NOT NULL FROM (
	SELECT server, coalesce("grant", '') AS g, tool, nullif(session, '') AS s, epoch_ms(ts) // 60000 AS w,
	       count(*) FILTER (decision IN ('allowed', 'rate_limited')) AS n, count(*) AS n_all
	FROM calls WHERE tool IS NOT NULL AND epoch_ms(ts) // 86400000 IN (SELECT day FROM counted_days) GROUP BY ALL
) GROUP BY ALL;
DELETE FROM schema_migrations WHERE version >= 16;`+toolDaysTable)
	require.NoError(t, err)
	require.NoError(t, s.DB().QueryRow(rows).Scan(&old))
	require.NotEqual(t, want, old, "the older rows differ")
	require.NoError(t, s.Close())

	m, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.DB().QueryRow(rows).Scan(&migrated))
	assert.Equal(t, want, migrated, "session_peaks after the migration")
	assert.Zero(t, count(t, m, `SELECT count(*) FROM session_peaks WHERE split_part(session, ':', 1) IN ('conversation', 'trace', 'derived')`))
}
