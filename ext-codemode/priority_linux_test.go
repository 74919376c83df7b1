//go:build linux

package codemode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	codemode "github.com/agenthost/agenthost/ext-codemode"
	"golang.org/x/sys/unix"
)

// TestScriptRunsAtIdlePriority: once a script has computed for its
// normal share (10 ms), its JavaScript runs on a thread whose policy is
// SCHED_IDLE (read from the thread itself, by a host function the script
// calls), not the caller's; that thread ends with the run instead of
// going back to Go's pool. A script that only waits on its calls keeps
// normal priority (a locked thread costs every inner call a wake-up).
func TestScriptRunsAtIdlePriority(t *testing.T) {
	var (
		n      atomic.Int32
		tid    int
		policy uint32
		err    error
	)
	defer codemode.SetEngineThreadHook(func() {
		tid = unix.Gettid()
		var a *unix.SchedAttr
		if a, err = unix.SchedGetAttr(0, 0); err == nil {
			policy = a.Policy
		}
	})()
	// Several runs: one may land on the main thread, which the runtime
	// never ends (the entry then moves off it).
	for range 3 {
		out := codemode.Run(context.Background(), `const r = await tools.t.echo({x: 1});
for (let i = 0; i < 25; i++) { const t = Date.now(); while (Date.now() - t < 20) {} console.log(i); }
return r.x`, names, codemode.Limits{}, echo(&n), nil)
		if out.Error != nil || string(out.Value) != "1" {
			t.Fatalf("run: %s %+v", out.Value, out.Error)
		}
		if err != nil || policy != unix.SCHED_IDLE {
			t.Errorf("the script's thread %d has policy %d (%v) after 500 ms of JavaScript, want SCHED_IDLE (%d)", tid, policy, err, unix.SCHED_IDLE)
		}
		if a, err := unix.SchedGetAttr(0, 0); err != nil || a.Policy == unix.SCHED_IDLE || unix.Gettid() == tid {
			t.Errorf("the caller's thread %d: %+v %v, want its own policy kept", unix.Gettid(), a, err)
		}
		if tid == unix.Getpid() {
			t.Errorf("the script was demoted on the main thread, which never ends")
		}
		// The thread exits once the engine's goroutine has ended (a
		// liveness wait, not a timing: it fails only if the thread never
		// goes).
		task := fmt.Sprintf("/proc/self/task/%d", tid)
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(task); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the idle thread %d outlived its run (back in Go's pool)", tid)
			}
		}
	}
	// No thread of this process stays at idle priority once its run has
	// ended, this test's or earlier ones' (TestRunErrors' endless loops).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		idle := idleThreads(t)
		if len(idle) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v stay at idle priority after their runs", idle)
		}
	}
	// A script within its normal share (widened here: under -race even
	// one that computes little can pass 10 ms) keeps normal priority.
	defer codemode.SetNormalShare(time.Minute)()
	out := codemode.Run(context.Background(), `const r = await tools.t.echo({x: 1}); console.log(r.x); return r.x`, names, codemode.Limits{}, echo(&n), nil)
	if out.Error != nil || err != nil || policy == unix.SCHED_IDLE {
		t.Errorf("a script within its normal share: %+v, its thread's policy %d (%v), want normal", out.Error, policy, err)
	}
}

// TestEntriesLeaveTheMainThread: in a process whose main thread runs
// goroutines (a program that does not keep it, unlike
// agenthost-ext-codemode), entries that land there move off it, and
// scripts are still demoted on other threads only, which end with their
// run (TestScriptRunsAtIdlePriority, run again in a child process whose
// main thread is free).
func TestEntriesLeaveTheMainThread(t *testing.T) {
	if os.Getenv(mainThreadFree) != "" {
		var n atomic.Int32
		for i := 0; codemode.MainThreadHops() == 0; i++ {
			if i == 2000 {
				t.Fatal("no entry landed on the main thread in 2,000 runs")
			}
			codemode.Run(context.Background(), `await tools.t.echo({}); return 1`, names, codemode.Limits{}, echo(&n), nil)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^(TestScriptRunsAtIdlePriority|TestEntriesLeaveTheMainThread)$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), mainThreadFree+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestScriptRunsAtIdlePriority") || !strings.Contains(string(out), "--- PASS: TestEntriesLeaveTheMainThread") {
		t.Fatalf("the child with a free main thread: %v\n%s", err, out)
	}
}

// idleThreads lists this process's threads whose policy is SCHED_IDLE.
func idleThreads(t *testing.T) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var idle []int
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if a, err := unix.SchedGetAttr(tid, 0); err == nil && a.Policy == unix.SCHED_IDLE {
			idle = append(idle, tid)
		}
	}
	return idle
}

// TestStarvedScriptIsNotCharged: a script at idle priority on a machine
// whose CPUs are all busy waits for them, and waiting is not computing:
// its cpuSeconds count the CPU its thread got, not the time it waited.
// The script spins for 400 ms by the clock while a busy loop per CPU runs
// at nice 19: it gets a sixth of a CPU in that time, well under its 250 ms
// budget, and must finish (it was refused, "computed longer than
// 250ms", when the budget counted the time spent in the engine).
func TestStarvedScriptIsNotCharged(t *testing.T) {
	var hogs []*exec.Cmd
	for range runtime.NumCPU() {
		// At nice 19: a SCHED_IDLE thread still gets only a sixth of a
		// CPU beside one, and the tests of other packages running
		// meanwhile keep theirs.
		c := exec.Command("nice", "-n", "19", "sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, c)
	}
	defer func() {
		for _, c := range hogs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	var n atomic.Int32
	start := time.Now()
	out := codemode.Run(context.Background(), `const end = Date.now() + 400; while (Date.now() < end) {}
return 1`, names, codemode.Limits{CPU: 250 * time.Millisecond, WallClock: 60 * time.Second}, echo(&n), nil)
	if out.Error != nil || string(out.Value) != "1" {
		t.Fatalf("the starved script, after %v: %s %+v, want 1 (its waiting is not its computing)", time.Since(start), out.Value, out.Error)
	}
}
