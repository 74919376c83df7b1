//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package secrets

import (
	"context"
	"os"
)

// lockFile does nothing on this platform: writes are serialized within the
// process only, so two processes must not write one store at a time.
func lockFile(ctx context.Context, f *os.File) error { return ctx.Err() }

// unlockFile does nothing on this platform.
func unlockFile(f *os.File) error { return nil }

// syncDir does nothing on this platform, where directories cannot be synced.
func syncDir(dir string) error { return nil }
