package services

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/repeatlog"
)

// Key names one service process.
type Key struct {
	Extension string
	Service   string
	User      string
}

func (k Key) String() string { return k.Extension + "/" + k.Service + " for " + k.User }

// Options bounds the processes. Zero values take the defaults.
type Options struct {
	// Idle is how long a process with no handle lives (default 10 min).
	Idle time.Duration
	// Max caps running processes (default 256).
	Max int
	// ConnectWait bounds how long a connect waits for a slot (default 10 s).
	ConnectWait time.Duration
	// Grace is how long each stop step waits (stdin close, then SIGTERM)
	// before the next (default 2 s).
	Grace time.Duration
	// Logger receives each process's stderr and lifecycle events.
	Logger *slog.Logger
	// RunDir, when set, holds a record (pidfile) of each running process
	// group and cgroup: New kills what a killed host left there.
	RunDir string
	// CgroupName names the manager's cgroup tree (one per data folder);
	// empty means no cgroups, process groups only.
	CgroupName string
	// Sandbox says how untrusted processes are contained.
	Sandbox SandboxOptions
}

// Starter returns how to start a process; it is called only when none runs.
type Starter func(ctx context.Context) (*ext.ProcessSpec, error)

// Manager runs the processes.
type Manager struct {
	opts   Options
	logger *slog.Logger
	// exits collapses the warnings of processes that exit on their own
	// (the same service failing for many users at every retry).
	exits *repeatlog.Log

	mu      sync.Mutex
	procs   map[Key]*proc      // shared processes, reused by key
	single  map[*proc]struct{} // one-session processes
	pending int                // processes being started, counted against Max
	slot    chan struct{}      // closed and replaced whenever a slot may have freed
	closed  bool
	seq     uint64
	cgSeq   uint64

	self      self
	cg        *cgroup.Tree // nil: process groups only
	uids      *uidStore
	sbOnce    sync.Once
	sb        sandbox
	warnShare sync.Once

	wg sync.WaitGroup
}

