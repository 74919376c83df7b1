//go:build linux

package codemode

import "time"

// MainThreadHops reports how many entries into the engine were moved off
// the main thread.
func MainThreadHops() int64 { return mainThreadHops.Load() }

// SetNormalShare sets the JavaScript time a run gets at normal priority;
// it returns the function that restores it.
func SetNormalShare(d time.Duration) func() {
	old := normalShare
	normalShare = d
	return func() { normalShare = old }
}
