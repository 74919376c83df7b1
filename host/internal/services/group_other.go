//go:build !linux

package services

import (
	"errors"
	"github.com/agenthost/agenthost/ext/cgroup"
	"syscall"
)

var errLinuxOnly = errors.New("linux only")

func procAttrs(int) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// waitExited is not available: the caller reaps with cmd.Wait and signals
// the group after.
func waitExited(int) error { return errLinuxOnly }

func procStat(int) (ppid, pgid int, start uint64, err error) { return 0, 0, 0, errLinuxOnly }

func bootID() string { return "" }

func groupMembers(int) []int { return nil }

func holds(*cgroup.Tree, string) bool { return false }