// New returns a Manager.
func New(opts Options) *Manager {
	if opts.Idle <= 0 {
		opts.Idle = 10 * time.Minute
	}
	if opts.Max <= 0 {
		opts.Max = 256
	}
	if opts.ConnectWait <= 0 {
		opts.ConnectWait = 10 * time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	opts.Sandbox.Hide = hiddenPaths(opts.Sandbox.Hide)
	if opts.Sandbox.UIDCount <= 0 {
		opts.Sandbox.UIDFirst, opts.Sandbox.UIDCount = defaultUIDFirst, defaultUIDCount
	}
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := &Manager{opts: opts, logger: l, procs: map[Key]*proc{}, single: map[*proc]struct{}{}, slot: make(chan struct{}),
		exits: repeatlog.New(l, 0),
		self:  currentProcess(),
		uids:  &uidStore{path: opts.Sandbox.UIDFile, first: opts.Sandbox.UIDFirst, count: opts.Sandbox.UIDCount}}
	if opts.CgroupName != "" {
		cg, err := cgroup.Open(opts.CgroupName)
		if err != nil {
			l.Info("service processes run without a cgroup: a stop reaches their process group only (a grandchild that calls setsid escapes it)", "reason", err)
		} else {
			m.cg = cg
		}
	}
	if opts.RunDir != "" {
		if err := os.MkdirAll(opts.RunDir, 0o700); err != nil {
			l.Warn("cannot keep records of service processes", "dir", opts.RunDir, "error", err)
			m.opts.RunDir = ""
		}
	}
	if n := m.reap(); n > 0 {
		l.Warn("reaped service processes left by a previous host that was killed", "groups", n)
	}
	if m.cg != nil {
		m.cg.Tidy()
	}
	return m
}

// Sandboxing reports how untrusted processes are contained here: "uid"
// (the host is root: bubblewrap, and a uid per user), "userns"
// (bubblewrap in a user namespace), or "" with the reason none works. The
// first call probes (once).
func (m *Manager) Sandboxing() (string, error) {
	s := m.sandbox()
	return s.kind, s.reason
}

func (m *Manager) sandbox() sandbox {
	m.sbOnce.Do(func() {
		m.sb = detectSandbox(m.opts.Sandbox.UIDFirst)
		if m.sb.kind != "" {
			m.logger.Info("untrusted service processes are sandboxed", "sandbox", m.sb.kind, "bwrap", m.sb.bwrap)
		} else {
			m.logger.Warn("untrusted service processes cannot be sandboxed here", "reason", m.sb.reason)
		}
	})
	return m.sb
}

// Owns reports whether pid is one of the service processes or descends
// from one: it is in their cgroup tree, in one of their process groups, or
// one of its ancestors is one of them. A pid that cannot be examined (gone,
// a zombie) counts as theirs: the process that connected may have exited
// at once, leaving the connection to a child. The control socket refuses
// such peers.
func (m *Manager) Owns(pid int) bool {
	if pid <= 0 || runtime.GOOS != "linux" { // no /proc to examine
		return false
	}
	if m.cg != nil && m.cg.Contains(pid) {
		return true
	}
	if _, _, _, err := procStat(pid); err != nil {
		return true
	}
	m.mu.Lock()
	ours := make(map[int]bool, m.runningLocked())
	for _, p := range m.procs {
		ours[p.pgid] = true
	}
	for p := range m.single {
		ours[p.pgid] = true
	}
	m.mu.Unlock()
	if len(ours) == 0 {
		return false
	}
	for range 64 {
		ppid, pgid, _, err := procStat(pid)
		if err != nil {
			return true // an ancestor that exited meanwhile: cannot tell
		}
		if ours[pid] || ours[pgid] {
			return true
		}
		if ppid <= 1 || ppid == m.self.pid {
			return false
		}
		pid = ppid
	}
	return false
}

// proc is one running process.
type proc struct {
	m      *Manager
	key    Key
	cmd    *exec.Cmd
	pgid   int
	stdin  *os.File // write end, host side
	stdout *os.File // read end, host side
	stderr *os.File // read end, drained
	cgroup string   // its cgroup, "" without
	record string   // its pidfile, "" without
	tail   *ext.StderrTail
	// drained is closed when its stderr has been read to the end (or for
	// drainAfterExit past its exit).
	drained chan struct{}
	exited  chan struct{}
	// exit says how it ended; set by wait before exited closes.
	exit *ext.ServiceExit
	// oneSession processes serve one handle and stop on its release.
	oneSession bool

	// guarded by m.mu
	waiting bool // a wait goroutine reaps it
	// guarded by m.mu
	refs     int
	lastUsed uint64
	idle     *time.Timer
	stopping bool
}

// Running returns how many processes run.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked()
}

func (m *Manager) runningLocked() int { return len(m.procs) + len(m.single) }

// registeredLocked reports whether p is still one of the manager's.
func (m *Manager) registeredLocked(p *proc) bool {
	if p.oneSession {
		_, ok := m.single[p]
		return ok
	}
	return m.procs[p.key] == p
}

func (m *Manager) unregisterLocked(p *proc) {
	if p.oneSession {
		delete(m.single, p)
	} else if m.procs[p.key] == p {
		delete(m.procs, p.key)
	}
}

// PIDs returns the pids of the running processes, for status pages and
// tests.
func (m *Manager) PIDs() map[Key]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[Key]int, len(m.procs))
	for k, p := range m.procs {
		out[k] = p.cmd.Process.Pid
	}
	for p := range m.single {
		k := p.key
		k.Service += "#" + fmt.Sprint(p.cmd.Process.Pid)
		out[k] = p.cmd.Process.Pid
	}
	return out
}

