package services

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/agenthost/agenthost/ext"
)

// SandboxOptions says how processes whose spec asks for a sandbox
// ([ext.ProcessSpec.Sandbox]) are contained.
type SandboxOptions struct {
	// Hide lists folders and files a sandboxed process must never see
	// (the host's data folder, the operator's file), even where they lie
	// inside a folder it is shown: a file there is emptied, a readable
	// path that holds a folder is refused.
	Hide []string
	// UIDFirst and UIDCount are the range of uids given to users, one
	// each, when the host runs as root (default 600000000 and 1000000).
	// Never 0, never the host's, never an existing account.
	UIDFirst, UIDCount int
	// UIDFile keeps each user's uid, so that it is stable across starts
	// (default: none, uids last as long as the manager).
	UIDFile string
	// Home returns the folder (HOME, and the default working directory)
	// of key's sandboxed process; nil means the home given to Connect. It
	// is created, and owned by the user's uid when the host runs as root.
	Home func(Key) string
	// AllowUnsandboxed runs such processes as the host's own user when no
	// sandbox works here (the operator's unsafeSharedUID), instead of
	// refusing them.
	AllowUnsandboxed bool
}

// The ways of sandboxing.
const (
	// sandboxUID: the host is root; each user gets a uid of their own.
	sandboxUID = "uid"
	// sandboxUserNS: an unprivileged host; a user namespace.
	sandboxUserNS = "userns"
)

// sandbox is how this machine contains untrusted processes: bubblewrap
// (bwrap) with a private pid namespace and a mount namespace that shows the
// system folders, the process's own folder and its readable paths only;
// as root, setpriv then drops to the user's uid.
type sandbox struct {
	kind    string // sandboxUID, sandboxUserNS, or "" when none works
	bwrap   string
	setpriv string
	reason  error // why none works
}

// layout is what one sandboxed process sees.
type layout struct {
	home     string   // read-write
	readable []string // read-only
	hide     []string // hidden where inside a shown folder
	dir      string   // working directory
	uid      int      // sandboxUID only
}

// within reports whether p is dir or inside it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// isFile reports whether p is there and is not a folder.
func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// newLayout checks what spec asks a sandboxed process to see: absolute
// readable paths that neither lie in a hidden path nor hold a hidden
// folder (a hidden file inside one is emptied, see argv), and a working
// directory it can see.
func newLayout(spec *ext.ProcessSpec, home string, hide []string) (layout, error) {
	l := layout{home: filepath.Clean(home), hide: hide}
	for _, p := range spec.ReadablePaths {
		if !filepath.IsAbs(p) {
			return layout{}, fmt.Errorf("readable path %q is not absolute: %w", p, ext.ErrInvalidArgument)
		}
		p = filepath.Clean(p)
		// bwrap mounts what a symlink points to: check that too.
		for _, q := range withTarget(p) {
			for _, h := range hide {
				if within(q, h) || (within(h, q) && !isFile(h)) {
					return layout{}, fmt.Errorf("readable path %q would show the host's data folder to a sandboxed process: %w", p, ext.ErrPermission)
				}
			}
		}
		l.readable = append(l.readable, p)
	}
	l.dir = l.home
	if spec.Dir != "" {
		d := filepath.Clean(spec.Dir)
		ok := filepath.IsAbs(d) && within(d, l.home)
		for _, p := range l.readable {
			ok = ok || within(d, p)
		}
		if !ok {
			return layout{}, fmt.Errorf("working directory %q is outside what a sandboxed process sees (its own folder and its readable paths): %w", spec.Dir, ext.ErrInvalidArgument)
		}
		l.dir = d
	}
	return l, nil
}

// withTarget returns p and, when a symlink on its way leads elsewhere, the
// path it resolves to.
func withTarget(p string) []string {
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		return []string{p, r}
	}
	return []string{p}
}

// hiddenPaths makes the folders to hide absolute (a relative one is the
// host's working directory's) and adds where each symlinked one really
// is: that is what a readable path or a system folder would show.
func hiddenPaths(hide []string) []string {
	out := make([]string, 0, len(hide))
	for _, h := range hide {
		if a, err := filepath.Abs(h); err == nil {
			h = a
		}
		out = append(out, withTarget(filepath.Clean(h))...)
	}
	return out
}

// Default uid range for users' sandboxed processes (host as root).
const (
	defaultUIDFirst = 600_000_000
	defaultUIDCount = 1_000_000
)

// uidStore hands out one uid per user from a range and remembers it.
type uidStore struct {
	mu           sync.Mutex
	path         string
	first, count int
	users        map[string]int // nil until loaded
}

type uidFile struct {
	Users map[string]int `json:"users"`
}

// uid returns user's uid, allocating the lowest free one of the range.
func (s *uidStore) uid(name string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == nil {
		s.users = map[string]int{}
		if s.path != "" {
			b, err := os.ReadFile(s.path)
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return 0, fmt.Errorf("reading the sandbox uids: %w", err)
			default:
				var f uidFile
				if err := json.Unmarshal(b, &f); err != nil {
					return 0, fmt.Errorf("reading the sandbox uids %s: %w", s.path, err)
				}
				for u, id := range f.Users {
					s.users[u] = id
				}
			}
		}
	}
	if id, ok := s.users[name]; ok && s.usable(id) {
		return id, nil
	}
	taken := make(map[int]bool, len(s.users))
	for u, id := range s.users {
		if u != name {
			taken[id] = true
		}
	}
	for id := s.first; id < s.first+s.count; id++ {
		if taken[id] || !s.usable(id) {
			continue
		}
		if _, err := user.LookupId(strconv.Itoa(id)); err == nil {
			continue // an account of this machine
		}
		s.users[name] = id
		if err := s.save(); err != nil {
			delete(s.users, name)
			return 0, err
		}
		return id, nil
	}
	return 0, fmt.Errorf("no free uid left in services.sandboxUIDs (%d from %d): %w", s.count, s.first, ext.ErrUnavailable)
}

func (s *uidStore) usable(id int) bool {
	return id > 0 && id != os.Getuid() && id != 65534 && id >= s.first && id < s.first+s.count
}

func (s *uidStore) save() error {
	if s.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(uidFile{Users: s.users}, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving the sandbox uids: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("saving the sandbox uids: %w", err)
	}
	return nil
}
