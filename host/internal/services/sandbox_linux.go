//go:build linux

package services

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// systemDirs are the folders a sandboxed process sees read-only: programs,
// libraries and the system's configuration (readable by any local user
// anyway). Home folders, /root, /tmp, /var, /run, /srv, /opt and the
// host's data folder are not among them.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/nix/store"}

// detectSandbox finds bubblewrap (and, as root, setpriv) and runs a
// trivial program in the sandbox they make, so that a kernel or container
// that forbids namespaces is found now, with the reason.
func detectSandbox(probeUID int) sandbox {
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return sandbox{reason: errors.New("bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap")}
	}
	s := sandbox{bwrap: bw, kind: sandboxUserNS}
	if os.Geteuid() == 0 {
		sp, err := exec.LookPath("setpriv")
		if err != nil {
			return sandbox{reason: errors.New("setpriv (util-linux) is not installed: the host runs as root and needs it to give each user's processes their own uid")}
		}
		s.kind, s.setpriv = sandboxUID, sp
	}
	home, err := os.MkdirTemp("", "agenthost-sandbox-probe-")
	if err != nil {
		return sandbox{reason: fmt.Errorf("probing the sandbox: %w", err)}
	}
	defer os.RemoveAll(home)
	if s.kind == sandboxUID {
		if err := os.Chown(home, probeUID, probeUID); err != nil {
			return sandbox{reason: fmt.Errorf("probing the sandbox: %w", err)}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	argv := s.argv(layout{home: home, dir: home, uid: probeUID}, "true", nil)
	cmd := exec.CommandContext(ctx, bw, argv...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return sandbox{reason: fmt.Errorf("bwrap cannot make a sandbox here (%v): %s", err, strings.TrimSpace(string(out)))}
	}
	return s
}

// argv is bwrap's command line that runs command in l.
func (s sandbox) argv(l layout, command string, args []string) []string {
	a := []string{"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}
	if s.kind == sandboxUserNS {
		a = append(a, "--unshare-user")
	}
	var bound []string
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
			bound = append(bound, d)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	tmpfs := []string{"/tmp"}
	for _, h := range l.hide {
		for _, b := range bound {
			if !within(h, b) {
				continue
			}
			if fi, err := os.Stat(h); err == nil && !fi.IsDir() {
				a = append(a, "--ro-bind", "/dev/null", h) // a file: emptied
			} else {
				a = append(a, "--tmpfs", h)
				tmpfs = append(tmpfs, h)
			}
			break
		}
	}
	// bwrap makes the folders leading to a mount point owner-only: make
	// them traversable, where they are ours to make (not inside a
	// read-only system folder).
	parents := func(p string) {
		var chain []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			d := chain[i]
			inBound, inTmpfs := false, false
			for _, b := range bound {
				inBound = inBound || within(d, b)
			}
			for _, t := range tmpfs {
				inTmpfs = inTmpfs || (within(d, t) && d != t)
			}
			if !inBound || inTmpfs {
				a = append(a, "--perms", "0755", "--dir", d)
			}
		}
	}
	readable := l.readable
	// Name resolution: /etc/resolv.conf often points out of /etc.
	if p, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !within(p, "/etc") {
		readable = append(readable, p)
	}
	for _, p := range readable {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		parents(p)
		a = append(a, "--ro-bind", p, p)
		// A hidden file inside (newLayout refused hidden folders there),
		// where p shows it: at p itself when p is a symlink to its folder.
		for _, h := range l.hide {
			for _, q := range withTarget(p) {
				if h != q && within(h, q) && isFile(h) {
					rel, _ := filepath.Rel(q, h)
					a = append(a, "--ro-bind", "/dev/null", filepath.Join(p, rel))
					break
				}
			}
		}
	}
	parents(l.home)
	a = append(a, "--bind", l.home, l.home, "--chdir", l.dir, "--")
	if s.kind == sandboxUID {
		id := strconv.Itoa(l.uid)
		a = append(a, s.setpriv, "--reuid="+id, "--regid="+id, "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	}
	return append(append(a, command), args...)
}

// prepareHome creates a sandboxed process's folder, owned by uid in
// sandboxUID mode (everything in it too: a uid that changed, or files the
// host made, must not lock the process out of its own folder).
func prepareHome(kind, home string, uid int) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	if kind != sandboxUID {
		return nil
	}
	fi, err := os.Stat(home)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
		return nil
	}
	return filepath.WalkDir(home, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}
