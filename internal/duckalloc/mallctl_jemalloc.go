//go:build linux && amd64 && cgo

package duckalloc

/*
#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>

// Weak: a DuckDB library built without jemalloc leaves it NULL.
extern int duckdb_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

static int mallctl_linked(void) { return duckdb_je_mallctl != NULL; }

static int mallctl_get_ssize(const char *name, ssize_t *v) {
	size_t n = sizeof(*v);
	return duckdb_je_mallctl(name, v, &n, NULL, 0);
}

static int mallctl_get_unsigned(const char *name, unsigned *v) {
	size_t n = sizeof(*v);
	return duckdb_je_mallctl(name, v, &n, NULL, 0);
}

static int mallctl_set_ssize(const char *name, ssize_t v) {
	return duckdb_je_mallctl(name, NULL, NULL, &v, sizeof(v));
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

func supported() bool { return C.mallctl_linked() != 0 }

func getMillis(name string) (time.Duration, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.ssize_t
	if rc := C.mallctl_get_ssize(cname, &v); rc != 0 {
		return 0, fmt.Errorf("read jemalloc's %s: %w", name, syscall.Errno(rc))
	}
	return time.Duration(v) * time.Millisecond, nil
}

func setMillis(name string, d time.Duration) error {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if rc := C.mallctl_set_ssize(cname, C.ssize_t(d.Milliseconds())); rc != 0 {
		return fmt.Errorf("set jemalloc's %s to %s: %w", name, d, syscall.Errno(rc))
	}
	return nil
}

// arenaCount is the number of arena indexes in use so far (arenas.narenas).
func arenaCount() (int, error) {
	cname := C.CString("arenas.narenas")
	defer C.free(unsafe.Pointer(cname))
	var v C.unsigned
	if rc := C.mallctl_get_unsigned(cname, &v); rc != 0 {
		return 0, fmt.Errorf("read jemalloc's arenas.narenas: %w", syscall.Errno(rc))
	}
	return int(v), nil
}
