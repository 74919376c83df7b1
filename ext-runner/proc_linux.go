package extrunner

import "syscall"

// sysProcAttr puts the agent in a process group of its own (killed as one)
// and has the kernel kill it should this process die first (a crash of
// ext-runner must leave no agent behind).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
