//go:build linux

package goheap

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the platforms this
// advice matters on (x86-64, arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// advise allocates n bytes (one span the runtime maps fresh and does not
// zero, so nothing is touched), advises the huge pages wholly inside them
// and has them collected; it returns the advised range [beg, end).
func advise(n int) (beg, end uintptr, err error) {
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	beg = (p + hugePage - 1) &^ (hugePage - 1)
	end = (p + uintptr(n)) &^ (hugePage - 1)
	if beg < end {
		// The whole huge pages inside b, which stays alive until the advice is given.
		span := b[beg-p : end-p]
		if e := unix.Madvise(span, unix.MADV_HUGEPAGE); e != nil && e != unix.EINVAL {
			// EINVAL: a kernel without transparent huge pages.
			err = fmt.Errorf("advise the Go heap for huge pages: %w", e)
		}
	}
	runtime.KeepAlive(b)
	// Collected now: the cycle its allocation started may have found it
	// alive, and the next would only come once the heap had grown by as
	// much again, from pages not advised.
	runtime.GC()
	return beg, end, err
}
