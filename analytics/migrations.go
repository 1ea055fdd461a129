package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migration is one versioned schema step. Steps are append-only: never edit a
// released one, add a new version instead.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations creates and evolves the schema. The calls table is public (SPEC §3):
// its column names are the v1 event names plus ingested_at.
var migrations = []migration{
	{1, "initial schema", `
CREATE TABLE calls (
	id             VARCHAR NOT NULL,
	ts             TIMESTAMPTZ NOT NULL,
	server         VARCHAR NOT NULL,
	tool           VARCHAR,
	method         VARCHAR NOT NULL,
	decision       VARCHAR NOT NULL,
	status         VARCHAR,
	gateway        VARCHAR,
	"grant"        VARCHAR,
	agent          VARCHAR,
	session        VARCHAR,
	request_id     VARCHAR,
	rule           VARCHAR,
	reason         VARCHAR,
	error_code     BIGINT,
	latency_ms     DOUBLE,
	args_hash      VARCHAR,
	arg_keys       VARCHAR[],
	args           JSON,
	policy_version VARCHAR,
	attrs          MAP(VARCHAR, VARCHAR),
	ingested_at    TIMESTAMPTZ NOT NULL
);
CREATE TABLE dead_letters (
	rejected_at TIMESTAMPTZ NOT NULL,
	source VARCHAR NOT NULL,
	line   BIGINT,
	seq    UBIGINT,
	format VARCHAR,
	reason VARCHAR NOT NULL,
	detail VARCHAR,
	raw    BLOB
);
CREATE TABLE checkpoints (
	consumer   VARCHAR PRIMARY KEY,
	seq        UBIGINT NOT NULL,
	updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE catalog_imports (
	server      VARCHAR NOT NULL,
	imported_at TIMESTAMPTZ NOT NULL,
	source      VARCHAR,
	tools       INTEGER NOT NULL
);
CREATE TABLE tools (
	server        VARCHAR NOT NULL,
	tool          VARCHAR NOT NULL,
	description   VARCHAR,
	annotations   JSON,
	input_schema  JSON,
	category      VARCHAR NOT NULL,
	severity      VARCHAR NOT NULL,
	risk_source   VARCHAR NOT NULL,
	why           VARCHAR,
	first_seen    TIMESTAMPTZ NOT NULL,
	last_seen     TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (server, tool)
);
CREATE TABLE policies (
	server      VARCHAR NOT NULL,
	"grant"     VARCHAR NOT NULL DEFAULT '',
	imported_at TIMESTAMPTZ NOT NULL,
	source      VARCHAR,
	document    JSON NOT NULL
);
CREATE TABLE suppressions (
	finding_id VARCHAR PRIMARY KEY,
	reason     VARCHAR NOT NULL,
	owner      VARCHAR,
	until      TIMESTAMPTZ NOT NULL,
	created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE suppression_log (
	changed_at TIMESTAMPTZ NOT NULL,
	finding_id VARCHAR NOT NULL,
	action     VARCHAR NOT NULL,
	reason     VARCHAR,
	owner      VARCHAR,
	until      TIMESTAMPTZ
);
`},
	{2, "session sources and derived sessions", `
ALTER TABLE calls ADD COLUMN session_source VARCHAR;
` + backfillSessionSource + `;
CREATE TABLE derived_sessions (
	server  VARCHAR NOT NULL,
	agent   VARCHAR NOT NULL,
	"grant" VARCHAR NOT NULL,
	gateway VARCHAR NOT NULL,
	session VARCHAR NOT NULL,
	last_ts TIMESTAMPTZ NOT NULL,
	PRIMARY KEY (server, agent, "grant", gateway)
);
`},
	{3, "finding history", `
CREATE TABLE recommend_runs (
	run_id      BIGINT PRIMARY KEY,
	server      VARCHAR NOT NULL,
	"grant"     VARCHAR NOT NULL,
	"at"        TIMESTAMPTZ NOT NULL,
	window_from TIMESTAMPTZ NOT NULL,
	window_to   TIMESTAMPTZ NOT NULL,
	source      VARCHAR NOT NULL
);
CREATE TABLE findings (
	finding_id  VARCHAR NOT NULL,
	server      VARCHAR NOT NULL,
	"grant"     VARCHAR NOT NULL,
	kind        VARCHAR NOT NULL,
	tool        VARCHAR,
	first_seen  TIMESTAMPTZ NOT NULL,
	last_seen   TIMESTAMPTZ NOT NULL,
	state       VARCHAR NOT NULL,
	severity    VARCHAR NOT NULL,
	summary     VARCHAR,
	action      VARCHAR,
	last_run_id BIGINT NOT NULL,
	changed_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE finding_log (
	"at"       TIMESTAMPTZ NOT NULL,
	finding_id VARCHAR NOT NULL,
	from_state VARCHAR,
	to_state   VARCHAR NOT NULL,
	run_id     BIGINT NOT NULL
);
`},
	{4, "live alerts", `
CREATE TABLE alerts (
	id         VARCHAR PRIMARY KEY,
	kind       VARCHAR NOT NULL,
	server     VARCHAR NOT NULL,
	session    VARCHAR NOT NULL,
	tool       VARCHAR NOT NULL,
	args_hash  VARCHAR,
	first_ts   TIMESTAMPTZ NOT NULL,
	polls      BIGINT NOT NULL,
	threshold  BIGINT NOT NULL,
	sent_at    TIMESTAMPTZ NOT NULL,
	ended_at   TIMESTAMPTZ
);
`},
	{5, "parquet archive", `
CREATE TABLE archive_days (
	server      VARCHAR NOT NULL,
	"date"      DATE NOT NULL,
	file        VARCHAR NOT NULL,
	"rows"      BIGINT NOT NULL,
	checksum    VARCHAR NOT NULL,
	archived_at TIMESTAMPTZ NOT NULL,
	verified_at TIMESTAMPTZ,
	deleted_at  TIMESTAMPTZ,
	PRIMARY KEY (server, "date", file)
);
`},
	{6, "tool days", `
CREATE TABLE tool_days (
	server        VARCHAR NOT NULL,
	"grant"       VARCHAR NOT NULL,
	tool          VARCHAR NOT NULL,
	day           BIGINT NOT NULL,
	first_call    TIMESTAMPTZ NOT NULL,
	first_allowed TIMESTAMPTZ,
	last_allowed  TIMESTAMPTZ,
	last_refused  TIMESTAMPTZ,
	PRIMARY KEY (server, "grant", tool, day)
);
` + toolDaysSQL("true") + `;
`},
}

// backfillSessionSource gives the rows stored before session sources a
// source from what they carry.
const backfillSessionSource = `UPDATE calls SET session_source = CASE WHEN session IS NOT NULL THEN 'event' WHEN gateway IS NOT NULL THEN 'gateway' END`

// SchemaVersion is the newest schema this build knows.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrate applies every migration newer than the database's version, each in
// its own transaction together with its bookkeeping row.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > SchemaVersion() {
		return fmt.Errorf("database schema version %d is newer than this build knows (%d): upgrade mcptrail", current, SchemaVersion())
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: %w", m.version, err)
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, ?)`, m.version, m.name, time.Now().UTC()); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("migration %d: record: %w", m.version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: commit: %w", m.version, err)
		}
	}
	return nil
}
