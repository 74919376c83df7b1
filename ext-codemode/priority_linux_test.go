//go:build linux

package codemode_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	codemode "github.com/agenthost/agenthost/ext-codemode"
	"golang.org/x/sys/unix"
)

// TestScriptRunsAtIdlePriority: a script's JavaScript runs on a thread
// whose policy is SCHED_IDLE (read from the thread itself, by a host
// function the script calls), not the caller's; the caller's thread keeps
// its policy, and the idle thread ends with the run instead of going back
// to Go's pool.
func TestScriptRunsAtIdlePriority(t *testing.T) {
	// Several runs: one may land on the main thread, which the runtime
	// never ends (onIdleThread then moves the run off it).
	for range 4 {
		var (
			n      atomic.Int32
			tid    int
			policy uint32
			err    error
		)
		unset := codemode.SetEngineThreadHook(func() {
			tid = unix.Gettid()
			var a *unix.SchedAttr
			if a, err = unix.SchedGetAttr(0, 0); err == nil {
				policy = a.Policy
			}
		})
		out := codemode.Run(context.Background(), `const r = await tools.t.echo({x: 1}); console.log("after a call"); return r.x`, names, codemode.Limits{}, echo(&n), nil)
		unset()
		if out.Error != nil || string(out.Value) != "1" {
			t.Fatalf("run: %s %+v", out.Value, out.Error)
		}
		if err != nil || policy != unix.SCHED_IDLE {
			t.Errorf("the script's thread %d has policy %d (%v), want SCHED_IDLE (%d)", tid, policy, err, unix.SCHED_IDLE)
		}
		if a, err := unix.SchedGetAttr(0, 0); err != nil || a.Policy == unix.SCHED_IDLE || unix.Gettid() == tid {
			t.Errorf("the caller's thread %d: %+v %v, want its own policy kept", unix.Gettid(), a, err)
		}
		if tid == unix.Getpid() {
			t.Errorf("the script ran on the main thread, which never ends")
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
}
