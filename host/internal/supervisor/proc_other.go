//go:build !linux

package supervisor

import (
	"os"
	"syscall"
)

func childAttrs() *syscall.SysProcAttr { return nil }

func execPath(f *os.File) string { return f.Name() }
