//go:build !linux

package services

import (
	"errors"
	"os"
	"syscall"
	"time"
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

type cgroupTree struct{ dir string }

func openCgroupTree(string) (*cgroupTree, error) { return nil, errors.New("cgroups are Linux only") }

func (*cgroupTree) create(string) (string, *os.File, error) { return "", nil, errLinuxOnly }

func (*cgroupTree) contains(int) bool { return false }

func (*cgroupTree) holds(string) bool { return false }

func (*cgroupTree) tidy() {}

func signalCgroup(string, syscall.Signal) {}

func removeCgroup(string, time.Duration) error { return nil }

func populated(string) bool { return false }
