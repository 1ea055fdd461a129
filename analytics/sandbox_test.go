package analytics

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/duckalloc"
)

// queryAll runs q through Store.Query and returns its rows.
func queryAll(t *testing.T, s *Store, q string) ([][]any, error) {
	t.Helper()
	var rows [][]any
	err := s.Query(context.Background(), q, nil, func([]Column) error { return nil },
		func(r []any) error { rows = append(rows, append([]any(nil), r...)); return nil })
	return rows, err
}

// No query reads or writes a file, lists a folder or reaches the network,
// in the writable store and in the read-only one the CLI opens.
func TestQueryCannotReachFilesOrNetwork(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.csv")
	require.NoError(t, os.WriteFile(secret, []byte("k,v\npassword,hunter2\n"), 0o600))
	path := filepath.Join(dir, "t.duckdb")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)

	reads := []string{
		`SELECT content FROM read_text('` + secret + `')`,
		`SELECT * FROM read_blob('` + secret + `')`,
		`SELECT * FROM read_csv('` + secret + `')`,
		`SELECT * FROM read_csv_auto('` + secret + `')`,
		`SELECT * FROM '` + secret + `'`,
		`SELECT * FROM read_json('` + secret + `')`,
		`SELECT * FROM read_parquet('` + secret + `')`,
		`SELECT * FROM parquet_metadata('` + secret + `')`,
		`SELECT * FROM sniff_csv('` + secret + `')`,
		`SELECT * FROM glob('` + dir + `/*')`,
		`SELECT * FROM read_duckdb('` + path + `')`,
		`SELECT * FROM read_csv('https://127.0.0.1:9/x.csv')`,
		`SELECT * FROM 'https://127.0.0.1:9/x.parquet'`,
		`SELECT * FROM read_parquet('s3://bucket/x.parquet')`,
	}
	check := func(t *testing.T, s *Store) {
		for _, q := range reads {
			t.Run(q, func(t *testing.T) {
				start := time.Now()
				rows, err := queryAll(t, s, q)
				require.Error(t, err, "got %v", rows)
				assert.NotContains(t, err.Error(), "hunter2")
				assert.Less(t, time.Since(start), 5*time.Second, "refused, not tried")
			})
		}
	}
	check(t, s)

	// Statements that would write are refused and leave nothing behind:
	// EXPORT created its folder before failing.
	for _, q := range []string{
		`EXPORT DATABASE '` + filepath.Join(dir, "export") + `'`,
		`COPY calls TO '` + filepath.Join(dir, "out.csv") + `'`,
		`COPY (SELECT 1) TO '` + filepath.Join(dir, "out.parquet") + `' (FORMAT parquet)`,
		`ATTACH '` + filepath.Join(dir, "other.duckdb") + `' AS other`,
		`INSTALL httpfs`,
	} {
		_, err := queryAll(t, s, q)
		assert.ErrorIs(t, err, ErrNotReadOnly, q)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"secret.csv", "t.duckdb", "t.duckdb.wal"}, names)

	// The sandbox holds for the store's own connections too: nothing can
	// switch it off again.
	for _, q := range []string{"SET enable_external_access = true", "SET autoinstall_known_extensions = true",
		"SET autoload_known_extensions = true", "SET lock_configuration = false", "SET allowed_configs = []"} {
		_, err := s.DB().ExecContext(ctx, q)
		require.Error(t, err, q)
		assert.Contains(t, err.Error(), "locked", q)
	}
	for setting, want := range map[string]string{"enable_external_access": "false", "autoinstall_known_extensions": "false",
		"autoload_known_extensions": "false", "lock_configuration": "true"} {
		var got string
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT current_setting('"+setting+"')::VARCHAR").Scan(&got))
		assert.Equal(t, want, got, setting)
	}
	require.NoError(t, s.Close())

	ro, err := Open(ctx, path, Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	check(t, ro)
	rows, err := queryAll(t, ro, `SELECT count(*) FROM calls`)
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int64(4)}}, rows)
}

// Every connection the pool opens works in UTC, also after the
// configuration is locked.
func TestConnectionsRunInUTC(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	var conns []interface{ Close() error }
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range 3 {
		c, err := s.DB().Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var tz string
		require.NoError(t, c.QueryRowContext(ctx, "SELECT current_setting('TimeZone')").Scan(&tz))
		assert.Equal(t, "UTC", tz)
	}
}

