package host_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// The test binary doubles as an extension and as a host process, chosen by
// environment variables (STYLE.md rule 9: no helper binaries to build).
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("HOST_TEST_SERVICE") == "echo":
		_, _ = io.Copy(os.Stdout, os.Stdin)
		os.Exit(0)
	case os.Getenv("HOST_TEST_SERVICE") == "canary":
		// Answer every line with the canary, so a reused process answers too.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(os.Getenv("CANARY"))
		}
		os.Exit(0)
	case os.Getenv("HOST_TEST_EXTENSION") != "":
		ext.Serve(&testExt{})
		os.Exit(0)
	case os.Getenv("HOST_TEST_AUDIT_LOAD") != "":
		runAuditLoad()
		os.Exit(0)
	case os.Getenv("HOST_TEST_HOST") != "":
		runHostProcess()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

// runHostProcess starts a host with the test extension, prints the
// extension's pid and waits to be killed.
func runHostProcess() {
	h, err := host.New(context.Background(), testConfig(os.Getenv("HOST_TEST_DIR"), nil), nil)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	exts, _ := h.Extensions(context.Background())
	fmt.Println("pid", exts[0].PID)
	select {}
}

// mustExtensions returns the host's extensions.
func mustExtensions(t *testing.T, h *host.Host) []host.ExtensionInfo {
	t.Helper()
	exts, err := h.Extensions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return exts
}

type testExt struct {
	mu   sync.Mutex
	host ext.Host
	// gate, when set, holds the activation of user "slowpoke" until it
	// is closed or the activation's context ends; gateLeft counts the
	// activations that left it.
	gate     chan struct{}
	gateLeft atomic.Int32
	// active are the users activated in this process and not retired: a
	// user's own tool answers only for them, as ext-mcp's catalog does.
	active map[string]bool
}

func (e *testExt) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "t", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers, ext.CapabilityServices},
		Settings: []ext.SettingsSection{{ID: "prefs", Title: "Preferences", Scope: "user",
			Form: json.RawMessage(`{"v":1,"root":{"type":"form","children":[{"type":"text","name":"greeting"},{"type":"text","name":"farewell"},{"type":"secret","name":"token"}]}}`)}}}, nil
}

func (e *testExt) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	e.mu.Lock()
	e.host = req.Host
	e.mu.Unlock()
	return req.Host.SetSystemTools(ctx, []ext.Tool{
		{Name: "t/echo"}, {Name: "t/slow"}, {Name: "t/env"}, {Name: "t/block"}, {Name: "t/greet"}, {Name: "t/svc"}, {Name: "t/token"}, {Name: "t/svcbench", Exposure: ext.ExposureCodemode}, {Name: "t/whois"},
	})
}

func (e *testExt) Shutdown(context.Context) error { return nil }

