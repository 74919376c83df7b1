//go:build linux

package codemode

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// onIdleThread runs f on the calling goroutine locked, for good, to an OS
// thread at the lowest CPU priority: SCHED_IDLE (it runs only when no
// other thread of the machine wants the CPU), or nice 19 where SCHED_IDLE
// is refused. An unprivileged thread cannot raise its priority again, so
// the goroutine never unlocks: the thread ends with it instead of going
// back to Go's pool. The main thread is the exception (the runtime never
// ends it: a goroutine ending locked to it wedges it), so there f runs on
// a goroutine of its own, which the main thread's lock keeps off it.
// Threads the runtime starts while this one is locked are cloned by its
// template thread, not this one, so they do not inherit the priority.
// When both settings are refused f runs at the thread's priority.
func onIdleThread(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			onIdleThread(f)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	tid := unix.Gettid()
	if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
	}
	f()
}
