package extrunner

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// systemDirs are the folders a sandboxed agent sees read-only: programs,
// libraries and the system's configuration, as the host's sandbox of
// users' servers (host/internal/services). Home folders, /root, /tmp,
// /var, /run, /srv, /opt and the host's data folder are not among them.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/nix/store"}

// sandboxArgv wraps command in bubblewrap: its own pid, ipc and uts
// namespaces (and user namespace unless the host runs as root), the
// system folders and readable read-only, an empty /tmp, and dir (the
// session's folder) its only writable place; the network is the host's
// (the agent needs its model's API and the host's /mcp). It dies with
// its parent.
func sandboxArgv(dir, command string, args, readable []string) (string, []string, error) {
	if runtime.GOOS != "linux" {
		return "", nil, errors.New("the sandbox (bubblewrap) is Linux only")
	}
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		return "", nil, errors.New("the profile asks for a sandbox and bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap")
	}
	a := []string{"--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}
	if os.Geteuid() != 0 {
		a = append(a, "--unshare-user")
	}
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
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	// Name resolution: /etc/resolv.conf often points out of /etc.
	if p, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !within(p, "/etc") {
		readable = append(readable, p)
	}
	// The command itself, where the system folders do not hold it.
	inSystem := false
	for _, d := range systemDirs {
		inSystem = inSystem || within(command, d)
	}
	if !inSystem {
		readable = append(readable, command)
	}
	for _, p := range readable {
		if _, err := os.Stat(p); err == nil {
			a = append(a, "--ro-bind", p, p)
		}
	}
	a = append(a, "--bind", dir, dir, "--chdir", dir, "--", command)
	return bw, append(a, args...), nil
}

// within reports whether p is d or inside it.
func within(p, d string) bool {
	return p == d || strings.HasPrefix(p, strings.TrimRight(d, "/")+"/")
}
