// Package wait holds the one cancellable sleep that retry loops share, and
// the daily schedule of the daemon's maintenance.
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

// Daily calls run after first, and then offset past each UTC midnight
// (when a day has just been sealed), until ctx ends.
func Daily(ctx context.Context, first, offset time.Duration, run func()) {
	for next := first; Sleep(ctx, next); {
		run()
		next = untilAfterMidnight(time.Now(), offset)
	}
}

// untilAfterMidnight is the time from now to offset past the next UTC
// midnight.
func untilAfterMidnight(now time.Time, offset time.Duration) time.Duration {
	now = now.UTC()
	return now.Truncate(24 * time.Hour).Add(24*time.Hour + offset).Sub(now)
}
