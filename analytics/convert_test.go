package analytics

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// oldFormatStore makes a database in DuckDB's older default format (as
// every build before StorageVersion did), with calls, a dead letter, a
// checkpoint and the aggregates their batches keep.
func oldFormatStore(t *testing.T, path string) int {
	t.Helper()
	createEmptyIn(t, path, "v1.0.0")
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	evs := sampleEvents(3000, base)
	_, err = s.Append(context.Background(), ingest.Batch{Events: evs[:2000],
		DeadLetters: []ingest.DeadLetter{{At: base, Source: "mcp.audit.pve", Format: "auto", Raw: []byte("{"), Reason: "invalid_json", Detail: "unexpected end"}}})
	require.NoError(t, err)
	_, err = s.Append(context.Background(), ingest.Batch{Events: evs[2000:], Checkpoint: &ingest.Checkpoint{Consumer: "c", Seq: 42}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return len(evs)
}

// A database of the older format is copied whole into a new file of
// StorageVersion: every table's rows equal, the calls in their stored
// order, the declared compressions of the new format; the source is left
// as it was, and the copy takes further batches.
func TestConvertStorageCopiesEveryTableIntoTheNewFormat(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "old.duckdb"), filepath.Join(dir, "new.duckdb")
	n := oldFormatStore(t, src)
	before, err := os.ReadFile(src)
	require.NoError(t, err)

	res, err := ConvertStorage(ctx, src, dst)
	require.NoError(t, err)
	assert.Equal(t, "v1.0.0+", res.From)
	assert.Equal(t, StorageVersion+"+", res.To)
	assert.Equal(t, int64(n), res.Calls)
	if st, err := os.Stat(dst); assert.NoError(t, err) && runtime.GOOS != "windows" {
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "as private as a store's file")
	}

	after, err := os.ReadFile(src)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a source without a write-ahead log is only read")

	// Both files side by side: every table's rows, both ways.
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `ATTACH '`+src+`' AS a (READ_ONLY); ATTACH '`+dst+`' AS b (READ_ONLY)`)
	require.NoError(t, err)
	tables, err := tablesOf(ctx, conn, "a")
	require.NoError(t, err)
	assert.Contains(t, tables, "call_runs")
	assert.Contains(t, tables, "tool_days_before")
	var rows int64
	for _, tb := range tables {
		if tb == "schema_migrations" {
			continue
		}
		var onlyA, onlyB, count int64
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT
			(SELECT count(*) FROM (SELECT * FROM a."`+tb+`" EXCEPT ALL SELECT * FROM b."`+tb+`")),
			(SELECT count(*) FROM (SELECT * FROM b."`+tb+`" EXCEPT ALL SELECT * FROM a."`+tb+`")),
			(SELECT count(*) FROM a."`+tb+`")`).Scan(&onlyA, &onlyB, &count))
		assert.Zero(t, onlyA, tb)
		assert.Zero(t, onlyB, tb)
		rows += count
	}
	assert.Equal(t, rows, res.Rows)
	assert.Equal(t, len(tables)-1, res.Tables)
	var sameOrder bool
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT (SELECT list(id ORDER BY rowid) FROM a.calls) = (SELECT list(id ORDER BY rowid) FROM b.calls)`).Scan(&sameOrder))
	assert.True(t, sameOrder, "the calls keep their stored order")
	var dead, seq int64
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM b.dead_letters), (SELECT seq FROM b.checkpoints)`).Scan(&dead, &seq))
	assert.Equal(t, []int64{1, 42}, []int64{dead, seq})
	require.NoError(t, conn.Close())
	require.NoError(t, db.Close())

	s, err := Open(ctx, dst, Options{})
	require.NoError(t, err)
	defer s.Close()
	assert.Positive(t, count(t, s, `SELECT count(*) FROM pragma_storage_info('calls') WHERE compression = 'DICT_FSST'`))
	assert.Equal(t, 0, count(t, s, `SELECT count(*) FROM pragma_storage_info('calls')
		WHERE segment_type = 'VARCHAR' AND column_name IN ('id', 'server', 'tool', 'decision', 'agent') AND compression <> 'DICT_FSST'`))
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(500, time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))})
	require.NoError(t, err)
	assert.Equal(t, n+500, count(t, s, `SELECT count(*) FROM calls`))
}

// A copy never replaces a file, and one that fails leaves none behind.
func TestConvertStorageRefusesAnExistingFileAndCleansUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "old.duckdb"), filepath.Join(dir, "new.duckdb")
	oldFormatStore(t, src)
	require.NoError(t, os.WriteFile(dst, []byte("mine"), 0o600))
	_, err := ConvertStorage(ctx, src, dst)
	require.ErrorContains(t, err, "new.duckdb exists: name a new file")
	kept, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, "mine", string(kept))

	_, err = ConvertStorage(ctx, filepath.Join(dir, "missing.duckdb"), filepath.Join(dir, "other.duckdb"))
	require.ErrorContains(t, err, "no such file")
	assert.NoFileExists(t, filepath.Join(dir, "other.duckdb"))

	// A source with a table this build does not know: nothing is left.
	db, err := sql.Open("duckdb", src)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE from_the_future (x INTEGER)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = ConvertStorage(ctx, src, filepath.Join(dir, "third.duckdb"))
	require.ErrorContains(t, err, "tables this build does not know (from_the_future)")
	assert.NoFileExists(t, filepath.Join(dir, "third.duckdb"))
	assert.NoFileExists(t, filepath.Join(dir, "third.duckdb.wal"))
}

// A source whose process stopped before folding its write-ahead log (the
// last batches live only in the log) is copied with them, and no log is
// left beside it to be replayed into the copy once it takes the name.
func TestConvertStorageFoldsTheSourcesWriteAheadLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live, src, dst := filepath.Join(dir, "live.duckdb"), filepath.Join(dir, "old.duckdb"), filepath.Join(dir, "new.duckdb")
	n := oldFormatStore(t, live)
	s, err := Open(ctx, live, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(300, time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))})
	require.NoError(t, err)
	// The files as a crash would leave them: the batch is in the log only.
	for _, suffix := range []string{"", ".wal"} {
		data, err := os.ReadFile(live + suffix)
		require.NoError(t, err, "the batch went to the write-ahead log")
		require.NoError(t, os.WriteFile(src+suffix, data, 0o600))
	}
	require.NoError(t, s.Close())

	res, err := ConvertStorage(ctx, src, dst)
	require.NoError(t, err)
	assert.Equal(t, int64(n+300), res.Calls)
	assert.NoFileExists(t, src+".wal")
	assert.NoFileExists(t, dst+".wal")
}
