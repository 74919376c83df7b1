package testbus

import "syscall"

// sysProcAttr puts a child in its own process group, so that Close can
// signal everything it spawned, and kills it if the test process dies
// without running Close.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