func (e *testExt) Activate(ctx context.Context, user string) error {
	e.mu.Lock()
	h := e.host
	e.mu.Unlock()
	if user == "slowpoke" && e.gate != nil {
		defer e.gateLeft.Add(1)
		select {
		case <-e.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// HOST_TEST_HOLD names a file: while it exists, activations wait
	// (a re-activation the test holds open).
	if hold := os.Getenv("HOST_TEST_HOLD"); hold != "" {
		for {
			if _, err := os.Stat(hold); err != nil {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if err := h.SetUserTools(ctx, user, []ext.Tool{{Name: "t/mine_" + user, Exposure: ext.ExposureDeferred}}); err != nil {
		return err
	}
	e.mu.Lock()
	if e.active == nil {
		e.active = map[string]bool{}
	}
	e.active[user] = true
	e.mu.Unlock()
	return nil
}
func (e *testExt) StartService(_ context.Context, name, user string) (*ext.ProcessSpec, error) {
	switch name {
	case "echo":
		return &ext.ProcessSpec{Command: os.Args[0], Env: []string{"HOST_TEST_SERVICE=echo"}}, nil
	case "canary":
		return &ext.ProcessSpec{Command: os.Args[0], Env: []string{"HOST_TEST_SERVICE=canary", "CANARY=canary-" + user}}, nil
	}
	return nil, nil
}

// svc connects to a service as the user, pushes n bytes through it and
// checks they come back, then reports the pid and the first line.
func (e *testExt) svc(ctx context.Context, user string, args json.RawMessage) (*ext.CallToolResult, error) {
	var a struct {
		Service string `json:"service"`
		Bytes   int    `json:"bytes"`
		Keep    bool   `json:"keep"`
		// Own hands the host a spec of the extension's own.
		Own bool `json:"own"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	e.mu.Lock()
	h := e.host
	e.mu.Unlock()
	var (
		conn ext.ServiceConn
		err  error
	)
	if a.Own {
		conn, err = h.ConnectServiceSpec(ctx, a.Service, user, &ext.ProcessSpec{Command: os.Args[0],
			Env: []string{"HOST_TEST_SERVICE=canary", "CANARY=own-" + user}})
	} else {
		conn, err = h.ConnectService(ctx, a.Service, user)
	}
	if err != nil {
		return nil, err
	}
	if !a.Keep {
		defer conn.Release()
	}
	r := bufio.NewReaderSize(conn.Stdout(), 1<<20)
	if a.Bytes == 0 {
		if _, err := conn.Stdin().Write([]byte("\n")); err != nil {
			return nil, err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		return ext.TextResult(fmt.Sprintf("%d %s", conn.PID(), strings.TrimSpace(line))), nil
	}
	payload := bytes.Repeat([]byte("x"), a.Bytes)
	payload = append(payload, '\n')
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Stdin().Write(payload)
		errc <- err
	}()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(r, got); err != nil {
		return nil, err
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	if !bytes.Equal(got, payload) {
		return ext.ErrorResult("bytes differ"), nil
	}
	return ext.TextResult(fmt.Sprintf("%d ok", conn.PID())), nil
}

// svcBench measures n small round trips from inside the extension to an
// echo process: one the host runs (descriptors or the gRPC stream, as the
// host chose), or, with self, one the extension spawns itself (the floor).
func (e *testExt) svcBench(ctx context.Context, user string, args json.RawMessage) (*ext.CallToolResult, error) {
	var a struct {
		N    int  `json:"n"`
		Self bool `json:"self"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	var (
		w io.Writer
		r *bufio.Reader
	)
	if a.Self {
		cmd := exec.Command(os.Args[0])
		cmd.Env = []string{"HOST_TEST_SERVICE=echo"}
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		defer func() { _ = in.Close(); _ = cmd.Wait() }()
		w, r = in, bufio.NewReader(out)
	} else {
		e.mu.Lock()
		h := e.host
		e.mu.Unlock()
		conn, err := h.ConnectService(ctx, "echo", user)
		if err != nil {
			return nil, err
		}
		defer conn.Release()
		w, r = conn.Stdin(), bufio.NewReader(conn.Stdout())
	}
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	lat := make([]time.Duration, 0, a.N)
	for range a.N {
		start := time.Now()
		if _, err := w.Write(msg); err != nil {
			return nil, err
		}
		if _, err := r.ReadSlice('\n'); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	out, _ := json.Marshal(map[string]float64{
		"p50": float64(lat[len(lat)/2].Nanoseconds()) / 1e3,
		"p99": float64(lat[len(lat)*99/100].Nanoseconds()) / 1e3,
	})
	return &ext.CallToolResult{Content: json.RawMessage(`[]`), StructuredContent: out}, nil
}

func (e *testExt) Retire(_ context.Context, user, name string) error {
	if name == "" {
		e.mu.Lock()
		delete(e.active, user)
		e.mu.Unlock()
	}
	return nil
}
func (e *testExt) ReconcileAll(context.Context) error { return nil }

func (e *testExt) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	var args struct {
		Millis int    `json:"millis"`
		File   string `json:"file"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	switch {
	case req.Name == "t/echo":
		return &ext.CallToolResult{Content: json.RawMessage(`[{"type":"text","text":"ok"}]`), StructuredContent: req.Arguments}, nil
	case req.Name == "t/slow":
		select {
		case <-time.After(time.Duration(args.Millis) * time.Millisecond):
			return ext.TextResult("slept"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case req.Name == "t/env":
		return ext.TextResult(strings.Join(os.Environ(), "\n")), nil
	case req.Name == "t/block":
		<-ctx.Done()
		_ = os.WriteFile(args.File, []byte("cancelled"), 0o600)
		return nil, ctx.Err()
	case req.Name == "t/greet":
		e.mu.Lock()
		h := e.host
		e.mu.Unlock()
		v, err := h.UserStore(req.User).Settings().Get(ctx, "prefs")
		if err != nil {
			return nil, err
		}
		return ext.TextResult(string(v)), nil
	case req.Name == "t/token":
		e.mu.Lock()
		h := e.host
		e.mu.Unlock()
		v, err := h.UserStore(req.User).Secrets().Get(ctx, "token")
		if err != nil {
			return nil, err
		}
		return ext.TextResult(v), nil
	case req.Name == "t/whois":
		var a struct {
			Conversation string `json:"conversation"`
		}
		_ = json.Unmarshal(req.Arguments, &a)
		e.mu.Lock()
		h := e.host
		e.mu.Unlock()
		u, err := h.ActingUser(ctx, a.Conversation)
		if err != nil {
			return nil, err
		}
		return ext.TextResult(u), nil
	case req.Name == "t/svcbench":
		return e.svcBench(ctx, req.User, req.Arguments)
	case req.Name == "t/svc":
		return e.svc(ctx, req.User, req.Arguments)
	case strings.HasPrefix(req.Name, "t/mine_"):
		e.mu.Lock()
		active := e.active[req.User]
		e.mu.Unlock()
		if !active {
			return nil, ext.Errorf(ext.ErrNotFound, "user %q has no active catalog", req.User)
		}
		return ext.TextResult("mine of " + req.User), nil
	}
	return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
}

func testConfig(dir string, mutate func(*host.ExtensionConfig)) *host.Config {
	ec := host.ExtensionConfig{Path: os.Args[0], Env: map[string]string{"HOST_TEST_EXTENSION": "1"}}
	if mutate != nil {
		mutate(&ec)
	}
	raw, _ := json.Marshal(map[string]any{"dataDir": filepath.Join(dir, "data"), "extensions": map[string]any{"t": ec}})
	cfg, err := host.ParseConfig(raw, dir)
	if err != nil {
		panic(err)
	}
	return cfg
}

func newHost(t *testing.T, mutate func(*host.ExtensionConfig)) *host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, testConfig(t.TempDir(), mutate), &host.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestToolsAndCall(t *testing.T) {
	h := newHost(t, nil)
	ctx := context.Background()
	tools, err := h.Tools(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	want := "t/block t/echo t/env t/greet t/mine_alice t/slow t/svc t/svcbench t/token t/whois"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools = %s, want %s", got, want)
	}
	args := json.RawMessage(`{"x":[1,"ü"]}`)
	res, err := h.Call(ctx, "alice", "c1", "t/echo", args)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := res.Fields(); string(f.StructuredContent) != string(args) || res.Text() != "ok" {
		t.Errorf("echo = %+v", res)
	}
	if _, err := h.Call(ctx, "bob", "", "t/mine_alice", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("bob calling alice's tool: %v, want ErrNotFound", err)
	}
	if _, err := h.Call(ctx, "bob", "c1", "t/echo", nil); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("bob using alice's conversation: %v, want ErrPermission", err)
	}
	// The extension learns who is behind a conversation, across the wire.
	res, err = h.Call(ctx, "bob", "c2", "t/whois", json.RawMessage(`{"conversation":"c1"}`))
	if err != nil || res.Text() != "alice" {
		t.Errorf("ActingUser(c1) = %v, %v; want alice", res, err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/whois", json.RawMessage(`{"conversation":"nobody"}`)); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("ActingUser of an unknown conversation: %v, want ErrNotFound", err)
	}
	if _, err := h.Call(ctx, "../etc", "", "t/echo", nil); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("bad user ID: %v, want ErrInvalidArgument", err)
	}
	// Deactivate forgets the activation; the next use activates again.
	if err := h.Deactivate(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.ActiveUsers(), "alice") {
		t.Error("alice is still active after Deactivate")
	}
	if _, err := h.Tools(ctx, "alice"); err != nil || !slices.Contains(h.ActiveUsers(), "alice") {
		t.Errorf("alice was not activated again: %v %v", err, h.ActiveUsers())
	}
	// Settings reach the extension through the host's per-user store.
	if err := h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	res, err = h.Call(ctx, "alice", "", "t/greet", nil)
	if err != nil || res.Text() != `{"greeting":"hi"}` {
		t.Errorf("greet for alice = %v, %v", res, err)
	}
	res, err = h.Call(ctx, "bob", "", "t/greet", nil)
	if err != nil || res.Text() != `{}` {
		t.Errorf("greet for bob = %v, %v; alice's settings leaked?", res, err)
	}
}

func TestHostEnvironmentIsNotInherited(t *testing.T) {
	t.Setenv("AGENTHOST_CANARY_SECRET", "canary-7f3a")
	h := newHost(t, func(ec *host.ExtensionConfig) { ec.Env["FROM_CONFIG"] = "yes" })
	res, err := h.Call(context.Background(), "alice", "", "t/env", nil)
	if err != nil {
		t.Fatal(err)
	}
	env := res.Text()
	if strings.Contains(env, "canary-7f3a") {
		t.Error("the host's environment leaked into the extension")
	}
	if !strings.Contains(env, "FROM_CONFIG=yes") || !strings.Contains(env, "PATH=") {
		t.Errorf("the extension's environment lacks the configured or allowlisted variables:\n%s", env)
	}
}

func TestChecksumMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, func(ec *host.ExtensionConfig) { ec.SHA256 = strings.Repeat("ab", 32) })
	_, err := host.New(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), strings.Repeat("ab", 32)) {
		t.Fatalf("New with a wrong pin: %v; want a clear refusal naming the pin", err)
	}
	// The right pin starts.
	sum := sha256File(t, os.Args[0])
	h := newHost(t, func(ec *host.ExtensionConfig) { ec.SHA256 = sum })
	if got := mustExtensions(t, h)[0].State; got != host.StateRunning {
		t.Errorf("state with the right pin = %s", got)
	}
}

// TestRegisteredNameMustMatch: an extension registered under a name other
// than its descriptor's is refused, in process and as a process, with an
// error naming both, and nothing is left running.
func TestRegisteredNameMustMatch(t *testing.T) {
	ctx := context.Background()
	_, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"other": {Extension: &testExt{}}}})
	if err == nil || !strings.Contains(err.Error(), `registered as "other" describes itself as "t"`) {
		t.Errorf("in process under another name: %v", err)
	}
	dir := t.TempDir()
	raw, _ := json.Marshal(map[string]any{"dataDir": filepath.Join(dir, "data"), "extensions": map[string]any{
		"tee": host.ExtensionConfig{Path: os.Args[0], Env: map[string]string{"HOST_TEST_EXTENSION": "1"}}}})
	cfg, err := host.ParseConfig(raw, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = host.New(ctx, cfg, nil)
	if err == nil || !strings.Contains(err.Error(), `registered as "tee" describes itself as "t"`) {
		t.Errorf("a process under another name: %v", err)
	}
}

func TestCancellationStopsTheHandler(t *testing.T) {
	h := newHost(t, nil)
	file := filepath.Join(t.TempDir(), "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.Call(ctx, "alice", "", "t/block", json.RawMessage(fmt.Sprintf(`{"file":%q}`, file)))
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(file); err == nil && string(b) == "cancelled" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the handler inside the extension process did not see the cancellation")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCrashDuringCalls(t *testing.T) {
	h := newHost(t, nil)
	ctx := context.Background()
	if _, err := h.Tools(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	pid := mustExtensions(t, h)[0].PID
	const callers = 50
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		errs    = make([]error, callers)
	)
	started.Add(callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Done()
			_, errs[i] = h.Call(ctx, "alice", "", "t/slow", json.RawMessage(`{"millis":20000}`))
		}()
	}
	started.Wait()
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ext.ErrUnavailable) || !strings.Contains(err.Error(), `extension "t" is unavailable`) {
			t.Errorf("caller %d: %v; want a clear unavailable error", i, err)
		}
	}
	// The next call succeeds on the restarted extension.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := h.Call(cctx, "alice", "", "t/echo", nil)
	if err != nil || res.Text() != "ok" {
		t.Fatalf("call after the crash: %v, %v", res, err)
	}
	info := mustExtensions(t, h)[0]
	if info.Restarts != 1 {
		t.Errorf("restarts = %d, want exactly 1", info.Restarts)
	}
	if info.PID == pid || info.PID == 0 {
		t.Errorf("pid after restart = %d (before %d)", info.PID, pid)
	}
	if alive(pid) {
		t.Errorf("the crashed process %d is still there", pid)
	}
	// The active user was re-activated: their own tool is back.
	res, err = h.Call(cctx, "alice", "", "t/mine_alice", nil)
	if err != nil || res.Text() != "mine of alice" {
		t.Errorf("alice's tool after restart: %v, %v", res, err)
	}
}

// TestCallsDuringReactivation (issue 17, item 7): after the extension
// crashed and came back, a user's call that arrives before the new process
// has re-activated that user waits for it and then runs, instead of
// reaching a process that does not know the user ("no longer available").
// The test holds the re-activations open (HOST_TEST_HOLD) while every user
// calls.
func TestCallsDuringReactivation(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	h := newHost(t, func(ec *host.ExtensionConfig) { ec.Env["HOST_TEST_HOLD"] = hold })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const users = 12
	name := func(i int) string { return fmt.Sprintf("u%02d", i) }
	for i := range users {
		if _, err := h.Tools(ctx, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	pid := mustExtensions(t, h)[0].PID
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The new process is up (and holding its re-activations).
	for {
		if inf := mustExtensions(t, h)[0]; inf.State == host.StateRunning && inf.PID != pid && inf.PID != 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the extension did not come back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make([]error, users)
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.Call(ctx, name(i), "", "t/mine_"+name(i), nil)
			if err == nil && res.Text() != "mine of "+name(i) {
				err = fmt.Errorf("result %q", res.Text())
			}
			errs[i] = err
		}()
	}
	// Let the calls arrive while the re-activations are held, then let
	// the re-activations finish. (Should the calls come later, they find
	// the users re-activated: the test cannot fail for being slow.)
	time.Sleep(200 * time.Millisecond)
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s's call during the re-activation: %v", name(i), err)
		}
	}
}

func TestExtensionDiesWithTheHost(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HOST_TEST_HOST=1", "HOST_TEST_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var line string
	buf := make([]byte, 256)
	n, _ := out.Read(buf)
	line = strings.TrimSpace(string(buf[:n]))
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "pid" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("host process said %q", line)
	}
	extPID, _ := strconv.Atoi(f[1])
	if !alive(extPID) {
		t.Fatalf("extension %d not running", extPID)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(extPID) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(extPID, syscall.SIGKILL)
			t.Fatalf("extension %d outlived its SIGKILLed host", extPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestActivationHonoursCallersContext: a caller waiting for a user's
// activation gives up when its own context ends, while the activation
// goes on for the others; Close cancels an activation in flight and waits
// for it.
func TestActivationHonoursCallersContext(t *testing.T) {
	newInProc := func(te *testExt) *host.Host {
		h, err := host.New(context.Background(), &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
			&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te}}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	te := &testExt{gate: make(chan struct{})}
	h := newInProc(te)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err := h.Tools(ctx, "slowpoke")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("a caller whose context ended: %v after %v; want its deadline, at once", err, time.Since(start))
	}
	// The activation went on: another caller gets it once it finishes.
	got := make(chan error, 1)
	go func() {
		tools, err := h.Tools(context.Background(), "slowpoke")
		if err == nil && !slices.ContainsFunc(tools, func(tl host.Tool) bool { return tl.Name == "t/mine_slowpoke" }) {
			err = fmt.Errorf("tools %v lack the activated one", tools)
		}
		got <- err
	}()
	close(te.gate)
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// Close while an activation hangs: it is cancelled and joined.
	te2 := &testExt{gate: make(chan struct{})}
	h2 := newInProc(te2)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _ = h2.Tools(ctx, "slowpoke")
	cancel()
	if te2.gateLeft.Load() != 0 {
		t.Fatal("the activation ended before Close")
	}
	closed := make(chan error, 1)
	go func() { closed <- h2.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return while an activation hung")
	}
	if te2.gateLeft.Load() != 1 {
		t.Error("Close returned before the activation in flight ended")
	}
	if _, err := h2.Tools(context.Background(), "bob"); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("after Close: %v, want unavailable", err)
	}
}
