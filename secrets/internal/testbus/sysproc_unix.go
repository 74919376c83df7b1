//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package testbus

import "syscall"

// sysProcAttr puts a child in its own process group, so that Close can
// signal everything it spawned.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
