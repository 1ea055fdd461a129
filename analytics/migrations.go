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
	// build, when set, runs after sql in the same transaction, on the
	// connection that holds it: a step that fills new tables with Go-built
	// statements (or Arrow views, which live on a connection).
	build func(ctx context.Context, conn *sql.Conn) error
}

// migrations creates and evolves the schema. The calls table is public (SPEC §3):
// its column names are the v1 event names plus ingested_at.
//
// The calls' columns of few values declare dictionary compression and id
// FSST: what DuckDB picks for them anyway, but left to choose it weighs
// every method for every column of each row group it writes, which made
// storing a batch cost a third more per such column (1M calls, one column
// at a time: 140-184 ms of commit against 102-123 ms; id 324 against 173).
// Only databases created since have them (DuckDB cannot alter a column's
// compression); migration 2's session_source alike. From storage version
// v1.3.0 DuckDB refuses both methods, and a file created in StorageVersion
// declares DICT_FSST in their place (declaredCompression).
var migrations = []migration{
	{1, "initial schema", `
CREATE TABLE calls (
	id             VARCHAR NOT NULL USING COMPRESSION fsst,
	ts             TIMESTAMPTZ NOT NULL,
	server         VARCHAR NOT NULL USING COMPRESSION dictionary,
	tool           VARCHAR USING COMPRESSION dictionary,
	method         VARCHAR NOT NULL USING COMPRESSION dictionary,
	decision       VARCHAR NOT NULL USING COMPRESSION dictionary,
	status         VARCHAR USING COMPRESSION dictionary,
	gateway        VARCHAR USING COMPRESSION dictionary,
	"grant"        VARCHAR USING COMPRESSION dictionary,
	agent          VARCHAR USING COMPRESSION dictionary,
	session        VARCHAR,
	request_id     VARCHAR,
	rule           VARCHAR,
	reason         VARCHAR,
	error_code     BIGINT,
	latency_ms     DOUBLE,
	args_hash      VARCHAR,
	arg_keys       VARCHAR[],
	args           JSON,
	policy_version VARCHAR USING COMPRESSION dictionary,
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
`, nil},
	{2, "session sources and derived sessions", `
ALTER TABLE calls ADD COLUMN session_source VARCHAR USING COMPRESSION dictionary;
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
`, nil},
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
`, nil},
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
`, nil},
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
`, nil},
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
INSERT INTO tool_days
SELECT server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, min(ts),
       min(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision = 'allowed'), max(ts) FILTER (decision <> 'allowed')
FROM calls WHERE tool IS NOT NULL
GROUP BY ALL;
`, nil},
	{7, "call runs", runsSchema, func(ctx context.Context, conn *sql.Conn) error {
		return recordRuns(ctx, conn, nil, "true")
	}},
	{8, "calls clustered", `
CREATE TABLE calls_clustered (clustered_until TIMESTAMPTZ NOT NULL);
`, nil},
	{9, "runs of sessions by conversation and trace", rekeyedGatewaysSQL, rebuildRekeyedRuns},
	{10, "tool day use", toolDayUseSchema, func(ctx context.Context, conn *sql.Conn) error {
		return recordToolDayUse(ctx, conn, "true")
	}},
	// Counted by Recluster, day by day, as days are sealed.
	{11, "session peaks", sessionPeaksSchema, nil},
	// Counted with session_peaks from then on; the days it lists already
	// are counted here.
	{12, "grant days", grantDaysSchema, countListedGrantDays},
	{13, "counted days", countedDaysSchema, nil},
	// Empty: the next recluster sorts every epoch of session_peaks once.
	{14, "peaks clustered", peaksClusteredSchema, nil},
	// What a loosening widens, and what a suppression of one accepted
	// (JSON lists of recommend.WideningKinds; NULL: not a loosening, or a
	// suppression of the whole finding, as every earlier one).
	{15, "widening kinds", `
ALTER TABLE findings ADD COLUMN changes VARCHAR;
ALTER TABLE suppressions ADD COLUMN covers VARCHAR;
`, nil},
	{16, "session peaks by counted sessions", "", recountUncountedSessions},
	// tool_days' times kept in tool_day_use's rows, the table's rows
	// until then in tool_days_before, tool_days a view of both (a
	// tool_day_use this build's migration 10 created has the columns).
	{17, "tool days in tool day use", `
ALTER TABLE tool_day_use ADD COLUMN IF NOT EXISTS first_call TIMESTAMPTZ;
ALTER TABLE tool_day_use ADD COLUMN IF NOT EXISTS first_allowed TIMESTAMPTZ;
ALTER TABLE tool_day_use ADD COLUMN IF NOT EXISTS last_refused TIMESTAMPTZ;
ALTER TABLE tool_days RENAME TO tool_days_before;
` + toolDaysViewSQL + `;
`, nil},
}

// recountUncountedSessions counts again the counted days of session_peaks
// with calls whose session the gateway does not count (a conversation,
// trace or derived one): before version 16 their rows kept those sessions
// apart, where the gateway counts such calls under their grant
// (CountedSession). A database without such calls has nothing to recount.
func recountUncountedSessions(ctx context.Context, conn *sql.Conn) error {
	days, err := QueryColumn[int64](ctx, conn, `
SELECT DISTINCT epoch_ms(ts) // 86400000 AS day FROM calls
WHERE tool IS NOT NULL AND session IS NOT NULL AND session_source IS DISTINCT FROM 'event'
  AND epoch_ms(ts) // 86400000 IN (SELECT day FROM counted_days)
ORDER BY day`)
	if err != nil {
		return fmt.Errorf("days with uncounted sessions: %w", err)
	}
	for _, day := range days {
		if err := countSessionPeaks(ctx, conn, day); err != nil {
			return fmt.Errorf("day %d: %w", day, err)
		}
	}
	return nil
}

