//go:build unix

package analytics

import (
	"sync"
	"syscall"
)

// privateFiles makes the files the process creates private (umask 077)
// until the returned func is called by every store that asked: DuckDB
// creates the database file, and then its WAL again after every checkpoint
// and its spill files under <file>.tmp, with mode 0666 less the umask, and
// has no setting of its own for it. Files that exist keep their mode.
// Other files the process creates meanwhile are private too.
func privateFiles() (release func()) {
	umask.Lock()
	defer umask.Unlock()
	if umask.held++; umask.held == 1 {
		umask.saved = syscall.Umask(0o077)
		syscall.Umask(umask.saved | 0o077)
	}
	return sync.OnceFunc(func() {
		umask.Lock()
		defer umask.Unlock()
		if umask.held--; umask.held == 0 {
			syscall.Umask(umask.saved)
		}
	})
}

var umask struct {
	sync.Mutex
	held  int
	saved int
}
