package analytics

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
)

// TestRunCallHoldsNoPointers: runCall, one per call of a staged batch,
// holds nothing the garbage collector scans or guards with write barriers
// (its comment says why): a field of a type with pointers fails this.
func TestRunCallHoldsNoPointers(t *testing.T) {
	typ := reflect.TypeFor[runCall]()
	for i := range typ.NumField() {
		if f := typ.Field(i); holdsPointers(f.Type) {
			t.Errorf("runCall.%s is a %s, which holds pointers: keep it an index (see batchCalls.tools and argsRef)", f.Name, f.Type)
		}
	}
}

// holdsPointers says whether a value of typ holds a pointer.
func holdsPointers(typ reflect.Type) bool {
	switch typ.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return typ.Len() > 0 && holdsPointers(typ.Elem())
	case reflect.Struct:
		for i := range typ.NumField() {
			if holdsPointers(typ.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true
}

// collectCalls finds a batch's sessions by their keys' hashes; a key whose
// hash an earlier session took is still its own session. With every key
// hashed alike, the batch's sessions, calls, runs and tool days are those
// of the real hash.
func TestCollectCallsTellsSessionsApartWhenTheirHashesCollide(t *testing.T) {
	evs, err := runtraffic.Generate(3, 20000, 6*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
	require.NoError(t, err)
	st := newStaging(len(evs))
	st.Add(evs, nil)
	defer st.Release()
	want := collectCalls(st.cols, nil)
	require.Greater(t, len(want.sessions), 100)

	real := sessionKeyHash
	defer func() { sessionKeyHash = real }()
	sessionKeyHash = func(string) uint64 { return 42 }
	assertSameCollection(t, want, collectCalls(st.cols, nil))
}

// assertSameCollection holds two collections of one batch's calls equal.
func assertSameCollection(t *testing.T, want, got *batchCalls) {
	t.Helper()
	assert.Equal(t, want.sessions, got.sessions)
	assert.Equal(t, want.starts, got.starts)
	assert.Equal(t, want.calls, got.calls)
	assert.Equal(t, want.resorted, got.resorted)
	assert.Equal(t, want.runs, got.runs)
	assert.Equal(t, want.runStarts, got.runStarts)
	assert.Equal(t, want.tails, got.tails)
	assert.Equal(t, want.tied, got.tied)
	assert.Equal(t, want.days, got.days)
}

// The store lays every batch's calls out in the same scratch: a batch
// collected after a larger one is collected as into fresh memory, and once
// released the scratch's runs point nowhere (no staged strings kept alive
// between batches).
func TestCollectCallsInAReusedScratch(t *testing.T) {
	staged := func(seed int64, n int) *staging {
		evs, err := runtraffic.Generate(seed, n, 6*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
		require.NoError(t, err)
		st := newStaging(len(evs))
		st.Add(evs, nil)
		t.Cleanup(st.Release)
		return st
	}
	large, small := staged(3, 20000), staged(4, 5000)
	var x callScratch
	x.release(collectCalls(large.cols, &x))
	got := collectCalls(small.cols, &x)
	want := collectCalls(small.cols, nil)
	require.NotEmpty(t, want.runs)
	assertSameCollection(t, want, got)
	x.release(got)
	for i, r := range x.runs[:cap(x.runs)] {
		require.Zero(t, r, "run %d of the released scratch", i)
	}
}

// collectCalls leaves unsorted the sessions whose calls arrived in rising
// milliseconds, and finds their runs from whether each call has the call
// before's arguments as it laid the calls out: the calls must be in
// compareCalls' order all the same, and the runs, tails and ties those of
// comparing every call's arguments with the call before's.
func TestCollectCallsMatchesAFullSortAndComparison(t *testing.T) {
	shuffled, err := runtraffic.Generate(5, 20000, 6*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
	require.NoError(t, err)
	inOrder := slices.Clone(shuffled)
	slices.SortStableFunc(inOrder, func(a, b audit.Event) int { return a.TS.Compare(b.TS) })
	for name, evs := range map[string][]audit.Event{"shuffled": shuffled, "in time order": inOrder} {
		t.Run(name, func(t *testing.T) {
			st := newStaging(len(evs))
			st.Add(evs, nil)
			defer st.Release()
			b := collectCalls(st.cols, nil)
			var runs []fastRun
			resorted := 0
			for si := range b.sessions {
				calls := b.calls[b.starts[si]:b.starts[si+1]]
				require.True(t, slices.IsSortedFunc(calls, b.compareCalls), "session %d in compareCalls' order", si)
				var tail runTail
				var tied bool
				runs, tail, tied = b.sessionRuns(runs, int32(si), calls, callBefore{}, false)
				assert.Equal(t, tail, b.tails[si], "session %d's tail", si)
				assert.Equal(t, tied, b.tied[si], "session %d's tie", si)
				if b.resorted[si] {
					resorted++
				}
			}
			assert.Equal(t, runs, b.runs)
			t.Logf("%d sessions, %d sorted, %d runs", len(b.sessions), resorted, len(runs))
			assert.NotEmpty(t, runs)
			assert.Less(t, resorted, len(b.sessions), "some sessions' calls arrived in order")
			if name == "shuffled" {
				assert.Positive(t, resorted, "some sessions' calls had to be sorted")
			}
		})
	}
}