// ErrBusy is returned when every process slot stays busy for ConnectWait.
// It matches [ext.ErrBusy]: the extension hears that it may try again
// once a slot frees ([Manager.Freed]).
var ErrBusy = ext.Mark(errors.New("all service process slots are busy"), ext.ErrBusy)

// Connect returns a handle to key's process, starting it with start and
// home (its HOME and default working directory) when none runs.
func (m *Manager) Connect(ctx context.Context, key Key, home string, start Starter) (*Handle, error) {
	deadline := time.Now().Add(m.opts.ConnectWait)
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, fmt.Errorf("service manager is closed: %w", ext.ErrUnavailable)
		}
		if p, ok := m.procs[key]; ok && !p.stopping {
			h, err := m.handleLocked(p)
			m.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("connecting to %s: %w", key, err)
			}
			return h, nil
		}
		if m.runningLocked()+m.pending < m.opts.Max {
			m.pending++
			m.mu.Unlock()
			p, err := m.start(ctx, key, home, start)
			m.mu.Lock()
			m.pending--
			if err != nil {
				m.signalLocked()
				m.mu.Unlock()
				return nil, err
			}
			return m.register(key, p)
		}
		// Full: stop the least recently used idle process, or wait (also
		// while another connect's eviction is still underway).
		victim := m.lruIdleLocked()
		if victim != nil && !m.stoppingLocked() {
			victim.stopping = true
			m.mu.Unlock()
			m.logger.Info("stopping idle service process to make room", "service", victim.key.String(), "max", m.opts.Max)
			victim.stop()
			continue
		}
		wait := m.slot
		m.mu.Unlock()
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return nil, fmt.Errorf("starting %s: %w: %d processes run and none is idle (services.maxProcesses); try again later", key, ErrBusy, m.opts.Max)
		}
		t := time.NewTimer(remaining)
		select {
		case <-wait:
			t.Stop()
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// register makes p, just started by start, one of the manager's (or
// stops it, when Close began meanwhile or another connect started key's
// first) and returns a handle to key's process. It is called with m.mu
// held and unlocks it; it ends the start's count in m.wg once p is
// registered or stopped.
func (m *Manager) register(key Key, p *proc) (*Handle, error) {
	defer m.wg.Done()
	if m.closed {
		m.mu.Unlock()
		p.stop()
		return nil, fmt.Errorf("service manager is closed: %w", ext.ErrUnavailable)
	}
	if other, ok := m.procs[key]; ok && !other.stopping && !p.oneSession {
		// Lost a race with another connect for the same key.
		h, err := m.handleLocked(other)
		m.mu.Unlock()
		p.stop()
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", key, err)
		}
		return h, nil
	}
	// The handle first: a process whose handle cannot get its own copies
	// of the pipes (descriptors exhausted) would be registered with no
	// reference and nothing to stop it until an eviction or Close. It is
	// never registered, and is stopped now.
	h, err := m.handleLocked(p)
	if err != nil {
		m.mu.Unlock()
		p.stop()
		m.mu.Lock()
		m.signalLocked() // its slot, counted as pending until now, is free
		m.mu.Unlock()
		m.logger.Warn("stopped a service process whose handle could not be made", "service", key.String(), "error", err)
		return nil, fmt.Errorf("starting %s: %w", key, err)
	}
	if p.oneSession {
		m.single[p] = struct{}{}
	} else {
		m.procs[key] = p
	}
	m.wg.Add(1)
	p.waiting = true
	go p.wait()
	m.mu.Unlock()
	return h, nil
}

// Freed returns a channel closed when a slot may have freed: a process
// exited or was stopped, one went idle (it may be stopped to make room),
// a start failed. Call it again for the next.
func (m *Manager) Freed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slot
}

// Available returns how many processes could start now: the free slots
// and the idle processes that a connect would stop to make room.
func (m *Manager) Available() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.opts.Max - m.runningLocked() - m.pending
	for _, p := range m.procs {
		if p.refs == 0 && !p.stopping {
			n++
		}
	}
	return max(n, 0)
}

