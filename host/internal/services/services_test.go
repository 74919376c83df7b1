package services

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
)

// The test binary doubles as the service process (STYLE.md rule 9).
func TestMain(m *testing.M) {
	switch os.Getenv("SERVICES_TEST_MODE") {
	case "echo":
		_, _ = io.Copy(os.Stdout, os.Stdin)
		os.Exit(0)
	case "env":
		fmt.Println(os.Getenv("CANARY") + " " + os.Getenv("HOME"))
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "stubborn":
		// Ignores stdin EOF and SIGTERM.
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		select {}
	case "crash":
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(3)
	case "host":
		hostMain()
		os.Exit(0)
	case "handoff":
		handoffMain()
		os.Exit(0)
	case "hold":
		select {}
	case "fatal":
		// Fails before answering: many lines (more than the tail keeps),
		// an escape sequence, status 3.
		for i := range 30 {
			fmt.Fprintf(os.Stderr, "noise %d\n", i)
		}
		fmt.Fprintln(os.Stderr, "fatal: cannot open database \x1b]0;title\x07")
		os.Exit(3)
	}
	goleak.VerifyTestMain(m)
}

func spec(mode string, env ...string) Starter {
	return func(context.Context) (*ext.ProcessSpec, error) {
		return &ext.ProcessSpec{Command: os.Args[0], Env: append([]string{"SERVICES_TEST_MODE=" + mode}, env...)}, nil
	}
}