// Functions that act from inside a SELECT are refused however they are
// spelt, and do nothing: the WAL is still there, so no checkpoint ran.
func TestQueryRefusesFunctionsWithSideEffects(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.duckdb")
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Append(context.Background(), ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)
	wal, err := os.Stat(path + ".wal")
	require.NoError(t, err, "the append is in the WAL")

	for _, q := range []string{
		`SELECT * FROM checkpoint()`,
		`select * from CHECKPOINT()`,
		`SELECT * FROM "CheckPoint"()`,
		`SELECT * FROM main.checkpoint()`,
		`SELECT * FROM system.main.checkpoint()`,
		`SELECT * FROM "system"."main"."checkpoint"()`,
		`SELECT * FROM /* a */ checkpoint /* b */ ( /* c */ )`,
		"SELECT * FROM -- x\ncheckpoint()",
		`FROM force_checkpoint()`,
		`SELECT * FROM force_checkpoint('t')`,
		`SELECT (SELECT count(*) FROM checkpoint())`,
		`SELECT 1 WHERE EXISTS (FROM force_checkpoint())`,
		`WITH c AS (SELECT * FROM checkpoint()) SELECT 1`,
		`WITH c AS MATERIALIZED (SELECT * FROM checkpoint()) SELECT * FROM c`,
		`SELECT 1 UNION ALL SELECT count(*) FROM checkpoint()`,
		`SELECT * FROM calls, LATERAL (SELECT * FROM checkpoint())`,
		`DESCRIBE SELECT * FROM checkpoint()`,
		`SUMMARIZE SELECT * FROM checkpoint()`,
		`EXPLAIN ANALYZE SELECT * FROM checkpoint()`,
		"explain\tanalyze SELECT * FROM force_checkpoint()",
		`EXPLAIN SELECT * FROM checkpoint()`,
		`SELECT * FROM query('SELECT * FROM checkpoint()')`,
		`SELECT * FROM query_table('calls')`,
		`SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT * FROM checkpoint()'))`,
		`SELECT json_serialize_plan('SELECT * FROM query(''SELECT 1'')', optimize := true)`,
		`SELECT * FROM enable_logging()`,
		`SELECT * FROM enable_profiling()`,
		`SELECT * FROM enable_peg_parser()`,
		`SELECT * FROM truncate_duckdb_logs()`,
		`SELECT write_log('x')`,
		`SELECT tool.write_log() FROM calls`,
		`SELECT getenv('HOME')`,
		`SELECT * FROM duckdb_secrets()`,
		`SELECT * FROM which_secret('s3://x', 's3')`,
		`SELECT * FROM arrow_scan(0, 0, 0)`,
		`SELECT list_transform([1], x -> nextval('s'))`,
		`SELECT count(*) FILTER (WHERE nextval('s') > 0) FROM calls`,
	} {
		t.Run(q, func(t *testing.T) {
			_, err := queryAll(t, s, q)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotReadOnly)
			assert.Contains(t, err.Error(), "is not available in queries")
		})
	}
	after, err := os.Stat(path + ".wal")
	require.NoError(t, err, "no checkpoint ran")
	assert.Equal(t, wal.Size(), after.Size())
	var logging string
	require.NoError(t, s.DB().QueryRow(`SELECT count(*)::VARCHAR FROM duckdb_logs`).Scan(&logging))
	assert.Equal(t, "0", logging, "logging stayed off")
}

// What queries may do keeps working.
func TestQueryAllowsReading(t *testing.T) {
	s := openTemp(t)
	_, err := s.Append(context.Background(), ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)
	for _, q := range []string{
		`SELECT current_setting('memory_limit')`,
		`SELECT count(*) FROM duckdb_tables()`,
		`SELECT * FROM pragma_table_info('calls')`,
		`SHOW TABLES`,
		`DESCRIBE calls`,
		`SUMMARIZE calls`,
		`EXPLAIN SELECT count(*) FROM calls`,
		`EXPLAIN ANALYZE SELECT count(*) FROM calls`,
		`FROM calls LIMIT 1`,
		`SELECT 1;`,
		"SELECT 1 -- a comment",
		`SELECT 1 /* a comment */`,
		`PIVOT calls ON decision IN ('allowed', 'denied') USING count(*)`,
		`SELECT "checkpoint" FROM (SELECT 1 AS "checkpoint")`,
		`SELECT 'checkpoint()' AS text`,
	} {
		t.Run(q, func(t *testing.T) {
			rows, err := queryAll(t, s, q)
			require.NoError(t, err)
			assert.NotEmpty(t, rows)
		})
	}
}

