//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

// Package testbus starts a private D-Bus session bus with gnome-keyring for
// tests. On this platform there is no D-Bus Secret Service: Start always
// returns ErrMissing.
package testbus

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrMissing reports that the programs testbus needs are not available.
var ErrMissing = errors.New("testbus: required program not installed")

// MarkerEnv is the environment variable that marks testbus processes.
const MarkerEnv = "AGENTHOST_TESTBUS_MARKER"

// Options say what to start.
type Options struct {
	Keyring  bool
	Password string
}

// Bus is a running private session bus; never created on this platform.
type Bus struct{ Address string }

// Start returns ErrMissing: there is no D-Bus session bus on this platform.
func Start(Options) (*Bus, error) {
	return nil, fmt.Errorf("%w: no D-Bus Secret Service on %s", ErrMissing, runtime.GOOS)
}

// Close does nothing.
func (b *Bus) Close() error { return nil }

// Marker returns "".
func (b *Bus) Marker() string { return "" }

// Marked returns nil.
func Marked(string) []int { return nil }
