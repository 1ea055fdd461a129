package threadprio

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Favor locks the calling goroutine to its OS thread and sets every other
// thread of the process `by` steps of niceness lower than that one (19 at
// most), now and every Sweep until release is called, so that threads
// started later are lowered too (most inherit it from the thread that
// starts them; one started by the favored thread, as a library's own
// thread may be, does not). Lowering needs no privilege; raising them back
// would, so release only stops the sweep and unlocks the goroutine: the
// other threads stay lowered, which suits a goroutine that carries the
// process's main work for as long as the process runs (`ingest`'s
// appending, `serve`'s storing).
func Favor(by int) (release func()) {
	runtime.LockOSThread()
	me := syscall.Gettid()
	nice, err := threadNice(me)
	if err != nil {
		return runtime.UnlockOSThread
	}
	target := min(nice+by, 19)
	lower(me, target)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(Sweep)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				lower(me, target)
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(stop)
		<-done
		runtime.UnlockOSThread()
	})
}

// lower sets every thread of the process other than except to niceness
// target, leaving those already lower as they are.
func lower(except, target int) {
	threads, err := Niceness(0)
	if err != nil {
		return
	}
	for tid, nice := range threads {
		if tid != except && nice < target {
			// A thread that ended meanwhile is no error.
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, target)
		}
	}
}

// Niceness is the niceness of every thread of process pid (0: this one),
// by thread id; a thread that ends while it looks is left out.
func Niceness(pid int) (map[int]int, error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/task"
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int, len(tasks))
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if nice, err := threadNice(tid); err == nil {
			out[tid] = nice
		}
	}
	return out, nil
}

// threadNice is thread tid's niceness.
func threadNice(tid int) (int, error) {
	// The raw getpriority system call gives 20 - niceness.
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	return 20 - prio, err
}