func (m *Manager) signalLocked() {
	close(m.slot)
	m.slot = make(chan struct{})
}

// stoppingLocked reports whether a process is being stopped: its slot
// frees soon.
func (m *Manager) stoppingLocked() bool {
	for _, p := range m.procs {
		if p.stopping {
			return true
		}
	}
	for p := range m.single {
		if p.stopping {
			return true
		}
	}
	return false
}

func (m *Manager) lruIdleLocked() *proc {
	var victim *proc
	for _, p := range m.procs {
		if p.refs == 0 && !p.stopping && (victim == nil || p.lastUsed < victim.lastUsed) {
			victim = p
		}
	}
	return victim
}

// handleLocked takes a reference on p and returns a handle with its own
// duplicates of the pipes, so closing them never touches other handles.
func (m *Manager) handleLocked(p *proc) (*Handle, error) {
	stdin, err := dupFile(p.stdin, "service-stdin")
	if err != nil {
		return nil, fmt.Errorf("duplicating its stdin: %w", err)
	}
	stdout, err := dupFile(p.stdout, "service-stdout")
	if err != nil {
		_ = stdin.Close()
		return nil, fmt.Errorf("duplicating its stdout: %w", err)
	}
	p.refs++
	m.seq++
	p.lastUsed = m.seq
	if p.idle != nil {
		p.idle.Stop()
		p.idle = nil
	}
	return &Handle{p: p, stdin: stdin, stdout: stdout}, nil
}

// dupFD is the dup step of [dupFile]; a test makes it fail as a process
// out of descriptors does (EMFILE).
var dupFD = syscall.Dup

