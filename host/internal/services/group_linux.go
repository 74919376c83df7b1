//go:build linux

package services

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procAttrs puts the process in its own group (so a stop reaches a
// wrapper's children too), kills it if the host dies, and, given a cgroup
// (cgroupFD ≥ 0), starts it inside that cgroup (clone3 with
// CLONE_INTO_CGROUP): not even a fork right after exec escapes it.
func procAttrs(cgroupFD int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, cgroupFD
	}
	return a
}

// killGroup signals process group pgid.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// waitExited blocks until pid has exited, without reaping it: until
// cmd.Wait reaps it, neither its pid nor its process group ID can be
// reused, so signalling the group after its leader died stays safe.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// procStat returns pid's parent, process group and start time (clock
// ticks after boot), from /proc/<pid>/stat. A zombie counts as gone.
func procStat(pid int) (ppid, pgid int, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); ppid is field 4, pgrp 5, starttime 22.
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, 0, 0, fmt.Errorf("process %d has exited: %w", pid, os.ErrNotExist)
	}
	ppid, _ = strconv.Atoi(f[1])
	pgid, _ = strconv.Atoi(f[2])
	start, err = strconv.ParseUint(f[19], 10, 64)
	return ppid, pgid, start, err
}

// bootID identifies this boot of the machine: start times and pids of
// another boot mean nothing.
func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// allPIDs lists the processes in /proc.
func allPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	out := make([]int, 0, len(ents))
	for _, d := range ents {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	for _, pid := range allPIDs() {
		if _, g, _, err := procStat(pid); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// holds reports whether dir is the folder of one of t's process cgroups
// (named by [Manager.cgroupName]).
func holds(t *cgroup.Tree, dir string) bool {
	_, _, ok := parseCgroupName(filepath.Base(dir))
	return ok && filepath.Clean(dir) == filepath.Join(t.Dir, filepath.Base(dir))
}
