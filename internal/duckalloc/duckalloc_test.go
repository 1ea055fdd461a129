package duckalloc

import (
	"database/sql"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

// adviseHugeResident is how much of this process's memory is resident in
// mappings advised for transparent huge pages ("hg" among the VmFlags of
// /proc/self/smaps, which end each mapping's entry).
func adviseHugeResident(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var total, rss int64
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Rss:"); ok {
			f := strings.Fields(v)
			require.Len(t, f, 2)
			kb, err := strconv.ParseInt(f[0], 10, 64)
			require.NoError(t, err)
			rss = kb << 10
		}
		if flags, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			if slices.Contains(strings.Fields(flags), "hg") {
				total += rss
			}
			rss = 0
		}
	}
	return total
}

func TestUseHugePagesAdvisesWhatDuckDBMapsFromThenOn(t *testing.T) {
	if !Supported() {
		assert.ErrorIs(t, UseHugePages(), errUnsupported)
		return
	}
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	_, err = db.Exec("SELECT sum(i) FROM range(1000000) t(i)")
	require.NoError(t, err)
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("this kernel has no transparent huge pages: it refuses the advice")
	}
	if hooked, err := HugePagesArenas(); err == nil && hooked == 0 { // not on a second run in one process
		assert.Zero(t, adviseHugeResident(t), "nothing advised before the call")
	}

	require.NoError(t, UseHugePages())
	require.NoError(t, UseHugePages(), "a second call is the first's result")
	n, err := arenaCount()
	require.NoError(t, err)
	hooked, err := HugePagesArenas()
	require.NoError(t, err)
	assert.Positive(t, hooked)
	assert.LessOrEqual(t, hooked, n)
	has, err := arenaHasHugePages(0)
	require.NoError(t, err)
	assert.True(t, has, "arena 0, in use before the call")

	// A table of a few hundred MB in memory makes DuckDB's arenas map more.
	_, err = db.Exec("CREATE TABLE t AS SELECT i, i::VARCHAR || '-padding-padding' AS s FROM range(6000000) r(i)")
	require.NoError(t, err)
	var rows int64
	require.NoError(t, db.QueryRow("SELECT count(DISTINCT s) FROM t").Scan(&rows))
	assert.EqualValues(t, 6000000, rows)
	assert.Greater(t, adviseHugeResident(t), int64(64<<20), "the table's memory, in mappings advised for huge pages")

	// Closing frees every block, on DuckDB's threads too: the extents
	// merge back through the hooks without deadlocking.
	returnsWithin(t, 2*time.Minute, "closing DuckDB", db.Close)
}

// returnsWithin runs f and fails the test if it has not returned within
// limit (the allocator deadlocks these tests look for never return), or
// returned an error.
func returnsWithin(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		require.NoError(t, err, what)
	case <-time.After(limit):
		t.Fatalf("%s hung", what)
	}
}

func TestAFreeOnAFreshThreadMergesWithoutDeadlock(t *testing.T) {
	startDuckDB(t)
	if !Supported() {
		t.Skip("DuckDB is built without jemalloc here")
	}
	require.NoError(t, UseHugePages())
	// jemalloc's own merge hook sets up the calling thread's allocator
	// state, allocating under the lock the merge runs in: with it, this
	// never returns (5 runs of 5 hung, the whole test binary with it, so
	// that go test's -timeout is what ends it).
	returnsWithin(t, time.Minute, "a free on a new thread, merging two extents",
		func() error { return freeNeighboursOnNewThread(16 << 20) })
}

// An arena with extent hooks of somebody else's keeps them: UseHugePages
// neither replaces nor chains them.
func TestHugePagesLeaveOtherHooksInPlace(t *testing.T) {
	startDuckDB(t)
	if !Supported() {
		t.Skip("DuckDB is built without jemalloc here")
	}
	require.NoError(t, UseHugePages())
	require.NoError(t, setForeignHooks(0, true))
	t.Cleanup(func() { require.NoError(t, setForeignHooks(0, false)) })
	err := hugePagesOnArena(0)
	require.ErrorIs(t, err, errForeignHooks)
	has, err := arenaHasHugePages(0)
	require.NoError(t, err)
	assert.False(t, has, "the foreign hooks stayed")
	before, err := HugePagesArenas()
	require.NoError(t, err)
	require.NoError(t, useHugePages(), "the other arenas take ours; this one is skipped")
	after, err := HugePagesArenas()
	require.NoError(t, err)
	assert.Equal(t, before, after)
	has, err = arenaHasHugePages(0)
	require.NoError(t, err)
	assert.False(t, has)
}