// Every table function of the bundled DuckDB is either denied or reviewed
// as harmless here: a DuckDB upgrade that brings a new one fails this test
// until someone has decided.
func TestEveryTableFunctionIsReviewed(t *testing.T) {
	reviewed := strings.Fields(`
		check_peg_parser collations database_size duckdb_approx_database_count duckdb_columns
		duckdb_connection_count duckdb_constraints duckdb_coordinate_systems duckdb_databases
		duckdb_dependencies duckdb_extensions duckdb_external_file_cache duckdb_functions
		duckdb_indexes duckdb_keywords duckdb_log_contexts duckdb_logs duckdb_logs_parsed
		duckdb_memory duckdb_optimizers duckdb_prepared_statements duckdb_profiling_settings
		duckdb_schemas duckdb_secret_types duckdb_sequences duckdb_settings duckdb_table_sample
		duckdb_tables duckdb_temporary_files duckdb_types duckdb_variables duckdb_views
		extension_versions functions generate_series glob histogram histogram_values
		icu_calendar_names json_each json_tree parquet_bloom_probe parquet_file_metadata
		parquet_full_metadata parquet_kv_metadata parquet_metadata parquet_scan parquet_schema
		pg_timezone_names pragma_collations pragma_database_size pragma_metadata_info
		pragma_platform pragma_show pragma_storage_info pragma_table_info pragma_user_agent
		pragma_version range read_blob read_csv read_csv_auto read_duckdb read_json
		read_json_auto read_json_objects read_json_objects_auto read_ndjson read_ndjson_auto
		read_ndjson_objects read_parquet read_text repeat repeat_row seq_scan show_databases
		show_tables show_tables_expanded sniff_csv sql_auto_complete summary table_info
		test_all_types test_vector_types unnest user_agent`)
	s := openTemp(t)
	rows, err := s.DB().Query(`SELECT DISTINCT function_name FROM duckdb_functions()
		WHERE function_type IN ('table', 'table_macro') ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	known := map[string]bool{}
	for _, f := range reviewed {
		known[f] = true
	}
	var unreviewed []string
	for rows.Next() {
		var f string
		require.NoError(t, rows.Scan(&f))
		if _, denied := deniedFunctions[f]; !denied && !known[f] {
			unreviewed = append(unreviewed, f)
		}
	}
	require.NoError(t, rows.Err())
	sort.Strings(unreviewed)
	assert.Empty(t, unreviewed, "table functions nobody has classified: add each to deniedFunctions or to reviewed")
}

// Every store, whether it gives memory back or not, keeps DuckDB's freed
// pages for freedPagesDecay instead of DuckDB's 1 s.
func TestEveryStoreKeepsFreedPagesForTheDecay(t *testing.T) {
	if !duckalloc.Supported() {
		t.Skip("DuckDB is built without jemalloc here")
	}
	before, err := duckalloc.CurrentDecay()
	require.NoError(t, err)
	t.Cleanup(func() { _ = duckalloc.SetDecay(before) })
	short := duckalloc.Decay{Dirty: time.Second, Muzzy: time.Second}
	want := duckalloc.Decay{Dirty: freedPagesDecay, Muzzy: freedPagesDecay}
	dir := t.TempDir()
	for _, opts := range []Options{{}, {ReturnMemory: true}} {
		require.NoError(t, duckalloc.SetDecay(short))
		s, err := Open(context.Background(), filepath.Join(dir, fmt.Sprintf("%v.duckdb", opts.ReturnMemory)), opts)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		got, err := duckalloc.CurrentDecay()
		require.NoError(t, err)
		assert.Equal(t, want, got, "ReturnMemory %v", opts.ReturnMemory)
	}
}

// The stores that answer queries ask for huge pages under DuckDB's memory;
// a process whose only store gives memory back (ingest's, serve's), or was
// opened with NoHugePages (storage.huge_pages false), does not. A system
// that refuses the Go heap's advice (a seccomp profile's EPERM) still gets
// the store, with DuckDB's pages asked for. Each case runs in a process of
// its own (this test binary again, as
// TestOpenOneStoreAndCountHugePageArenas): the hooks stay for the process.
func TestQueryStoresAskForHugePagesAndReturningStoresDoNot(t *testing.T) {
	if !duckalloc.Supported() {
		t.Skip("DuckDB is built without jemalloc here")
	}
	for _, tc := range []struct {
		opts, want string
	}{{"", "hooked"}, {"return-memory", "none"}, {"no-huge-pages", "none"}, {"go-heap-advice-refused", "hooked"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenOneStoreAndCountHugePageArenas$", "-test.v")
		cmd.Env = append(os.Environ(), "MCPTRAIL_HUGE_PAGES_STORE="+filepath.Join(t.TempDir(), "s.duckdb"),
			"MCPTRAIL_HUGE_PAGES_OPTIONS="+tc.opts)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "huge-page arenas: "+tc.want+"\n", "options %q", tc.opts)
	}
}

func TestOpenOneStoreAndCountHugePageArenas(t *testing.T) {
	path := os.Getenv("MCPTRAIL_HUGE_PAGES_STORE")
	if path == "" {
		t.Skip("run by TestQueryStoresAskForHugePagesAndReturningStoresDoNot")
	}
	opts := os.Getenv("MCPTRAIL_HUGE_PAGES_OPTIONS")
	if opts == "go-heap-advice-refused" {
		adviseGoHeap = func(int) error { return fmt.Errorf("advise the Go heap for huge pages: %w", syscall.EPERM) }
	}
	s, err := Open(context.Background(), path, Options{ReturnMemory: opts == "return-memory", NoHugePages: opts == "no-huge-pages"})
	require.NoError(t, err)
	defer s.Close()
	n, err := duckalloc.HugePagesArenas()
	require.NoError(t, err)
	said := "none"
	if n > 0 {
		said = "hooked"
	}
	fmt.Printf("huge-page arenas: %s\n", said)
}
