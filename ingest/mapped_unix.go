//go:build linux || darwin || freebsd

package ingest

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapping is a regular file mapped read-only into memory.
type mapping struct {
	data []byte
	page int
}

// mapFile maps the first size bytes of the regular file f; nil when size
// is 0 or past what an int holds (read as a stream).
func mapFile(f *os.File, size int64) (*mapping, error) {
	if size == 0 || size != int64(int(size)) {
		return nil, nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return &mapping{data: data, page: os.Getpagesize()}, nil
}

// release hands the whole pages of data[from:to] back to the kernel
// (MADV_DONTNEED: they leave the process's resident memory and stay in
// the page cache, where a later read finds them) and returns where the
// pages handed back end.
func (m *mapping) release(from, to int) int {
	to -= to % m.page
	if to <= from {
		return from
	}
	_ = unix.Madvise(m.data[from:to], unix.MADV_DONTNEED) // only memory is at stake
	return to
}

func (m *mapping) close() { _ = unix.Munmap(m.data) }
