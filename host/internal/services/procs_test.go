package services

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/hosttest"
)

// missing skips a test whose system part is missing, loudly, and fails it
// under CI=true, where nothing may silently skip.
func missing(t *testing.T, part string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s is missing: %v", part, err)
	}
	t.Skipf("SKIPPED: needs %s: %v (under CI=true this fails)", part, err)
}

func needCgroup(t *testing.T, m *Manager) {
	t.Helper()
	if m.cg == nil {
		_, err := cgroup.Open("probe")
		missing(t, "a writable cgroup v2 hierarchy", err)
	}
}

func needSandbox(t *testing.T, m *Manager) {
	t.Helper()
	if kind, err := m.Sandboxing(); kind == "" {
		missing(t, "bwrap (apt-get install bubblewrap)", err)
	}
}

// cgroupName is a cgroup tree of the test's own.
func cgroupName(t *testing.T) string {
	return fmt.Sprintf("agenthost-test-%d-%s", os.Getpid(), strings.NewReplacer("/", "-").Replace(t.Name()))
}

// wrapper runs the test binary in echo mode through sh, the way npx and
// uvx wrap a server, after forking a sleeper that stays in the group and
// one that leaves it (setsid: only a cgroup finds it). Every process
// carries marker in its environment.
func wrapper(marker string, oneSession bool) Starter {
	return func(context.Context) (*ext.ProcessSpec, error) {
		return &ext.ProcessSpec{Command: "/bin/sh",
			Args:       []string{"-c", `sleep 1000 & setsid sleep 1000 & exec "$0"`, os.Args[0]},
			Env:        []string{"SERVICES_TEST_MODE=echo", "MARKER=" + marker},
			OneSession: oneSession}, nil
	}
}

func newMarker(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// echoOnce proves the process behind h runs (the wrapper reached exec).
func echoOnce(t *testing.T, h *Handle) {
	t.Helper()
	if _, err := h.Stdin().Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, h.Stdout()); got != "ping" {
		t.Fatalf("echo said %q", got)
	}
}

// waitGone waits until no process carries marker, failing after 5 s.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := pidsWithEnv("MARKER=" + marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL) // the test's own
			}
			t.Fatalf("%d processes left: %v", len(left), left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWrapperCyclesLeaveNothing (issue 10, item 4): 100 start/stop cycles
// of a server behind a wrapper whose children stay in its group or leave
// it with setsid leave no process, no cgroup and no record behind.
func TestWrapperCyclesLeaveNothing(t *testing.T) {
	run := t.TempDir()
	m := newManager(t, Options{Grace: 200 * time.Millisecond, RunDir: run, CgroupName: cgroupName(t)})
	needCgroup(t, m)
	marker := newMarker(t)
	ctx := context.Background()
	const cycles = 100
	for i := range cycles {
		h, err := m.Connect(ctx, Key{"x", "wrapped", fmt.Sprintf("u%d", i%4)}, t.TempDir(), wrapper(marker, true))
		if err != nil {
			t.Fatal(err)
		}
		echoOnce(t, h)
		_ = h.Release() // one session: stopped now
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if left := pidsWithEnv("MARKER=" + marker); len(left) != 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Fatalf("%d start/stop cycles left %d processes: %v", cycles, len(left), left)
	}
	if ents, _ := os.ReadDir(run); len(ents) != 0 {
		t.Errorf("%d records left in the run folder", len(ents))
	}
	if _, err := os.Stat(m.cg.Dir); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(m.cg.Dir)
		t.Errorf("the cgroup tree is still there (%v, %d entries)", err, len(ents))
	}
}

