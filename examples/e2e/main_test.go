package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(int) { testbin.Cleanup() }))
}

const pkg = "github.com/agenthost/agenthost/"

// bins builds the binaries the tests run.
type bins struct{ agenthost, extMCP, notes, bearer, oauth, hello string }

func build(t *testing.T) bins {
	var b bins
	var wg sync.WaitGroup
	for p, dst := range map[string]*string{
		pkg + "host/cmd/agenthost":            &b.agenthost,
		pkg + "ext-mcp/cmd/agenthost-ext-mcp": &b.extMCP,
		pkg + "examples/servers/notes":        &b.notes,
		pkg + "examples/servers/bearer":       &b.bearer,
		pkg + "examples/servers/oauth":        &b.oauth,
		pkg + "examples/hello":                &b.hello,
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*dst = testbin.Build(t, p)
		}()
	}
	wg.Wait()
	return b
}

// env is a config folder and the commands run against it.
type env struct {
	t        *testing.T
	bin      bins
	dir      string
	cfg      string
	serve    *exec.Cmd
	serveOut *lockedBuffer
	// serveEnv is added to the environment of `agenthost serve`.
	serveEnv []string
	// url is the base URL the running host serves.
	url string
	// stopServe stops the running host (SIGTERM, then a kill after 15 s)
	// and waits for it; the test's cleanup calls it too.
	stopServe func()
}

func newEnv(t *testing.T, b bins, mcpConfig map[string]any, more ...map[string]any) *env {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{
		"dataDir": "data",
		"listen":  "127.0.0.1:0",
		"secrets": map[string]any{"backend": "file"},
		"extensions": map[string]any{
			"mcp": map[string]any{"path": b.extMCP, "config": mcpConfig},
		},
	}
	for _, m := range more {
		for k, v := range m {
			if k == "extensions" {
				for n, x := range v.(map[string]any) {
					cfg["extensions"].(map[string]any)[n] = x
				}
				continue
			}
			cfg[k] = v
		}
	}
	raw, _ := json.MarshalIndent(cfg, "", "  ")
	p := filepath.Join(dir, "agenthost.json")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, bin: b, dir: dir, cfg: p}
}

// startServe runs `agenthost serve` (with flags before the verb, such as
// a log level) and waits until its control socket answers.
func (e *env) startServe(flags ...string) {
	e.t.Helper()
	args := append(append([]string{"--config", e.cfg, "--log-level", "warn"}, flags...), "serve")
	cmd := exec.Command(e.bin.agenthost, args...)
	if e.serveEnv != nil {
		cmd.Env = append(os.Environ(), e.serveEnv...)
	}
	pr, pw, _ := os.Pipe()
	cmd.Stdout = pw
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	_ = pw.Close()
	e.serve, e.serveOut = cmd, logs
	var stop sync.Once
	e.stopServe = func() { stop.Do(func() { stopServeProcess(e.t, cmd) }) }
	e.t.Cleanup(func() {
		e.stopServe()
		if e.t.Failed() {
			e.t.Logf("host log:\n%s", logs.String())
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	_ = pr.Close()
	if err != nil || !strings.Contains(line, "serving") {
		e.t.Fatalf("serve did not start: %q %v\n%s", line, err, logs.String())
	}
	if i := strings.Index(line, " at "); i >= 0 {
		e.url = strings.Fields(line[i+4:])[0]
	}
}

// stopServeProcess stops a started `agenthost serve` with SIGTERM (a kill
// and a test error after 15 s) and waits for it.
func stopServeProcess(t *testing.T, cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Error("agenthost serve did not stop within 15s of SIGTERM")
	}
}

// run runs the CLI; stdin may be empty.
func (e *env) run(stdin string, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin.agenthost, append([]string{"--config", e.cfg}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	return o.String(), er.String(), code
}

// must runs the CLI and fails the test on a non-zero exit.
func (e *env) must(stdin string, args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(stdin, args...)
	if code != 0 {
		e.t.Fatalf("agenthost %v: exit %d\n%s\n%s", args, code, out, errOut)
	}
	return out
}

// toolNames lists a user's tool names (also while some of their servers
// wait for a sign-in: the command then exits 1, saying so).
func (e *env) toolNames(user string) []string {
	e.t.Helper()
	out, errOut, code := e.run("", "tools", "--user", user, "--json")
	if code != 0 && (code != 1 || !strings.Contains(errOut, "needs sign-in")) {
		e.t.Fatalf("agenthost tools --user %s: exit %d\n%s\n%s", user, code, out, errOut)
	}
	var tools []struct{ Name string }
	if err := json.Unmarshal([]byte(out), &tools); err != nil {
		e.t.Fatal(err)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return names
}

func hasPrefix(names []string, prefix string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// eventually retries cond until it holds or 20s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pidsWithEnv returns the processes whose environment holds kv.
func pidsWithEnv(kv string) []int {
	return testbin.Processes(func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "environ"))
		return err == nil && slices.ContainsFunc(bytes.Split(b, []byte{0}), func(e []byte) bool { return string(e) == kv })
	})
}

// freePort returns a free loopback port.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lockedBuffer collects a process's output (safe for concurrent use).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
