//go:build !linux

package codemode

import "time"

// engineThread runs entries as they are off Linux: there the engine runs
// at the process's priority.
type engineThread struct{}

func (e *engineThread) do(spent time.Duration, f func()) { f() }

func (e *engineThread) stop() {}
