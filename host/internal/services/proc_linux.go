package services

import (
	"os/exec"
	"syscall"
)

// procAttrs puts the process in its own group (so a stop reaches wrappers'
// children too) and kills it if the host dies.
func procAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
