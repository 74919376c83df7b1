//go:build !linux

package extrunner

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// sysProcAttr puts the agent in a process group of its own (killed as
// one). Outside Linux there is no parent-death signal and no cgroup: a
// crash of ext-runner may leave an agent running until its time limit's
// token expiry stops its tool calls, and a child that leaves the group
// (setsid) outlives the kill.
func sysProcAttr(int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

type cgroupTree struct{}

func openCgroupTree(string) (*cgroupTree, error) {
	return nil, errors.New("cgroups are Linux only")
}

func treeName(string) string { return "" }

func (*cgroupTree) create(string) (string, *os.File, error) {
	return "", nil, errors.New("cgroups are Linux only")
}

func (*cgroupTree) tidy() {}

func killCgroup(string) {}

func removeCgroup(string, time.Duration) error { return nil }
