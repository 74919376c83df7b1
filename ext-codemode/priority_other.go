//go:build !linux

package codemode

import "time"

// engineThread runs entries as they are off Linux: there the engine runs
// at the process's priority.
type engineThread struct{}

// interrupter is the engine as an entry's budget stops it.
type interrupter interface {
	SetEvalTimeout(time.Duration) error
}

// do runs f, an entry into vm, bounded by the clock to left, and returns
// the time it took.
func (e *engineThread) do(spent, left time.Duration, vm interrupter, f func()) time.Duration {
	_ = vm.SetEvalTimeout(left)
	t0 := time.Now()
	f()
	return time.Since(t0)
}

func (e *engineThread) stop() {}