func newManager(t *testing.T, o Options) *Manager {
	if o.Grace == 0 {
		o.Grace = 200 * time.Millisecond
	}
	m := New(o)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func readLine(t *testing.T, r io.Reader) string {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("reading a line: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestPerUserProcessesAndEnvironment(t *testing.T) {
	m := newManager(t, Options{})
	ctx := context.Background()
	seen := map[string]string{}
	for _, u := range []string{"alice", "bob"} {
		home := t.TempDir()
		h, err := m.Connect(ctx, Key{"x", "env", u}, home, spec("env", "CANARY=canary-"+u))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release()
		line := readLine(t, h.Stdout())
		if line != "canary-"+u+" "+home {
			t.Errorf("%s's process saw %q; want its own canary and HOME", u, line)
		}
		seen[u] = line
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", h.PID()))
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range []string{"alice", "bob"} {
			if other != u && strings.Contains(string(b), "canary-"+other) {
				t.Errorf("%s's process environment holds %s's canary", u, other)
			}
		}
	}
	if m.Running() != 2 {
		t.Errorf("running = %d, want 2 (one per user)", m.Running())
	}
	// The same key reuses the process.
	h1, _ := m.Connect(ctx, Key{"x", "echo", "alice"}, t.TempDir(), spec("echo"))
	h2, _ := m.Connect(ctx, Key{"x", "echo", "alice"}, t.TempDir(), spec("echo"))
	if h1.PID() != h2.PID() {
		t.Errorf("two connects for one key gave pids %d and %d", h1.PID(), h2.PID())
	}
	_ = h1.Release()
	_ = h2.Release()
}

func TestRejectsDangerousEnvironment(t *testing.T) {
	m := newManager(t, Options{})
	for _, kv := range []string{"LD_PRELOAD=/tmp/x.so", "DYLD_INSERT_LIBRARIES=x", "A=b\x00c", "NOEQUALS"} {
		_, err := m.Connect(context.Background(), Key{"x", "env", "alice"}, t.TempDir(), spec("env", kv))
		if !errors.Is(err, ext.ErrInvalidArgument) {
			t.Errorf("env %q: %v, want ErrInvalidArgument", kv, err)
		}
		if err != nil && strings.Contains(err.Error(), "/tmp/x.so") {
			t.Errorf("the error leaks the value: %v", err)
		}
	}
}

func TestIdleStop(t *testing.T) {
	m := newManager(t, Options{Idle: 300 * time.Millisecond})
	ctx := context.Background()
	h, err := m.Connect(ctx, Key{"x", "echo", "alice"}, t.TempDir(), spec("echo"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if m.Running() != 1 {
		t.Fatal("the process stopped while a handle was held")
	}
	pid := h.PID()
	_ = h.Release()
	deadline := time.Now().Add(5 * time.Second)
	for m.Running() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle process was not stopped after the idle time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		t.Errorf("process %d still alive after the idle stop", pid)
	}
}

func TestConnectReleaseCyclesLeaveNothing(t *testing.T) {
	m := newManager(t, Options{Idle: time.Millisecond})
	ctx := context.Background()
	var pids []int
	for i := range 200 {
		h, err := m.Connect(ctx, Key{"x", "echo", fmt.Sprintf("u%d", i%4)}, t.TempDir(), spec("echo"))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, h.PID())
		_ = h.Release()
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("orphan process %d after close", pid)
		}
	}
}

func TestCrashedProcessIsStartedAgain(t *testing.T) {
	m := newManager(t, Options{})
	ctx := context.Background()
	key := Key{"x", "crash", "alice"}
	h, err := m.Connect(ctx, key, t.TempDir(), spec("crash"))
	if err != nil {
		t.Fatal(err)
	}
	if readLine(t, h.Stdout()) != "ready" {
		t.Fatal("not ready")
	}
	pid := h.PID()
	_, _ = h.Stdin().Write([]byte("die\n"))
	if _, err := io.ReadAll(h.Stdout()); err != nil {
		t.Fatalf("the handle should see EOF when the process dies: %v", err)
	}
	_ = h.Release()
	deadline := time.Now().Add(5 * time.Second)
	for m.Running() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	h2, err := m.Connect(ctx, key, t.TempDir(), spec("crash"))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	if h2.PID() == pid {
		t.Error("the crashed process was not replaced")
	}
}

func TestStubbornProcessIsKilled(t *testing.T) {
	m := newManager(t, Options{Idle: time.Millisecond, Grace: 100 * time.Millisecond})
	h, err := m.Connect(context.Background(), Key{"x", "stubborn", "alice"}, t.TempDir(), spec("stubborn"))
	if err != nil {
		t.Fatal(err)
	}
	readLine(t, h.Stdout())
	pid := h.PID()
	start := time.Now()
	_ = h.Release()
	for alive(pid) {
		if time.Since(start) > 3*time.Second {
			t.Fatal("a process ignoring EOF and SIGTERM was not killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMaxProcesses(t *testing.T) {
	m := newManager(t, Options{Max: 2, ConnectWait: 300 * time.Millisecond, Idle: time.Hour})
	ctx := context.Background()
	a, err := m.Connect(ctx, Key{"x", "echo", "a"}, t.TempDir(), spec("echo"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Connect(ctx, Key{"x", "echo", "b"}, t.TempDir(), spec("echo"))
	if err != nil {
		t.Fatal(err)
	}
	// Both busy: a third connect waits, then fails clearly.
	start := time.Now()
	_, err = m.Connect(ctx, Key{"x", "echo", "c"}, t.TempDir(), spec("echo"))
	if !errors.Is(err, ErrBusy) || time.Since(start) < 250*time.Millisecond || !strings.Contains(err.Error(), "maxProcesses") {
		t.Fatalf("third connect: %v after %v; want ErrBusy after waiting", err, time.Since(start))
	}
	// A waiting connect gets the slot as soon as one frees.
	var wg sync.WaitGroup
	wg.Add(1)
	var c *Handle
	go func() {
		defer wg.Done()
		c, err = m.Connect(ctx, Key{"x", "echo", "c"}, t.TempDir(), spec("echo"))
	}()
	time.Sleep(50 * time.Millisecond)
	apid := a.PID()
	_ = a.Release() // a is now idle: the least recently used idle one is evicted
	wg.Wait()
	if err != nil {
		t.Fatalf("waiting connect: %v", err)
	}
	if alive(apid) {
		t.Error("the idle process was not stopped to make room")
	}
	if m.Running() != 2 {
		t.Errorf("running = %d, want the cap 2", m.Running())
	}
	_ = b.Release()
	_ = c.Release()
}

func TestLRUEviction(t *testing.T) {
	m := newManager(t, Options{Max: 2, Idle: time.Hour})
	ctx := context.Background()
	a, _ := m.Connect(ctx, Key{"x", "echo", "a"}, t.TempDir(), spec("echo"))
	b, _ := m.Connect(ctx, Key{"x", "echo", "b"}, t.TempDir(), spec("echo"))
	apid, bpid := a.PID(), b.PID()
	_ = a.Release()
	_ = b.Release()
	// Touch a again so b is the least recently used.
	a2, _ := m.Connect(ctx, Key{"x", "echo", "a"}, t.TempDir(), spec("echo"))
	_ = a2.Release()
	c, err := m.Connect(ctx, Key{"x", "echo", "c"}, t.TempDir(), spec("echo"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if alive(bpid) || !alive(apid) {
		t.Errorf("evicted the wrong process: a alive=%v b alive=%v", alive(apid), alive(bpid))
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestOneSessionProcesses(t *testing.T) {
	m := newManager(t, Options{Idle: time.Hour})
	ctx := context.Background()
	one := func(context.Context) (*ext.ProcessSpec, error) {
		return &ext.ProcessSpec{Command: os.Args[0], Env: []string{"SERVICES_TEST_MODE=echo"}, OneSession: true}, nil
	}
	key := Key{"x", "mcp", "alice"}
	a, err := m.Connect(ctx, key, t.TempDir(), one)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Connect(ctx, key, t.TempDir(), one)
	if err != nil {
		t.Fatal(err)
	}
	if a.PID() == b.PID() {
		t.Fatal("a one-session process was handed to a second connect")
	}
	if m.Running() != 2 {
		t.Errorf("running = %d, want 2", m.Running())
	}
	apid := a.PID()
	_ = a.Release()
	deadline := time.Now().Add(5 * time.Second)
	for alive(apid) {
		if time.Now().After(deadline) {
			t.Fatal("a released one-session process was not stopped promptly")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = b.Release()
}

// TestStopReachesGrandchildren: a server started through a wrapper (sh -c,
// npx) that forks leaves no orphan: the stop signals the whole process
// group (SECURITY.md B7).
func TestStopReachesGrandchildren(t *testing.T) {
	m := newManager(t, Options{Idle: time.Millisecond, Grace: 100 * time.Millisecond})
	marker := fmt.Sprintf("grandchild-%d", time.Now().UnixNano())
	start := func(context.Context) (*ext.ProcessSpec, error) {
		// The wrapper forks a long sleeper (tagged by its environment) and
		// waits; it ignores stdin.
		return &ext.ProcessSpec{Command: "/bin/sh", Args: []string{"-c", "sleep 300 & echo started; wait"},
			Env: []string{"MARKER=" + marker}}, nil
	}
	h, err := m.Connect(context.Background(), Key{"x", "wrapped", "alice"}, t.TempDir(), start)
	if err != nil {
		t.Fatal(err)
	}
	if line := readLine(t, h.Stdout()); line != "started" {
		t.Fatalf("wrapper said %q", line)
	}
	if n := len(pidsWithEnv("MARKER=" + marker)); n < 2 {
		t.Fatalf("%d tagged processes, want the wrapper and its child", n)
	}
	_ = h.Release()
	deadline := time.Now().Add(5 * time.Second)
	for len(pidsWithEnv("MARKER="+marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("orphans after the stop: %v", pidsWithEnv("MARKER="+marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pidsWithEnv returns the live processes whose environment holds kv.
func pidsWithEnv(kv string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		var pid int
		if _, err := fmt.Sscanf(d.Name(), "%d", &pid); err != nil || !alive(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, e := range strings.Split(string(b), "\x00") {
			if e == kv {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestHandleWithoutDescriptorsStopsProcess: a start whose handle cannot
// get its own copies of the pipes (the dup of its stdin, or of its
// stdout, fails as it does with the descriptors exhausted) fails naming
// the service, and its process is stopped and forgotten at once: before,
// it stayed registered with no reference (and no idle timer) until an
// eviction or Close. The manager goes on: the next connect starts it.
func TestHandleWithoutDescriptorsStopsProcess(t *testing.T) {
	for _, failAt := range []int{1, 2} {
		t.Run(fmt.Sprintf("dup %d", failAt), func(t *testing.T) {
			m := newManager(t, Options{Idle: time.Hour})
			marker := fmt.Sprintf("DUPFAIL=%d-%d", os.Getpid(), failAt)
			calls := 0
			dupFD = func(fd int) (int, error) {
				if calls++; calls == failAt {
					return -1, syscall.EMFILE
				}
				return syscall.Dup(fd)
			}
			defer func() { dupFD = syscall.Dup }()
			key := Key{Extension: "mcp", Service: "notes", User: "alice"}
			_, err := m.Connect(context.Background(), key, t.TempDir(), spec("echo", marker))
			if !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "mcp/notes for alice") {
				t.Fatalf("connect: %v; want EMFILE naming mcp/notes for alice", err)
			}
			if n := m.Running(); n != 0 {
				t.Errorf("%d processes registered after the failed start; want 0", n)
			}
			if pids := pidsWithEnv(marker); len(pids) != 0 {
				t.Errorf("the process of the failed start still runs: %v", pids)
			}
			dupFD = syscall.Dup
			h, err := m.Connect(context.Background(), key, t.TempDir(), spec("echo", marker))
			if err != nil {
				t.Fatalf("connect after the failure: %v", err)
			}
			echoOnce(t, h)
			_ = h.Release()
		})
	}
}

// TestExitStatusAndStderrTail: a handle tells how its process ended: the
// status and the last lines of its stderr, bounded and escaped; a command
// that cannot start is ErrCannotStart.
func TestExitStatusAndStderrTail(t *testing.T) {
	m := newManager(t, Options{})
	ctx := context.Background()
	h, err := m.Connect(ctx, Key{"e", "fatal", "alice"}, t.TempDir(), spec("fatal"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	e, err := h.Exit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e.Status() != "exit status 3" {
		t.Errorf("status %q, want exit status 3", e.Status())
	}
	if len(e.Stderr) != ext.StderrTailLines || e.Stderr[0] != "noise 11" ||
		e.Stderr[len(e.Stderr)-1] != `fatal: cannot open database \u001b]0;title\u0007` {
		t.Errorf("stderr tail = %q, want the last %d lines, escaped", e.Stderr, ext.StderrTailLines)
	}
	_, err = m.Connect(ctx, Key{"e", "missing", "alice"}, t.TempDir(), func(context.Context) (*ext.ProcessSpec, error) {
		return &ext.ProcessSpec{Command: "/nonexistent/server"}, nil
	})
	if !errors.Is(err, ext.ErrCannotStart) {
		t.Errorf("missing command: %v, want ErrCannotStart", err)
	}
}
