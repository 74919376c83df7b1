package cgroup

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
)

// Tree is a folder in the cgroup v2 hierarchy under the caller's own
// cgroup, holding one child cgroup per contained process.
type Tree struct {
	// Dir is the tree's absolute folder.
	Dir string
	rel string // the tree as /proc/<pid>/cgroup names it
}

// Open creates (or reopens) the tree named name under this process's
// cgroup in the cgroup v2 hierarchy (the unified one of a hybrid v1
// system too). It fails where there is none, or where this process's
// cgroup is not delegated to it: it creates and removes a probe cgroup,
// so that a read-only or undelegated tree is found now, not at the first
// process.
func Open(name string) (*Tree, error) {
	mount, err := Mount()
	if err != nil {
		return nil, err
	}
	own, err := Of("self")
	if err != nil {
		return nil, err
	}
	t := &Tree{Dir: filepath.Join(mount, own, name), rel: filepath.Join(own, name)}
	if err := os.Mkdir(t.Dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating cgroup %s: %w", t.Dir, err)
	}
	probe := filepath.Join(t.Dir, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating a cgroup in %s: %w", t.Dir, err)
	}
	_ = os.Remove(probe)
	return t, nil
}

// Create makes the child cgroup name and opens it for
// [syscall.SysProcAttr.CgroupFD]; the caller closes the file once the
// process started. The tree is made again if it was just tidied away.
func (t *Tree) Create(name string) (string, *os.File, error) {
	dir := filepath.Join(t.Dir, name)
	var err error
	for range 3 {
		if err = os.Mkdir(t.Dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
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
		return "", nil, fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return dir, f, nil
}

// Children returns the folders of the tree's child cgroups.
func (t *Tree) Children() []string {
	ents, _ := os.ReadDir(t.Dir)
	var out []string
	for _, d := range ents {
		if d.IsDir() {
			out = append(out, filepath.Join(t.Dir, d.Name()))
		}
	}
	return out
}

// Contains reports whether pid is in one of the tree's cgroups.
func (t *Tree) Contains(pid int) bool {
	cg, err := Of(strconv.Itoa(pid))
	return err == nil && strings.HasPrefix(cg, t.rel+"/")
}

// Tidy removes the tree while it holds no cgroup (it is made again when
// needed), so that an owner that stops while it contains nothing leaves
// nothing; it fails quietly while a cgroup is left.
func (t *Tree) Tidy() { _ = os.Remove(t.Dir) }

// Mount finds where the cgroup v2 hierarchy is mounted.
func Mount() (string, error) {
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

// Of returns the cgroup v2 of process pid ("self" for this one).
func Of(pid string) (string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("process %s is in no cgroup v2", pid)
}

// Signal signals every process in cgroup dir. SIGKILL goes through
// cgroup.kill where the kernel has it (5.14), which leaves no window for
// a fork to escape; without it, rounds over cgroup.procs until none is
// left (a fork between a read and the kills is caught by the next round).
func Signal(dir string, sig syscall.Signal) {
	if dir == "" {
		return
	}
	if sig == syscall.SIGKILL {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	for range 50 {
		pids := Procs(dir)
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

// Kill is Signal(dir, SIGKILL).
func Kill(dir string) { Signal(dir, syscall.SIGKILL) }

// Procs returns the processes in cgroup dir.
func Procs(dir string) []int {
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

// Populated reports whether cgroup dir still holds a process.
func Populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return !bytes.Contains(b, []byte("populated 0"))
}

// Remove removes cgroup dir once its last process is gone (killed
// processes leave it as the kernel reaps them), waiting at most wait.
// A cgroup already gone is not an error.
func Remove(dir string, wait time.Duration) error {
	if dir == "" {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
