package duckalloc

import (
	"database/sql"
	"runtime"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startDuckDB runs a query on an in-memory DuckDB, so that its allocator
// has arenas in use.
func startDuckDB(t *testing.T) {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.Exec("SELECT sum(i) FROM range(1000000) t(i)")
	require.NoError(t, err)
}

func TestSetDecayReachesEveryArena(t *testing.T) {
	startDuckDB(t)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		assert.False(t, Supported())
		assert.ErrorIs(t, SetDecay(Decay{Dirty: time.Second}), errUnsupported)
		return
	}
	require.True(t, Supported(), "DuckDB's Linux x86-64 library links jemalloc")
	before, err := CurrentDecay()
	require.NoError(t, err)
	t.Cleanup(func() { _ = SetDecay(before) })

	want := Decay{Dirty: 7 * time.Second, Muzzy: 3 * time.Second}
	require.NoError(t, SetDecay(want))
	got, err := CurrentDecay()
	require.NoError(t, err)
	assert.Equal(t, want, got, "the arenas created from now on")
	// Arena 0 existed before the call: the setting reached it too.
	dirty, err := getMillis("arena.0.dirty_decay_ms")
	require.NoError(t, err)
	muzzy, err := getMillis("arena.0.muzzy_decay_ms")
	require.NoError(t, err)
	assert.Equal(t, want, Decay{Dirty: dirty, Muzzy: muzzy}, "an arena in use")
}

func TestAnUnknownSettingIsAnError(t *testing.T) {
	if !Supported() {
		t.Skip("DuckDB is built without jemalloc here")
	}
	err := setMillis("arenas.no_such_decay_ms", time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "arenas.no_such_decay_ms")
}
