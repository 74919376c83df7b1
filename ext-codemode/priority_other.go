//go:build !linux

package codemode

// onIdleThread runs f as it is off Linux: there the engine runs at the
// process's priority.
func onIdleThread(f func()) { f() }
