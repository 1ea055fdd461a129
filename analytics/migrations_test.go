package analytics

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
