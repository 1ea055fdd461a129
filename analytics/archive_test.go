package analytics

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// With an archive folder the instance still runs with external access off:
// the store writes Parquet inside the folder, nothing outside it, and user
// SQL may read the archive but neither COPY nor write anywhere.
func TestArchiveFolderIsTheOnlyFileAccess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	arch := filepath.Join(dir, "archive")
	require.NoError(t, os.Mkdir(arch, 0o755))
	secret := filepath.Join(dir, "secret.csv")
	require.NoError(t, os.WriteFile(secret, []byte("k,v\npassword,hunter2\n"), 0o600))
	s, err := Open(ctx, filepath.Join(dir, "t.duckdb"), Options{ArchiveDir: arch})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	base := time.Date(2026, 11, 20, 1, 0, 0, 0, time.UTC)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(8, base)})
	require.NoError(t, err)

	var external, locked bool
	require.NoError(t, s.DB().QueryRow(`SELECT current_setting('enable_external_access'), current_setting('lock_configuration')`).Scan(&external, &locked))
	assert.False(t, external)
	assert.True(t, locked)
	for _, q := range []string{"SET enable_external_access = true", "SET allowed_directories = ['/']"} {
		_, err := s.DB().Exec(q)
		assert.Error(t, err, q)
	}

	// The store writes inside the folder...
	inside := filepath.Join(arch, "d.parquet")
	d, err := s.WriteDay(ctx, "proxmox-mcp", base, nil, inside)
	require.NoError(t, err)
	assert.EqualValues(t, 8, d.Rows)
	rows, distinct, sum, err := s.ParquetRows(ctx, []string{inside})
	require.NoError(t, err)
	assert.EqualValues(t, 8, rows)
	assert.EqualValues(t, 8, distinct)
	assert.Equal(t, d.Checksum, sum)
	// ...and DuckDB itself refuses anywhere else, ../ included.
	for _, out := range []string{filepath.Join(dir, "out.parquet"), arch + "/../out.parquet", arch + "2/out.parquet"} {
		_, err := s.DB().Exec(`COPY (SELECT * FROM calls) TO '` + out + `' (FORMAT parquet)`)
		require.Error(t, err, out)
		assert.Contains(t, err.Error(), "disabled by configuration", out)
		assert.NoFileExists(t, out)
	}
	_, err = s.DB().Exec(`SELECT * FROM read_csv('` + secret + `')`)
	assert.ErrorContains(t, err, "disabled by configuration")

	// User SQL reads the archive, and is refused COPY, also into it.
	got, err := queryAll(t, s, `SELECT count(*) FROM read_parquet('`+arch+`/*.parquet')`)
	require.NoError(t, err)
	assert.EqualValues(t, 8, got[0][0])
	for _, q := range []string{
		`COPY (SELECT * FROM calls) TO '` + filepath.Join(arch, "u.parquet") + `' (FORMAT parquet)`,
		`COPY calls TO '` + filepath.Join(arch, "u.csv") + `'`,
		`ATTACH '` + filepath.Join(arch, "x.duckdb") + `' AS x`,
		`DELETE FROM calls`,
	} {
		_, err := queryAll(t, s, q)
		assert.ErrorIs(t, err, ErrNotReadOnly, q)
	}
	for _, f := range []string{"u.parquet", "u.csv", "x.duckdb"} {
		assert.NoFileExists(t, filepath.Join(arch, f))
	}
	_, err = queryAll(t, s, `SELECT * FROM read_csv('`+secret+`')`)
	assert.Error(t, err)
	assert.EqualValues(t, 8, count(t, s, `SELECT count(*) FROM calls`))
}