// dupFile duplicates f's descriptor without f.Fd(), which would switch the
// shared file description to blocking mode and make reads uninterruptible
// by Close. The duplicate stays non-blocking, so os.NewFile makes it
// pollable.
func dupFile(f *os.File, name string) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var (
		nfd  int
		derr error
	)
	if err := rc.Control(func(fd uintptr) { nfd, derr = dupFD(int(fd)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		_ = syscall.Close(nfd)
		return nil, err
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// dangerousEnv are variables a spec may not set: they change what code the
// process loads.
func dangerousEnv(k string) bool {
	switch {
	case k == "LD_PRELOAD", k == "LD_LIBRARY_PATH", k == "LD_AUDIT", strings.HasPrefix(k, "DYLD_"):
		return true
	}
	return false
}

// buildEnv is the spec's environment plus the host's short allowlist; HOME
// is the user's folder and always wins.
func buildEnv(spec *ext.ProcessSpec, home string) ([]string, error) {
	env := make([]string, 0, len(spec.Env)+5)
	for _, k := range []string{"PATH", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("environment entry %q is not KEY=VALUE: %w", redactKV(kv), ext.ErrInvalidArgument)
		}
		if strings.ContainsRune(v, 0) || strings.ContainsRune(k, 0) {
			return nil, fmt.Errorf("environment variable %s contains a NUL byte: %w", k, ext.ErrInvalidArgument)
		}
		if dangerousEnv(k) {
			return nil, fmt.Errorf("environment variable %s is not allowed for service processes: %w", k, ext.ErrInvalidArgument)
		}
		if k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home), nil
}

func redactKV(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	if len(k) > 40 {
		k = k[:40]
	}
	return k + "=…"
}

func (m *Manager) start(ctx context.Context, key Key, home string, start Starter) (*proc, error) {
	spec, err := start(ctx)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, fmt.Errorf("%s: %w", key, ext.ErrNotFound)
	}
	if spec.Command == "" {
		return nil, fmt.Errorf("%s: the extension gave no command: %w", key, ext.ErrInvalidArgument)
	}
	name, args, dir := spec.Command, spec.Args, spec.Dir
	var sb sandbox
	if spec.Sandbox {
		sb = m.sandbox()
		if sb.kind == "" {
			if !m.opts.Sandbox.AllowUnsandboxed {
				return nil, ext.Mark(fmt.Errorf("%s is untrusted and must run in a sandbox, but none works here: %v "+
					"(services.unsafeSharedUID runs such processes as the host's own user)", key, sb.reason), ext.ErrUnavailable)
			}
			m.warnShare.Do(func() {
				m.logger.Warn("untrusted service processes run unsandboxed, as the host's own user (services.unsafeSharedUID): "+
					"they can read the host's data folder, its secrets and other users' tokens", "reason", sb.reason)
			})
		} else {
			if h := m.opts.Sandbox.Home; h != nil {
				home = h(key)
			}
			if a, err := filepath.Abs(home); err == nil {
				home = a // bwrap mounts it by its absolute path
			}
		}
	}
	env, err := buildEnv(spec, home)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if sb.kind != "" {
		l, err := newLayout(spec, home, m.opts.Sandbox.Hide)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if sb.kind == sandboxUID {
			if l.uid, err = m.uids.uid(key.User); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		if err := prepareHome(sb.kind, home, l.uid); err != nil {
			return nil, fmt.Errorf("%s: creating its folder: %w", key, err)
		}
		// The host's TMPDIR is not in the sandbox; its own /tmp is.
		env = append(env, "TMPDIR=/tmp")
		name, args, dir = sb.bwrap, sb.argv(l, spec.Command, spec.Args), ""
	} else if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("%s: creating its folder: %w", key, err)
	}
	// From here on, Close waits for this start (m.wg) until register
	// takes the process over; a start that Close has not seen must not
	// begin, or its process would outlive Close.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("service manager is closed: %w", ext.ErrUnavailable)
	}
	m.wg.Add(1)
	m.mu.Unlock()
	started := false
	defer func() {
		if !started {
			m.wg.Done()
		}
	}()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Dir = dir
	if cmd.Dir == "" {
		cmd.Dir = home
	}
	var cgDir string
	cgroupFD := -1
	if m.cg != nil {
		m.mu.Lock()
		m.cgSeq++
		n := m.cgSeq
		m.mu.Unlock()
		dirCG, f, err := m.cg.Create(m.cgroupName(n))
		if err != nil {
			m.logger.Warn("starting a service process without its cgroup", "service", key.String(), "error", err)
		} else {
			defer f.Close()
			cgDir, cgroupFD = dirCG, int(f.Fd())
		}
	}
	cmd.SysProcAttr = procAttrs(cgroupFD)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		_ = cgroup.Remove(cgDir, 0)
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		_, _ = stdinR.Close(), stdinW.Close()
		_ = cgroup.Remove(cgDir, 0)
		return nil, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		_, _, _, _ = stdinR.Close(), stdinW.Close(), stdoutR.Close(), stdoutW.Close()
		_ = cgroup.Remove(cgDir, 0)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	err = cmd.Start()
	_, _, _ = stdinR.Close(), stdoutW.Close(), stderrW.Close()
	if err != nil {
		_, _, _ = stdinW.Close(), stdoutR.Close(), stderrR.Close()
		_ = cgroup.Remove(cgDir, 0)
		return nil, ext.Mark(fmt.Errorf("starting %s (%s): %w", key, spec.Command, err), ext.ErrCannotStart)
	}
	p := &proc{m: m, key: key, cmd: cmd, pgid: cmd.Process.Pid, stdin: stdinW, stdout: stdoutR, stderr: stderrR,
		cgroup: cgDir, tail: &ext.StderrTail{}, drained: make(chan struct{}), exited: make(chan struct{}), oneSession: spec.OneSession}
	m.writeRecord(p)
	m.wg.Add(1)
	go m.drainStderr(key, cmd.Process.Pid, stderrR, p.tail, p.drained)
	m.logger.Info("service process started", "extension", key.Extension, "service", key.Service, "user", key.User,
		"pid", cmd.Process.Pid, "sandbox", sb.kind)
	started = true // register ends the count
	return p, nil
}

