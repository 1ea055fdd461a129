package analytics

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	want := collectCalls(st.cols)
	require.Greater(t, len(want.sessions), 100)

	real := sessionKeyHash
	defer func() { sessionKeyHash = real }()
	sessionKeyHash = func(string) uint64 { return 42 }
	got := collectCalls(st.cols)

	assert.Equal(t, want.sessions, got.sessions)
	assert.Equal(t, want.starts, got.starts)
	assert.Equal(t, want.calls, got.calls)
	assert.Equal(t, want.runs, got.runs)
	assert.Equal(t, want.tails, got.tails)
	assert.Equal(t, want.days, got.days)
}
