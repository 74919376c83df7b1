//go:build linux

package codemode

// MainThreadHops reports how many entries into the engine were moved off
// the main thread.
func MainThreadHops() int64 { return mainThreadHops.Load() }