// Stderr is logged line by line, at most stderrLinesPerSec lines a second
// and stderrLineMax bytes a line; the rest is drained and counted, never
// blocking the process. Every line also goes to the process's tail (the
// last lines, bounded, escaped: [ext.StderrTail]), which its handles'
// [Handle.Exit] reports, rate limit or not. Once the process has exited, what it wrote is read
// for at most drainAfterExit more: a grandchild that kept the pipe open
// never holds up a stop or Close.
const (
	stderrLinesPerSec = 50
	stderrLineMax     = 4 << 10
	drainAfterExit    = 250 * time.Millisecond
)

func (m *Manager) drainStderr(key Key, pid int, r *os.File, tail *ext.StderrTail, drained chan struct{}) {
	defer m.wg.Done()
	defer close(drained)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		window  = time.Now()
		lines   int
		dropped int
	)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			tail.Add(line)
			if time.Since(window) > time.Second {
				if dropped > 0 {
					m.logger.Warn("service stderr rate-limited", "extension", key.Extension, "service", key.Service, "user", key.User, "dropped_lines", dropped)
				}
				window, lines, dropped = time.Now(), 0, 0
			}
			lines++
			if lines <= stderrLinesPerSec {
				s := strings.TrimRight(string(line), "\r\n")
				if len(s) > stderrLineMax {
					s = s[:stderrLineMax] + "…(truncated)"
				}
				m.logger.Info(s, "stream", "stderr", "extension", key.Extension, "service", key.Service, "user", key.User, "pid", pid)
			} else {
				dropped++
			}
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				// A line longer than the buffer: log its start, skip the rest.
				continue
			}
			return
		}
	}
}

// reap waits for the process to exit, kills whatever it left in its
// process group and cgroup, then reaps it and removes its cgroup and
// record. The leader is reaped only after its group was killed, so its
// group ID cannot have been reused by then.
func (p *proc) reap() error {
	exited := waitExited(p.pgid) == nil
	if exited {
		p.killRest()
	}
	err := p.cmd.Wait()
	if !exited {
		p.killRest()
	}
	// What the process wrote before it exited is still read; a grandchild
	// that kept stderr open is not waited for.
	_ = p.stderr.SetReadDeadline(time.Now().Add(drainAfterExit))
	if err := cgroup.Remove(p.cgroup, p.m.opts.Grace); err != nil {
		p.m.logger.Warn("removing a service process's cgroup", "cgroup", p.cgroup, "error", err)
	} else if p.cgroup != "" {
		p.m.cg.Tidy() // fails while other processes have cgroups there
	}
	if p.record != "" {
		_ = os.Remove(p.record)
	}
	return err
}

// killRest kills what the exited leader left: its process group and its
// cgroup (which also holds what left the group).
func (p *proc) killRest() {
	killGroup(p.pgid, syscall.SIGKILL)
	cgroup.Signal(p.cgroup, syscall.SIGKILL)
}

// signal sends sig to the process's group and cgroup.
func (p *proc) signal(sig syscall.Signal) {
	killGroup(p.pgid, sig)
	cgroup.Signal(p.cgroup, sig)
}

// wait reaps the process and forgets it.
func (p *proc) wait() {
	defer p.m.wg.Done()
	err := p.reap()
	// Unregister before announcing the exit, so whoever waits on exited
	// (a stop making room) sees the slot free.
	p.m.mu.Lock()
	p.m.unregisterLocked(p)
	if p.idle != nil {
		p.idle.Stop()
	}
	stopping := p.stopping
	p.m.signalLocked()
	p.m.mu.Unlock()
	<-p.drained // bounded: reap set the read deadline
	p.exit = exitOf(p.cmd, p.tail.Lines())
	close(p.exited)
	_ = p.stdin.Close()
	_ = p.stdout.Close()
	if !stopping {
		p.m.exits.Warn("service process exited", p.key.User, p.key.Extension+"/"+p.key.Service, errString(err))
	}
}

