//go:build linux

package codemode

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// engineThread runs a run's entries into the engine: it bounds each by
// the run's CPU budget, and puts the run's JavaScript at the lowest CPU
// priority once it has computed for normalShare: its thread set to
// SCHED_IDLE (it runs only when no other thread of the machine wants the
// CPU), or nice 19 where SCHED_IDLE is refused.
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
// The budget: at normal priority an entry is charged the time it takes;
// once its thread is at idle priority, the CPU time the thread spends
// (its own clock), not the time it takes: a thread at idle priority on a
// busy machine waits for the CPU, and waiting is not computing (a budget
// on the clock stopped a starved script that had computed a fraction of
// it). The same timer is the budget's watchdog: it fires at the earlier
// of the demotion and the budget's end by the clock; once the thread is
// demoted it reads the thread's clock, interrupts the engine when the
// budget is spent, and otherwise sets itself for what is left. One timer
// and no clock read per entry at normal priority: the timer's wake-up is
// what an inner call pays for (a second timer per entry cost each inner
// call ~15 µs, measured). Where the thread's clock cannot be read, the
// thread at idle priority is charged the time too.
//
// do is called by one goroutine at a time (the run's engine goroutine);
// the timer's function runs on its own and takes mu.
type engineThread struct {
	locked  bool // this goroutine is locked for good to a demoted thread
	mu      sync.Mutex
	timer   *time.Timer // demotes the running entry's thread, watches its budget
	running bool        // an entry runs on thread tid
	tid     int
	demoted bool // the run's JavaScript runs at idle priority from now on
	// The running entry's budget: the run's spend before it, what the
	// entry may spend and the engine to interrupt when it has; and what
	// the entry is charged: by the clock from t0, until onCPU: then mark
	// (its charge by the clock until then) plus its thread's CPU time
	// from cpu0 on.
	spent, left time.Duration
	vm          interrupter
	t0          time.Time
	onCPU       bool
	mark, cpu0  time.Duration
}

// interrupter is the engine as an entry's budget stops it.
type interrupter interface {
	Interrupt()
	SetEvalTimeout(time.Duration) error
}

// mainThreadHops counts the entries moved off the main thread (tests).
var mainThreadHops atomic.Int64

// normalShare is the JavaScript time a run gets at normal priority (a
// variable for the tests: under -race a script that computes little
// takes longer).
var normalShare = 10 * time.Millisecond

// do runs f, an entry into vm, the run having spent spent of its budget
// and left left, and returns what the entry spent (see engineThread).
func (e *engineThread) do(spent, left time.Duration, vm interrupter, f func()) time.Duration {
	tid := e.tid // a locked goroutine's thread is the last entry's
	if !e.locked {
		runtime.LockOSThread()
		if tid = unix.Gettid(); tid == unix.Getpid() {
			mainThreadHops.Add(1)
			var used time.Duration
			done := make(chan struct{})
			go func() {
				defer close(done)
				used = e.do(spent, left, vm, f)
			}()
			<-done
			e.locked = false // the helper's lock ended with it
			runtime.UnlockOSThread()
			return used
		}
	}
	_ = vm.SetEvalTimeout(0) // the timer bounds the entry
	e.mu.Lock()
	e.running, e.tid, e.spent, e.left, e.vm, e.t0, e.onCPU = true, tid, spent, left, vm, time.Now(), false
	unlock := false
	if !e.locked && (e.demoted || spent >= normalShare) {
		e.demoted, e.locked = true, true
		setIdle(tid)
	}
	if e.demoted {
		e.startCPU()
		e.arm(left)
	} else {
		unlock = true
		e.arm(min(normalShare-spent, left))
	}
	e.mu.Unlock()

	f()

	e.mu.Lock()
	e.running = false
	e.timer.Stop()
	used := e.charged()
	demoted := e.demoted
	e.mu.Unlock()
	if unlock {
		if demoted {
			e.locked = true // for good: the thread ends with this goroutine
			return used
		}
		runtime.UnlockOSThread()
	}
	return used
}

// arm sets the timer to fire in d; e.mu is held.
func (e *engineThread) arm(d time.Duration) {
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.tick)
	} else {
		e.timer.Reset(d)
	}
}

// startCPU starts charging the running entry by its thread's CPU time,
// what it was charged by the clock until now kept (by the clock on where
// the thread's clock cannot be read); e.mu is held.
func (e *engineThread) startCPU() {
	cpu, ok := threadCPU(e.tid)
	e.onCPU, e.mark, e.cpu0 = ok, time.Since(e.t0), cpu
}

// charged is what the running entry has spent so far; e.mu is held.
func (e *engineThread) charged() time.Duration {
	if e.onCPU {
		if cpu, ok := threadCPU(e.tid); ok {
			return e.mark + cpu - e.cpu0
		}
	}
	return time.Since(e.t0)
}

// stop ends the timer when the run ends.
func (e *engineThread) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.timer != nil {
		e.timer.Stop()
	}
}

// tick is the timer: it demotes the running entry's thread when its
// normal share is spent, and interrupts the engine when the entry has
// spent what it may; otherwise it sets itself again (see engineThread).
// A tick that fires late, once the next entry runs, acts on that one.
func (e *engineThread) tick() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return
	}
	used := e.charged()
	if used >= e.left {
		e.vm.Interrupt()
		return
	}
	if !e.demoted {
		if e.spent+used < normalShare {
			e.arm(min(normalShare-e.spent-used, e.left-used))
			return
		}
		setIdle(e.tid)
		e.demoted = true
		e.startCPU()
	}
	e.arm(e.left - used)
}

// threadCPU reads the CPU time thread tid (of this process) has spent.
func threadCPU(tid int) (time.Duration, bool) {
	var ts unix.Timespec
	// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of the kernel's
	// posix-timers.h: the thread's CPU clock as clock_gettime reads it.
	if err := unix.ClockGettime(int32(^uint32(tid)<<3|6), &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// setIdle sets thread tid to SCHED_IDLE, or nice 19 where that is
// refused; when both are refused the thread keeps its priority (a script
// still runs, within its limits).
func setIdle(tid int) {
	if unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, 19)
	}
}
