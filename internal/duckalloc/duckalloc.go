// Package duckalloc tunes the memory allocator DuckDB brings with it.
//
// DuckDB's Linux x86-64 library is linked with its own copy of jemalloc
// (symbols prefixed duckdb_je_), which hands pages that stayed unused for
// its decay time back to the system. A process that stores a batch every
// few hundred milliseconds gets the same pages back a moment later, and on
// a virtual machine each first touch of a page costs microseconds: the
// decay time set here trades how soon idle memory leaves for those faults.
// The same faults are why UseHugePages asks the kernel for transparent
// huge pages under DuckDB's memory: one fault maps 2 MiB instead of 4 KiB.
// Where DuckDB was built without jemalloc, every call reports Supported
// false and changes nothing.
package duckalloc

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// Decay is the time jemalloc's arenas keep a freed page before giving it
// back to the system (dirty pages, then lazily freed "muzzy" ones).
type Decay struct {
	Dirty, Muzzy time.Duration
}

// Supported says whether DuckDB's jemalloc is linked into this process.
func Supported() bool { return supported() }

// CurrentDecay reads the decay times of the arenas jemalloc creates from
// now on (arenas.dirty_decay_ms, arenas.muzzy_decay_ms).
func CurrentDecay() (Decay, error) {
	if !supported() {
		return Decay{}, errUnsupported
	}
	dirty, err := getMillis("arenas.dirty_decay_ms")
	if err != nil {
		return Decay{}, err
	}
	muzzy, err := getMillis("arenas.muzzy_decay_ms")
	if err != nil {
		return Decay{}, err
	}
	return Decay{Dirty: dirty, Muzzy: muzzy}, nil
}

// SetDecay sets d on every arena, those that exist and those to come.
func SetDecay(d Decay) error {
	if !supported() {
		return errUnsupported
	}
	if err := setMillis("arenas.dirty_decay_ms", d.Dirty); err != nil {
		return err
	}
	if err := setMillis("arenas.muzzy_decay_ms", d.Muzzy); err != nil {
		return err
	}
	return eachArena(func(i int) error {
		if err := setMillis(fmt.Sprintf("arena.%d.dirty_decay_ms", i), d.Dirty); err != nil {
			return err
		}
		err := setMillis(fmt.Sprintf("arena.%d.muzzy_decay_ms", i), d.Muzzy)
		if errors.Is(err, syscall.EFAULT) {
			// The arena took its dirty decay: an EFAULT now is no unused
			// index, and eachArena must not pass over it.
			return fmt.Errorf("arena %d: muzzy decay: %v", i, err)
		}
		return err
	})
}

// eachArena calls f with the index of each arena jemalloc has made: f's
// EFAULT says the index holds none yet (one made later takes the defaults
// of "arenas."), and is passed over.
func eachArena(f func(i int) error) error {
	if !supported() {
		return errUnsupported
	}
	n, err := arenaCount()
	if err != nil {
		return err
	}
	for i := range n {
		if err := f(i); err != nil && !errors.Is(err, syscall.EFAULT) {
			return err
		}
	}
	return nil
}

// UseHugePages makes every arena of DuckDB's jemalloc, those in use and
// the rest of its automatic ones, advise the kernel to back the memory it
// maps from then on (in ranges of 2 MiB and more) with transparent huge
// pages (madvise MADV_HUGEPAGE): where the kernel's transparent_hugepage
// mode is "madvise", as on many distributions, DuckDB's memory otherwise
// comes a 4 KiB page, and a page fault, at a time. Where the mode is
// "always" it changes little (the alignment), and where it is "never" the kernel ignores
// the advice. Once per process; later calls return the first's result.
// Memory mapped before the call stays as it is, and an arena with extent
// hooks of somebody else's keeps them.
func UseHugePages() error {
	hugePagesOnce.Do(func() { hugePagesErr = useHugePages() })
	return hugePagesErr
}

var (
	hugePagesOnce sync.Once
	hugePagesErr  error
)

func useHugePages() error {
	return eachArena(func(i int) error {
		if err := hugePagesOnArena(i); !errors.Is(err, errForeignHooks) {
			return err
		}
		return nil // hooks of somebody else's, kept
	})
}

// HugePagesArenas counts the arenas that map through the huge-page hooks,
// of those that exist.
func HugePagesArenas() (int, error) {
	count := 0
	err := eachArena(func(i int) error {
		has, err := arenaHasHugePages(i)
		if has {
			count++
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return count, nil
}

// errForeignHooks: an arena maps through extent hooks that are neither
// jemalloc's own nor ours, which UseHugePages leaves in place.
var errForeignHooks = errors.New("the arena has extent hooks of somebody else's: left as they are")

var errUnsupported = errors.New("DuckDB's allocator is not jemalloc in this build")
