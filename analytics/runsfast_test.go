package analytics

import (
	"reflect"
	"testing"
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