// exitOf says how cmd, reaped, ended.
func exitOf(cmd *exec.Cmd, stderr []string) *ext.ServiceExit {
	e := &ext.ServiceExit{Code: -1, Stderr: stderr}
	if st := cmd.ProcessState; st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
	}
	return e
}

func errString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// stop ends the process: close stdin, wait Grace, SIGTERM the group, wait
// Grace, SIGKILL the group; whatever the process left in its group and
// cgroup is killed when it exits. It returns once the process is reaped
// or, for a process that was never registered, killed.
func (p *proc) stop() {
	p.m.mu.Lock()
	p.stopping = true
	waiting := p.waiting
	p.m.mu.Unlock()
	if !waiting {
		// Started but lost a race: nobody waits for it yet.
		_ = p.stdin.Close()
		p.signal(syscall.SIGKILL)
		_ = p.reap()
		_ = p.stdout.Close()
		return
	}
	_ = p.stdin.Close()
	grace := p.m.opts.Grace
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// release drops one reference; the last one arms the idle timer.
func (p *proc) release() {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	p.refs--
	if p.refs > 0 || p.stopping || !m.registeredLocked(p) {
		return
	}
	if p.oneSession {
		// Its one session is over: stop it now, in the background.
		p.stopping = true
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			p.stop()
		}()
		return
	}
	m.signalLocked() // an idle process can now be evicted for a waiter
	p.idle = time.AfterFunc(m.opts.Idle, func() {
		m.mu.Lock()
		if p.refs > 0 || p.stopping || !m.registeredLocked(p) || m.closed {
			m.mu.Unlock()
			return
		}
		p.stopping = true
		m.wg.Add(1)
		m.mu.Unlock()
		defer m.wg.Done()
		m.logger.Info("stopping idle service process", "extension", p.key.Extension, "service", p.key.Service, "user", p.key.User, "idle", m.opts.Idle)
		p.stop()
	})
}

// Close stops every process and waits for all goroutines. It is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	procs := make([]*proc, 0, m.runningLocked())
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	for p := range m.single {
		procs = append(procs, p)
	}
	for _, p := range procs {
		if p.idle != nil {
			p.idle.Stop()
		}
	}
	m.signalLocked()
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
	m.wg.Wait()
	m.exits.Close()
	if m.cg != nil {
		m.cg.Tidy() // fails while another host on this data folder uses it
	}
	return nil
}

// Handle is one reference to a running process. It implements
// [ext.FileServiceConn]: its pipes are its own duplicates of the process's.
type Handle struct {
	p      *proc
	stdin  *os.File
	stdout *os.File
	once   sync.Once
}

var (
	_ ext.FileServiceConn = (*Handle)(nil)
	_ ext.ServiceExiter   = (*Handle)(nil)
)

// Exit waits until the process has ended and its stderr was read (or ctx
// ends), and says how it ended: its status and the last lines of its
// stderr. It implements [ext.ServiceExiter]; the lines may hold what the
// process was handed, for the extension to redact.
func (h *Handle) Exit(ctx context.Context) (*ext.ServiceExit, error) {
	select {
	case <-h.p.exited:
		return h.p.exit, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stdin returns the process's stdin (this handle's copy).
func (h *Handle) Stdin() io.WriteCloser { return h.stdin }

// Stdout returns the process's stdout (this handle's copy).
func (h *Handle) Stdout() io.ReadCloser { return h.stdout }

// Files returns both descriptors, for passing to an extension process.
func (h *Handle) Files() (stdin, stdout *os.File) { return h.stdin, h.stdout }

// PID returns the process ID.
func (h *Handle) PID() int { return h.p.cmd.Process.Pid }

// Release gives the handle back; it is idempotent.
func (h *Handle) Release() error {
	h.once.Do(func() {
		_ = h.stdin.Close()
		_ = h.stdout.Close()
		h.p.release()
	})
	return nil
}
