// Package wait holds the one cancellable sleep that retry loops share.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done; it reports whether the full wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
