//go:build linux && amd64 && cgo

package duckalloc

/*
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
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

// extent_hooks mirrors jemalloc's public extent_hooks_t (jemalloc 5: the
// functions an arena maps, commits, purges, splits and merges its memory
// with).
typedef struct extent_hooks extent_hooks;
typedef void *(*extent_alloc)(extent_hooks *, void *new_addr, size_t size, size_t alignment, bool *zero, bool *commit, unsigned arena_ind);
typedef bool (*extent_merge)(extent_hooks *, void *addr_a, size_t size_a, void *addr_b, size_t size_b, bool committed, unsigned arena_ind);
struct extent_hooks {
	extent_alloc alloc;
	void *dalloc, *destroy, *commit, *decommit, *purge_lazy, *purge_forced, *split;
	extent_merge merge;
};

// jemalloc's own hooks, and ours: jemalloc's for giving memory back,
// purging and splitting; our own alloc and merge. jemalloc's alloc and
// merge look up the calling thread's allocator state, which on a thread
// that so far only freed memory sets it up by allocating, inside the lock
// the merge is called under: a deadlock.
static extent_hooks *jemalloc_hooks;
static extent_hooks huge_hooks;

#define PAGE_BYTES ((size_t)4096)
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

// huge_alloc maps size bytes at new_addr (only there, when given) or
// aligned to alignment, and advises ranges of a huge page and more, aligned
// to one, for transparent huge pages; NULL when it cannot. Like jemalloc's
// own (on Linux, which overcommits), the pages are zeroed and committed.
static void *huge_alloc(extent_hooks *hooks, void *new_addr, size_t size, size_t alignment, bool *zero, bool *commit, unsigned arena_ind) {
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
	if (alignment < PAGE_BYTES) {
		alignment = PAGE_BYTES;
	}
	bool huge = size >= HUGE_PAGE_BYTES;
	if (huge && alignment < HUGE_PAGE_BYTES) {
		alignment = HUGE_PAGE_BYTES;
	}
	void *p;
	if (new_addr != NULL) {
		p = mmap(new_addr, size, prot, flags, -1, 0);
		if (p == MAP_FAILED) {
			return NULL;
		}
		if (p != new_addr) {
			munmap(p, size);
			return NULL;
		}
	} else {
		// Map more, then unmap the lead and the trail around an aligned range.
		size_t span = size + alignment - PAGE_BYTES;
		if (span < size) {
			return NULL;
		}
		char *raw = mmap(NULL, span, prot, flags, -1, 0);
		if (raw == MAP_FAILED) {
			return NULL;
		}
		char *aligned = (char *)(((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1));
		size_t lead = (size_t)(aligned - raw), trail = span - lead - size;
		if (lead > 0) {
			munmap(raw, lead);
		}
		if (trail > 0) {
			munmap(aligned + size, trail);
		}
		p = aligned;
	}
	if (huge) {
		// A hint: a kernel without transparent huge pages refuses it, harmlessly.
		madvise(p, size, MADV_HUGEPAGE);
	}
	*zero = true;
	*commit = true;
	return p;
}

// huge_merge lets two neighbouring extents merge, as jemalloc's own does
// on Linux for memory it mapped (its other refusals concern sbrk's memory
// and systems whose mappings do not coalesce).
static bool huge_merge(extent_hooks *hooks, void *addr_a, size_t size_a, void *addr_b, size_t size_b, bool committed, unsigned arena_ind) {
	return false;
}

// hooks_on_arena gives arena i the huge-page hooks (an automatic arena
// not made yet is made with them): 0, a mallctl error, or -1 when the
// arena has hooks of somebody else's, left as they are. Not safe to run
// twice at once (the caller's sync.Once).
static int hooks_on_arena(unsigned i) {
	char name[64];
	snprintf(name, sizeof name, "arena.%u.extent_hooks", i);
	extent_hooks *old = NULL;
	size_t n = sizeof(old);
	int rc = duckdb_je_mallctl(name, &old, &n, NULL, 0);
	if (rc != 0) {
		return rc;
	}
	if (old == &huge_hooks) {
		return 0;
	}
	if (jemalloc_hooks == NULL) {
		jemalloc_hooks = old;
		huge_hooks = *old;
		huge_hooks.alloc = huge_alloc;
		huge_hooks.merge = huge_merge;

	} else if (old != jemalloc_hooks) {
		return -1;
	}
	extent_hooks *ours = &huge_hooks;
	return duckdb_je_mallctl(name, NULL, NULL, &ours, sizeof(ours));
}

extern void *duckdb_je_mallocx(size_t size, int flags) __attribute__((weak));
extern void duckdb_je_dallocx(void *p, int flags) __attribute__((weak));

// jemalloc's mallocx flags (jemalloc.h): an arena, and no thread cache.
#define MALLOCX_ARENA(a) ((((int)(a)) + 1) << 20)
#define MALLOCX_TCACHE_NONE ((int)((-1 + 2) << 8))

static void *free_block(void *p) {
	duckdb_je_dallocx(p, MALLOCX_TCACHE_NONE);
	return NULL;
}

// free_neighbours_on_new_thread allocates blocks of size bytes in arena 0,
// past the thread caches, until two are neighbours in memory, frees the
// first, then the second on a new thread, one that never allocated: its
// free merges the two extents through the merge hook, from a thread whose
// allocator state is not set up yet, and setting it up allocates the
// thread cache from arena 0, whose lock the merge holds. 0, -1 when no
// neighbours came, or pthread's error.
static int free_neighbours_on_new_thread(size_t size) {
	enum { tries = 64 };
	const int flags = MALLOCX_ARENA(0) | MALLOCX_TCACHE_NONE;
	char *blocks[tries];
	char *a = NULL, *b = NULL;
	int n = 0;
	while (n < tries && b == NULL) {
		blocks[n] = duckdb_je_mallocx(size, flags);
		if (blocks[n] == NULL) {
			break;
		}
		// A large block starts within the page after its extent's start.
		if (n > 0) {
			uintptr_t prev = (uintptr_t)blocks[n - 1] & ~(uintptr_t)(PAGE_BYTES - 1);
			uintptr_t cur = (uintptr_t)blocks[n] & ~(uintptr_t)(PAGE_BYTES - 1);
			if (cur > prev && cur - prev <= size + PAGE_BYTES) {
				a = blocks[n - 1];
				b = blocks[n];
			}
		}
		n++;
	}
	for (int i = 0; i < n; i++) {
		if (blocks[i] != a && blocks[i] != b) {
			duckdb_je_dallocx(blocks[i], MALLOCX_TCACHE_NONE);
		}
	}
	if (b == NULL) {
		return -1;
	}
	duckdb_je_dallocx(a, MALLOCX_TCACHE_NONE);
	pthread_t t;
	int rc = pthread_create(&t, NULL, free_block, b);
	if (rc != 0) {
		duckdb_je_dallocx(b, MALLOCX_TCACHE_NONE);
		return rc;
	}
	return pthread_join(t, NULL);
}

// foreign_hooks stands for hooks of somebody else's (for the tests): a
// copy of jemalloc's own at another address.
static extent_hooks foreign_hooks;

// swap_hooks sets arena i's hooks to foreign ones (foreign != 0; jemalloc's
// own as they were first read must be known) or back to ours: 0 or the
// mallctl error.
static int swap_hooks(unsigned i, int foreign) {
	if (jemalloc_hooks == NULL) {
		return EINVAL;
	}
	foreign_hooks = *jemalloc_hooks;
	extent_hooks *h = foreign ? &foreign_hooks : &huge_hooks;
	char name[64];
	snprintf(name, sizeof name, "arena.%u.extent_hooks", i);
	return duckdb_je_mallctl(name, NULL, NULL, &h, sizeof(h));
}

// arena_has_huge_hooks says whether arena i allocates through huge_alloc.
static int arena_has_huge_hooks(unsigned i, int *has) {
	char name[64];
	snprintf(name, sizeof name, "arena.%u.extent_hooks", i);
	extent_hooks *cur = NULL;
	size_t n = sizeof(cur);
	int rc = duckdb_je_mallctl(name, &cur, &n, NULL, 0);
	*has = rc == 0 && cur == &huge_hooks;
	return rc;
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

// hugePagesOnArena gives arena i the hooks that mark the memory it maps
// for transparent huge pages.
func hugePagesOnArena(i int) error {
	switch rc := C.hooks_on_arena(C.unsigned(i)); {
	case rc == -1:
		return fmt.Errorf("arena %d of DuckDB's jemalloc: %w", i, errForeignHooks)
	case rc != 0:
		return fmt.Errorf("set the extent hooks of arena %d of DuckDB's jemalloc: %w", i, syscall.Errno(rc))
	}
	return nil
}

// arenaHasHugePages says whether arena i maps through the huge-page hooks.
func arenaHasHugePages(i int) (bool, error) {
	var has C.int
	if rc := C.arena_has_huge_hooks(C.unsigned(i), &has); rc != 0 {
		return false, fmt.Errorf("read the extent hooks of arena %d of DuckDB's jemalloc: %w", i, syscall.Errno(rc))
	}
	return has != 0, nil
}

// freeNeighboursOnNewThread frees two neighbouring blocks of DuckDB's
// allocator, the second on a thread that never allocated (for the tests:
// the merge of their extents must not wait for itself).
func freeNeighboursOnNewThread(size int) error {
	switch rc := C.free_neighbours_on_new_thread(C.size_t(size)); {
	case rc == -1:
		return fmt.Errorf("no two neighbouring blocks of %d bytes among 64", size)
	case rc != 0:
		return fmt.Errorf("free on a new thread: %w", syscall.Errno(rc))
	}
	return nil
}

// setForeignHooks gives arena i hooks of somebody else's (foreign), or ours
// back (for the tests).
func setForeignHooks(i int, foreign bool) error {
	f := C.int(0)
	if foreign {
		f = 1
	}
	if rc := C.swap_hooks(C.unsigned(i), f); rc != 0 {
		return fmt.Errorf("set the extent hooks of arena %d: %w", i, syscall.Errno(rc))
	}
	return nil
}
