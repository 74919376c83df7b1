//go:build !linux

package services

import (
	"errors"
	"os"
)

// detectSandbox: sandboxes are Linux only (bubblewrap).
func detectSandbox(int) sandbox {
	return sandbox{reason: errors.New("sandboxing service processes needs Linux (bubblewrap)")}
}

func (s sandbox) argv(layout, string, []string) []string { return nil }

func prepareHome(_, home string, _ int) error { return os.MkdirAll(home, 0o700) }
