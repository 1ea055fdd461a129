package threadprio

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// niceness of every thread of the process, by thread id.
func niceness(t *testing.T) map[int]int {
	t.Helper()
	out, err := Niceness(0)
	require.NoError(t, err)
	return out
}

// TestFavorLowersEveryOtherThread: the favored goroutine's thread keeps its
// niceness while every other thread of the process, those there before and
// those started after, is lowered by the steps asked for; a thread raised
// again (where the test may raise one) is lowered by the next sweep.
func TestFavorLowersEveryOtherThread(t *testing.T) {
	type favored struct{ tid, nice int }
	got := make(chan favored)
	releaseIt := make(chan struct{})
	released := make(chan struct{})
	go func() {
		release := Favor(3)
		tid := syscall.Gettid()
		nice, err := threadNice(tid)
		assert.NoError(t, err)
		got <- favored{tid, nice}
		<-releaseIt
		release()
		close(released)
	}()
	f := <-got
	want := min(f.nice+3, 19)

	// Threads started after: goroutines that keep their own.
	stop := make(chan struct{})
	defer close(stop)
	for range 3 {
		go func() {
			runtime.LockOSThread()
			<-stop
		}()
	}
	deadline := time.Now().Add(20 * Sweep)
	for {
		all := niceness(t)
		lowered := 0
		for tid, n := range all {
			if tid != f.tid && n >= want {
				lowered++
			}
		}
		if lowered == len(all)-1 || time.Now().After(deadline) {
			require.Contains(t, all, f.tid)
			assert.Equal(t, f.nice, all[f.tid], "the favored thread")
			assert.Equal(t, len(all)-1, lowered, "every other thread lowered to %d: %v", want, all)
			assert.GreaterOrEqual(t, len(all), 5, "threads started after Favor are there")
			break
		}
		time.Sleep(Sweep / 2)
	}

	// A thread back at the favored one's niceness, as one the favored
	// thread starts would be.
	var other int
	for tid := range niceness(t) {
		if tid != f.tid {
			other = tid
			break
		}
	}
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, other, f.nice); err != nil {
		t.Logf("raising a thread is not allowed here (%v): the sweep is not checked", err)
	} else {
		require.Eventually(t, func() bool { return niceness(t)[other] >= want }, 20*Sweep, Sweep/4, "thread %d lowered again", other)
	}
	close(releaseIt)
	<-released
}
