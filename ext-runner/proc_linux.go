package extrunner

import "syscall"

// sysProcAttr puts the agent in a process group of its own (killed as one)
// and has the kernel kill it should this process die first (a crash of
// ext-runner must leave no agent behind); given a cgroup (cgroupFD ≥ 0) it
// starts the agent inside it, so that what leaves the group is still
// found.
func sysProcAttr(cgroupFD int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, cgroupFD
	}
	return a
}
