//go:build !linux

package extrunner

import "syscall"

// sysProcAttr puts the agent in a process group of its own (killed as
// one). Outside Linux there is no parent-death signal and no cgroup: a
// crash of ext-runner may leave an agent running until its time limit's
// token expiry stops its tool calls, and a child that leaves the group
// (setsid) outlives the kill.
func sysProcAttr(int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