// TestCloseWithGrandchildHoldingStderr (issue 10, item 4): a grandchild
// that escaped every kill (setsid, and no cgroup) and holds the server's
// stderr open does not hold up Close: the drain gives up shortly after
// the server exited.
func TestCloseWithGrandchildHoldingStderr(t *testing.T) {
	m := newManager(t, Options{Grace: 200 * time.Millisecond}) // no cgroup: the grandchild escapes
	marker := newMarker(t)
	t.Cleanup(func() {
		for _, pid := range pidsWithEnv("MARKER=" + marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	h, err := m.Connect(context.Background(), Key{"x", "wrapped", "alice"}, t.TempDir(), wrapper(marker, false))
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, h)
	_ = h.Release()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		_ = m.Close()
		close(done)
	}()
	// Bound: stdin close, one grace, the drain's window, and slack.
	select {
	case <-done:
		t.Logf("Close returned in %v with a grandchild holding stderr", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not return within 3 s while a grandchild held the server's stderr")
	}
	if len(pidsWithEnv("MARKER="+marker)) == 0 {
		t.Fatal("the setsid grandchild is gone, so this test proved nothing about the drain")
	}
}

// TestReapAfterKilledHost (issue 10, item 4): a host killed with SIGKILL
// leaves its servers' grandchildren behind (the server itself dies with
// the host); the next manager on the same folder kills them, from the
// records and the cgroup tree.
func TestReapAfterKilledHost(t *testing.T) {
	run := t.TempDir()
	name := cgroupName(t)
	probe := New(Options{CgroupName: name})
	needCgroup(t, probe)
	_ = probe.Close()
	marker := newMarker(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SERVICES_TEST_MODE=host", "HOST_RUN="+run, "HOST_CGROUP="+name, "HOST_MARKER="+marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the host said %q, %v", line, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The server (the exec'd echo) dies with its host; the sleepers stay.
	deadline := time.Now().Add(5 * time.Second)
	for hasEcho(marker) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(pidsWithEnv("MARKER=" + marker)); n < 2 {
		t.Fatalf("%d processes survived the killed host, want its 2 sleepers: the test proves nothing", n)
	}
	m := New(Options{RunDir: run, CgroupName: name})
	t.Cleanup(func() { _ = m.Close() })
	waitGone(t, marker)
	if ents, _ := os.ReadDir(run); len(ents) != 0 {
		t.Errorf("%d records left after the reap", len(ents))
	}
}

// hasEcho reports whether the echo server tagged marker still runs.
func hasEcho(marker string) bool {
	for _, pid := range pidsWithEnv("MARKER=" + marker) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !strings.HasPrefix(string(b), "sleep") {
			return true
		}
	}
	return false
}

// hostMain is a host that starts a wrapped server and waits to be killed.
func hostMain() {
	m := New(Options{RunDir: os.Getenv("HOST_RUN"), CgroupName: os.Getenv("HOST_CGROUP")})
	h, err := m.Connect(context.Background(), Key{"x", "wrapped", "alice"}, os.TempDir(), wrapper(os.Getenv("HOST_MARKER"), false))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	_, _ = h.Stdin().Write([]byte("ping\n"))
	_, _ = bufio.NewReader(h.Stdout()).ReadString('\n')
	// Both sleepers run once the wrapper has exec'd the server.
	for len(pidsWithEnv("MARKER="+os.Getenv("HOST_MARKER"))) < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	select {}
}

// TestReapSparesReusedPID: a record whose group leader's pid now belongs
// to another process (another start time) kills nothing; one that still
// names its process kills it.
func TestReapSparesReusedPID(t *testing.T) {
	run := t.TempDir()
	sleeper := func() *exec.Cmd {
		c := exec.Command("sleep", "1000")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Process.Kill()
			_ = c.Wait()
		})
		return c
	}
	other, ours := sleeper(), sleeper()
	// A host that is gone: a process that ran and was reaped.
	gone := exec.Command("true")
	_ = gone.Run()
	for name, c := range map[string]struct {
		cmd   *exec.Cmd
		shift uint64
	}{"other": {other, 1}, "ours": {ours, 0}} {
		_, _, start, err := procStat(c.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		r := record{PGID: c.cmd.Process.Pid, Start: start + c.shift, Boot: bootID(), Host: gone.Process.Pid, HostStart: 1, Service: name}
		b, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(run, strconv.Itoa(r.PGID)+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := New(Options{RunDir: run})
	t.Cleanup(func() { _ = m.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for alive(ours.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(ours.Process.Pid) {
		t.Error("the recorded group that is still ours was not killed")
	}
	if !alive(other.Process.Pid) {
		t.Error("a process whose pid matched a record but not its start time was killed")
	}
}

// TestOwns: the service processes and everything they start, in their
// group or out of it (setsid, found by the cgroup), are the manager's; the
// host itself is not.
func TestOwns(t *testing.T) {
	m := newManager(t, Options{CgroupName: cgroupName(t)})
	needCgroup(t, m)
	marker := newMarker(t)
	h, err := m.Connect(context.Background(), Key{"x", "wrapped", "alice"}, t.TempDir(), wrapper(marker, false))
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, h)
	pids := pidsWithEnv("MARKER=" + marker)
	if len(pids) != 3 {
		t.Fatalf("%d tagged processes, want the server and its 2 sleepers", len(pids))
	}
	for _, pid := range pids {
		if !m.Owns(pid) {
			t.Errorf("process %d (of the server's) is not owned", pid)
		}
	}
	if m.Owns(os.Getpid()) || m.Owns(1) {
		t.Error("the host or init counts as a service process")
	}
	_ = h.Release()
	_ = m.Close()
	waitGone(t, marker)
}

// TestSandboxedProcess (issue 10, item 3): an untrusted process runs as a
// uid of its user's own (as root) in its own pid namespace: it sees its
// own folder (writable) but not the hidden data folder, another user's
// folder, nor another user's process environment.
func TestSandboxedProcess(t *testing.T) {
	data := t.TempDir()
	home := func(k Key) string { return filepath.Join(data, "users", k.User, "sandbox") }
	m := newManager(t, Options{Sandbox: SandboxOptions{Hide: []string{data}, Home: home, UIDFile: filepath.Join(data, "uids.json")}})
	needSandbox(t, m)
	secret := filepath.Join(data, "secrets.key")
	if err := os.WriteFile(secret, []byte("KEY-CANARY"), 0o644); err != nil { // even world-readable
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(data, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nonce := "-" + strconv.FormatInt(time.Now().UnixNano(), 16)
	// The probe reports its uid, what it could read, whether it could
	// reach the socket, how many processes it sees, whether its folder is
	// writable, then echoes.
	probe := `id -u
cat "$SECRET" 2>/dev/null || echo nosecret
ls "$OTHER" 2>/dev/null && echo LEAK-other || echo noother
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done | grep -c "$LOOK$NONCE" || true
ls -d /proc/[0-9]* | wc -l
test -S "$SOCK" && echo LEAK-sock || echo nosock
(echo w > "$HOME/w") 2>/dev/null && echo writable || echo notwritable
exec cat`
	start := func(user, look string) *Handle {
		h, err := m.Connect(context.Background(), Key{"x", "probe", user}, t.TempDir(), func(context.Context) (*ext.ProcessSpec, error) {
			return &ext.ProcessSpec{Command: "/bin/sh", Args: []string{"-c", probe}, Sandbox: true, OneSession: true,
				Env: []string{"SECRET=" + secret, "OTHER=" + home(Key{User: "bob"}), "SOCK=" + filepath.Join(data, "ctl.sock"),
					"LOOK=" + look, "NONCE=" + nonce, "MCP_ACCESS_TOKEN=CANARY-" + user + nonce}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Release() })
		return h
	}
	bob := start("bob", "none")
	br := bufio.NewReader(bob.Stdout())
	bobLines := make([]string, 7)
	for i := range bobLines {
		l, _ := br.ReadString('\n')
		bobLines[i] = strings.TrimSpace(l)
	}
	alice := start("alice", "CANARY-bob") // bob's token is CANARY-bob + nonce
	ar := bufio.NewReader(alice.Stdout())
	var got []string
	for range 7 {
		l, err := ar.ReadString('\n')
		if err != nil {
			t.Fatalf("the probe said %q then %v", got, err)
		}
		got = append(got, strings.TrimSpace(l))
	}
	kind, _ := m.Sandboxing()
	t.Logf("sandbox %s; alice's probe: %q; bob's: %q", kind, got, bobLines)
	if kind == sandboxUID {
		if got[0] == "0" || got[0] == strconv.Itoa(os.Getuid()) || got[0] == bobLines[0] {
			t.Errorf("alice runs as uid %s (host %d, bob %s): want a uid of her own", got[0], os.Getuid(), bobLines[0])
		}
	}
	want := []string{got[0], "nosecret", "noother", "0", got[4], "nosock", "writable"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("probe line %d = %q, want %q", i, got[i], want[i])
		}
	}
	if n, _ := strconv.Atoi(got[4]); n > 5 {
		t.Errorf("the probe sees %d processes: want its own pid namespace", n)
	}
	// The uid is stable: it is recorded.
	b, err := os.ReadFile(filepath.Join(data, "uids.json"))
	if kind == sandboxUID && (err != nil || !strings.Contains(string(b), `"alice": `+got[0])) {
		t.Errorf("alice's uid is not recorded: %s %v", b, err)
	}
}

// TestSandboxHidesDataInsideSystemFolders: a data folder (or key file)
// inside a folder the sandbox shows is covered before the process's own
// folder is mounted in it.
func TestSandboxHidesDataInsideSystemFolders(t *testing.T) {
	s := sandbox{kind: sandboxUserNS, bwrap: "bwrap"}
	argv := strings.Join(s.argv(layout{home: "/etc/agenthost/users/alice/x/sandbox", dir: "/etc/agenthost/users/alice/x/sandbox",
		hide: []string{"/etc/agenthost", "/etc/hostname", "/srv/elsewhere"}}, "server", nil), " ")
	hide := strings.Index(argv, "--tmpfs /etc/agenthost ")
	home := strings.Index(argv, "--bind /etc/agenthost/users/alice/x/sandbox ")
	if hide < 0 || home < 0 || hide > home {
		t.Errorf("the data folder is not covered before the home is mounted: %s", argv)
	}
	if !strings.Contains(argv, "--ro-bind /dev/null /etc/hostname") {
		t.Errorf("a hidden file inside a shown folder is not emptied: %s", argv)
	}
	if strings.Contains(argv, "/srv/elsewhere") {
		t.Errorf("a hidden folder the sandbox does not show anyway is mounted over: %s", argv)
	}
}

// TestCloseDuringStart: a connect whose spec arrives after Close began
// starts nothing (before, its process was started after Close had
// returned, with nobody left to wait for it), and fails.
func TestCloseDuringStart(t *testing.T) {
	var log hosttest.LogBuffer
	m := newManager(t, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	entered, proceed := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (*ext.ProcessSpec, error) {
		close(entered)
		<-proceed
		return spec("echo")(context.Background())
	}
	connected := make(chan error, 1)
	go func() {
		h, err := m.Connect(context.Background(), Key{"x", "slow", "alice"}, t.TempDir(), slow)
		if err == nil {
			_ = h.Release()
		}
		connected <- err
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		_ = m.Close()
		close(closed)
	}()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		m.mu.Lock()
		c := m.closed
		m.mu.Unlock()
		if c {
			break
		}
	}
	close(proceed) // the spec arrives once Close has begun
	<-closed
	if err := <-connected; err == nil {
		t.Error("a connect in flight during Close succeeded")
	}
	if strings.Contains(log.String(), "service process started") {
		t.Errorf("a process was started after Close had begun:\n%s", log.String())
	}
}

// handoffMain connects to the unix socket $SOCK on behalf of a child it
// started beforehand with the socket (mode hold), then exits: the
// connection's credentials name a process that is gone.
func handoffMain() {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	holder := exec.Command(os.Args[0])
	holder.Env = []string{"SERVICES_TEST_MODE=hold"}
	holder.ExtraFiles = []*os.File{os.NewFile(uintptr(fd), "socket")}
	if err := holder.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: os.Getenv("SOCK")}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// TestSandboxHiddenPathsResolved: a readable path that is a symlink into
// the hidden data folder, or a folder holding the real location of a data
// folder named through a symlink, or holding a data folder named
// relatively, would show the data folder: each is refused.
func TestSandboxHiddenPathsResolved(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "srv", "data")
	if err := os.MkdirAll(real, 0o700); err != nil {
		t.Fatal(err)
	}
	linkToData := filepath.Join(root, "link-to-data")
	dataLink := filepath.Join(root, "data-link")
	for _, l := range []string{linkToData, dataLink} {
		if err := os.Symlink(real, l); err != nil {
			t.Fatal(err)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		hide, readable string
	}{
		"readable symlink into the data folder":          {real, linkToData},
		"data folder named by a symlink, real one shown": {dataLink, filepath.Join(root, "srv")},
		"data folder named relatively, its folder shown": {"data", wd},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := newManager(t, Options{Sandbox: SandboxOptions{Hide: []string{c.hide}}})
			_, err := newLayout(&ext.ProcessSpec{Command: "server", ReadablePaths: []string{c.readable}}, filepath.Join(root, "home"), m.opts.Sandbox.Hide)
			if !errors.Is(err, ext.ErrPermission) {
				t.Errorf("readable path %s with %s hidden = %v, want it refused", c.readable, c.hide, err)
			}
		})
	}
}
