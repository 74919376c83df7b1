package extrunner

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupTree is the runner's folder in the cgroup v2 hierarchy, under
// ext-runner's own cgroup: one child cgroup per agent session, so that
// everything the agent started, even what left its process group (setsid,
// a double fork), is found and killed. The host's users' servers are
// contained the same way (host/internal/services).
type cgroupTree struct{ dir string }

// openCgroupTree creates (or reopens) the tree named name under this
// process's cgroup, and kills and removes the session cgroups a crash of
// a previous ext-runner (of the same host: name says which) left
// there. It fails where there is no cgroup v2 hierarchy or where this
// process's cgroup is not delegated to it.
func openCgroupTree(name string) (*cgroupTree, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	t := &cgroupTree{dir: filepath.Join(mount, own, name)}
	if err := os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("creating cgroup %s: %w", t.dir, err)
	}
	ents, _ := os.ReadDir(t.dir)
	for _, d := range ents {
		if d.IsDir() {
			left := filepath.Join(t.dir, d.Name())
			killCgroup(left)
			_ = removeCgroup(left, time.Second)
		}
	}
	return t, nil
}

// treeName names the runner's cgroup tree after its host (its public
// URL), so that two hosts in one cgroup never touch each other's agents.
func treeName(host string) string {
	h := sha256.Sum256([]byte(host))
	return "agenthost-runner-" + hex.EncodeToString(h[:6])
}

// create makes the cgroup of one session and opens it for
// [syscall.SysProcAttr.CgroupFD] (the agent starts inside it: clone3 with
// CLONE_INTO_CGROUP, no window for a fork to escape).
func (t *cgroupTree) create(name string) (string, *os.File, error) {
	if err := os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, fmt.Errorf("creating cgroup %s: %w", t.dir, err)
	}
	dir, err := os.MkdirTemp(t.dir, name+"-")
	if err != nil {
		return "", nil, fmt.Errorf("creating a session cgroup in %s: %w", t.dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return "", nil, fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return dir, f, nil
}

// tidy removes the tree once it holds no cgroup (it is made again when
// needed).
func (t *cgroupTree) tidy() { _ = os.Remove(t.dir) }

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted (the
// unified one of a hybrid v1 system too).
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

// ownCgroup returns this process's cgroup in the v2 hierarchy.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("ext-runner is in no cgroup v2")
}

// killCgroup kills every process in cgroup dir: through cgroup.kill where
// the kernel has it (5.14), else by rounds over cgroup.procs (a fork
// between a read and the kills is caught by the next round).
func killCgroup(dir string) {
	if dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	for range 50 {
		pids := cgroupProcs(dir)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
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

// removeCgroup removes cgroup dir once its last process is gone (killed
// processes leave it as the kernel reaps them), waiting at most wait.
func removeCgroup(dir string, wait time.Duration) error {
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
		time.Sleep(5 * time.Millisecond)
	}
}
