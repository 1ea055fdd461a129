package wait

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSleep(t *testing.T) {
	assert.True(t, Sleep(context.Background(), time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, Sleep(ctx, time.Hour), "a done context ends the wait")
}

func TestDaily(t *testing.T) {
	at := time.Date(2026, 11, 29, 23, 50, 0, 0, time.UTC)
	assert.Equal(t, 15*time.Minute, untilAfterMidnight(at, 5*time.Minute))
	assert.Equal(t, 24*time.Hour, untilAfterMidnight(at.Add(15*time.Minute), 5*time.Minute), "at the time itself: the next day's")
	assert.Equal(t, 25*time.Minute, untilAfterMidnight(at.In(time.FixedZone("UTC+2", 2*3600)), 15*time.Minute), "UTC midnight, whatever the zone")

	ctx, cancel := context.WithCancel(context.Background())
	runs := 0
	Daily(ctx, time.Millisecond, time.Minute, func() { runs++; cancel() })
	assert.Equal(t, 1, runs, "once after the first wait, then waits for midnight until ctx ends")
}
