//go:build linux

package codemode

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// engineThread puts a run's JavaScript at the lowest CPU priority once it
// has computed for normalShare: its thread set to SCHED_IDLE (it runs only
// when no other thread of the machine wants the CPU), or nice 19 where
// SCHED_IDLE is refused.
//
// Each entry into the engine runs with the goroutine locked to its
// thread, and a timer set to the run's normal share left; when the timer
// fires during the entry the thread is demoted and the goroutine never
// unlocks again, so the thread ends with it instead of going back to Go's
// pool at that priority (an unprivileged thread cannot raise it again),
// and the run's later entries stay on it. An entry that ends first
// unlocks: a run that mostly waits on its tool calls never pays for a
// locked thread (woken from another thread on every inner call: ~30 µs a
// call, measured). The main thread is never demoted (the runtime never
// ends it: a goroutine ending locked to it wedges it): an entry there
// runs on a goroutine of its own, which the main thread's lock keeps off
// it (agenthost-ext-codemode's main goroutine keeps the main thread, so
// none lands there). Threads the runtime starts are cloned by its template thread, not a
// locked one, so they never inherit the priority.
//
// do is called by one goroutine at a time (the run's engine goroutine);
// the timer's demote runs on its own and takes mu.
type engineThread struct {
	locked  bool // this goroutine is locked for good to a demoted thread
	mu      sync.Mutex
	timer   *time.Timer
	running bool // an entry runs on thread tid
	tid     int
	demoted bool // the run's JavaScript runs at idle priority from now on
}

// mainThreadHops counts the entries moved off the main thread (tests).
var mainThreadHops atomic.Int64

// normalShare is the JavaScript time a run gets at normal priority (a
// variable for the tests: under -race a script that computes little
// takes longer).
var normalShare = 10 * time.Millisecond

// do runs f, an entry into the engine, the run having spent spent in it.
func (e *engineThread) do(spent time.Duration, f func()) {
	if e.locked {
		f()
		return
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	if tid == unix.Getpid() {
		mainThreadHops.Add(1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.do(spent, f)
		}()
		<-done
		e.locked = false // the helper's lock ended with it
		runtime.UnlockOSThread()
		return
	}
	e.mu.Lock()
	if e.demoted || spent >= normalShare {
		e.demoted = true
		e.mu.Unlock()
		setIdle(tid)
		e.locked = true
		f()
		return
	}
	e.running, e.tid = true, tid
	if e.timer == nil {
		e.timer = time.AfterFunc(normalShare-spent, e.demote)
	} else {
		e.timer.Reset(normalShare - spent)
	}
	e.mu.Unlock()

	f()

	e.mu.Lock()
	e.running = false
	demoted := e.demoted
	e.mu.Unlock()
	if demoted {
		e.locked = true // for good: the thread ends with this goroutine
		return
	}
	e.timer.Stop()
	runtime.UnlockOSThread()
}

// demote sets the running entry's thread to idle priority (the timer).
func (e *engineThread) demote() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running && !e.demoted {
		setIdle(e.tid)
		e.demoted = true
	}
}

// stop ends the timer when the run ends.
func (e *engineThread) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.timer != nil {
		e.timer.Stop()
	}
}

// setIdle sets thread tid to SCHED_IDLE, or nice 19 where that is
// refused; when both are refused the thread keeps its priority (a script
// still runs, within its limits).
func setIdle(tid int) {
	if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
	}
}