// rekeyedGatewaysSQL lists the gateways of the calls whose session is
// their conversation's or trace's: before version 9, the runs' Go path
// (collectCalls) filed those calls under their gateway's session, so that
// their own sessions lack runs and their gateways' sessions hold runs of
// several conversations mixed.
const rekeyedGatewaysSQL = `
CREATE OR REPLACE TEMP TABLE rekeyed_gateways AS
SELECT DISTINCT server, coalesce("grant", '') AS g, gateway FROM calls
WHERE session_source IN ('conversation', 'trace') AND gateway IS NOT NULL AND tool IS NOT NULL;
`

// rekeyedSessions admits the calls of the sessions rebuildRekeyedRuns
// rebuilds: those by conversation or trace, and the gateways' sessions
// their calls were filed under.
const rekeyedSessions = `calls.session_source IN ('conversation', 'trace')
	OR (calls.session_source = 'gateway' AND hash(calls.server, coalesce(calls."grant", ''), calls.gateway)
		IN (SELECT hash(server, g, gateway) FROM rekeyed_gateways))`

// rebuildRekeyedRuns drops the runs and tails of the sessions
// rekeyedSessions admits and records them again from their calls; the
// runs of the other sessions stay as they are. A database without calls
// by conversation or trace has nothing to rebuild.
func rebuildRekeyedRuns(ctx context.Context, conn *sql.Conn) error {
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS rekeyed_gateways`) }()
	var n int64
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM calls WHERE session_source IN ('conversation', 'trace') LIMIT 1)`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if _, err := conn.ExecContext(ctx, `
CREATE OR REPLACE TEMP TABLE rekeyed_sessions AS
SELECT DISTINCT `+sessionHash+` AS pk, server, coalesce("grant", '') AS g, hash(`+SessionKey+`) AS skh
FROM calls WHERE tool IS NOT NULL AND (`+rekeyedSessions+`)
UNION
SELECT hash(server, g, 'gateway:' || gateway), server, g, hash('gateway:' || gateway) FROM rekeyed_gateways;
DELETE FROM call_runs USING rekeyed_sessions k WHERE call_runs.server = k.server AND call_runs."grant" = k.g AND call_runs.skh = k.skh;
DELETE FROM run_tails WHERE pk IN (SELECT pk FROM rekeyed_sessions);
DROP TABLE rekeyed_sessions;`); err != nil {
		return fmt.Errorf("drop the runs filed under gateways: %w", err)
	}
	return recordRunsOf(ctx, conn, nil, "true", rekeyedSessions)
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
	current, err := recordedVersion(ctx, db)
	if err != nil {
		return err
	}
	if current > SchemaVersion() {
		return fmt.Errorf("database schema version %d is newer than this build knows (%d): upgrade mcptrail", current, SchemaVersion())
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	storage, err := fileStorageVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		m.sql = declaredCompression(m.sql, storage)
		if err := applyMigration(ctx, conn, m); err != nil {
			return err
		}
	}
	return nil
}

// applyMigration runs m and records it in one transaction on conn.
func applyMigration(ctx context.Context, conn *sql.Conn, m migration) error {
	err := inTransaction(ctx, conn, func() error {
		if m.sql != "" {
			if _, err := conn.ExecContext(ctx, m.sql); err != nil {
				return err
			}
		}
		if m.build != nil {
			if err := m.build(ctx, conn); err != nil {
				return err
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, ?)`, m.version, m.name, time.Now().UTC()); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
	}
	return nil
}

// recordedVersion is the newest migration recorded in schema_migrations.
func recordedVersion(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// storedSchemaVersion is the newest migration recorded in db, 0 when it has
// no schema_migrations table (not a database mcptrail created).
func storedSchemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations' AND NOT temporary`).Scan(&tables); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if tables == 0 {
		return 0, nil
	}
	return recordedVersion(ctx, db)
}

// migrateBeforeReading brings a database of an older schema, just opened
// read-only as s, up to this build's: the readers (recommend, report,
// query) rely on the newest tables and columns, and a read-only open runs
// no migrations. Only when the schema is behind does it close s, open the
// file for writing to migrate it and open it read-only again; a file it
// cannot open for writing (another process holds it, no write permission)
// is refused with the reason, never read half-migrated. A file without
// schema_migrations is left as it is.
func migrateBeforeReading(ctx context.Context, s *Store, opts Options) (*Store, error) {
	v, err := storedSchemaVersion(ctx, s.db)
	if err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("open database %s: %w", s.path, err)
	}
	if v == 0 || v >= SchemaVersion() {
		return s, nil
	}
	if err := s.db.Close(); err != nil {
		return nil, fmt.Errorf("open database %s: %w", s.path, err)
	}
	w, err := Open(ctx, s.path, Options{MemoryLimit: opts.MemoryLimit, SessionGap: opts.SessionGap, ArchiveDir: opts.ArchiveDir})
	if err != nil {
		return nil, fmt.Errorf("database %s has schema version %d, older than this build's %d, and could not be opened for writing to migrate it: %w", s.path, v, SchemaVersion(), err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("migrate database %s: %w", s.path, err)
	}
	return openSandboxed(ctx, s.path, opts)
}
