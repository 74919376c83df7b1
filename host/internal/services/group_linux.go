//go:build linux

package services

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

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

// cgroupTree is this manager's folder in the cgroup v2 hierarchy: one
// child cgroup per process, so that everything a process started, even
// what left its process group (setsid, a double fork), is found and
// killed.
type cgroupTree struct {
	dir string // absolute folder of the tree
	rel string // the tree as /proc/<pid>/cgroup names it
}

// openCgroupTree creates (or reopens) the tree named name under the
// host's own cgroup in the cgroup v2 hierarchy (the unified one of a
// hybrid v1 system too). It fails where there is none, or where the
// host's cgroup is not delegated to it.
func openCgroupTree(name string) (*cgroupTree, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	t := &cgroupTree{dir: filepath.Join(mount, own, name), rel: filepath.Join(own, name)}
	if err := os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating cgroup %s: %w", t.dir, err)
	}
	// Being able to create a child is what we need; test it now, so that
	// a read-only or undelegated tree is found at start.
	probe := filepath.Join(t.dir, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating a cgroup in %s: %w", t.dir, err)
	}
	_ = os.Remove(probe)
	return t, nil
}

// tidy removes the tree while it holds no cgroup (it is made again when
// needed), so that a host killed while it ran no process leaves nothing.
func (t *cgroupTree) tidy() { _ = os.Remove(t.dir) }

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 && fields[3] == "/" {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

// ownCgroup returns the host's cgroup in the v2 hierarchy.
func ownCgroup() (string, error) {
	return cgroupOf("self")
}

func cgroupOf(pid string) (string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("the process is in no cgroup v2")
}

// create makes the cgroup of one process and opens it for
// [syscall.SysProcAttr.CgroupFD].
func (t *cgroupTree) create(name string) (string, *os.File, error) {
	dir := filepath.Join(t.dir, name)
	var err error
	// The tree may have just been tidied away (by this host or another on
	// the same folder): make it again.
	for range 3 {
		if err = os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			break
		}
		if err = os.Mkdir(dir, 0o755); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("creating cgroup %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return "", nil, err
	}
	return dir, f, nil
}

// holds reports whether dir is the folder of one of the tree's process
// cgroups (named by [Manager.cgroupName]).
func (t *cgroupTree) holds(dir string) bool {
	_, _, ok := parseCgroupName(filepath.Base(dir))
	return ok && filepath.Clean(dir) == filepath.Join(t.dir, filepath.Base(dir))
}

// contains reports whether pid is in one of the tree's cgroups.
func (t *cgroupTree) contains(pid int) bool {
	cg, err := cgroupOf(strconv.Itoa(pid))
	return err == nil && strings.HasPrefix(cg, t.rel+"/")
}

// signalCgroup signals every process in cgroup dir; SIGKILL goes through
// cgroup.kill where the kernel has it (5.14), which leaves no window for a
// fork to escape.
func signalCgroup(dir string, sig syscall.Signal) {
	if dir == "" {
		return
	}
	if sig == syscall.SIGKILL {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	// Without cgroup.kill, repeat until no process is left (or a bound):
	// a fork between the read and the kill is caught by the next round.
	for range 20 {
		pids := cgroupProcs(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		if sig != syscall.SIGKILL {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// populated reports whether cgroup dir still holds a process.
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return !bytes.Contains(b, []byte("populated 0"))
}

// removeCgroup removes cgroup dir once its last process is gone, waiting
// at most wait for that.
func removeCgroup(dir string, wait time.Duration) error {
	if dir == "" {
		return nil
	}
	deadline := time.Now().Add(wait)
	for populated(dir) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	err := os.Remove(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
