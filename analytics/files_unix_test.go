//go:build unix

package analytics

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// A new database file and its WAL are private (0600) under the usual 022
// umask; a file that exists keeps its mode; the umask comes back at Close.
func TestDatabaseFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "new.duckdb")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(3, time.Now())})
	require.NoError(t, err)
	assertMode(t, path, 0o600)
	assertMode(t, path+".wal", 0o600)
	require.NoError(t, s.Close())

	other := filepath.Join(dir, "after.txt")
	require.NoError(t, os.WriteFile(other, nil, 0o666))
	assertMode(t, other, 0o644)

	// An existing file is left as it is; the WAL, which DuckDB creates
	// anew after every checkpoint, is private.
	require.NoError(t, os.Chmod(path, 0o640))
	s, err = Open(ctx, path, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(3, time.Now().Add(time.Hour))})
	require.NoError(t, err)
	assertMode(t, path, 0o640)
	assertMode(t, path+".wal", 0o600)
	require.NoError(t, s.Close())
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, want, st.Mode().Perm(), path)
}
