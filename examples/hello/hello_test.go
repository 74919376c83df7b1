package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/examples/internal/testbin"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(int) { testbin.Cleanup() }))
}

func writeConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := testbin.Build(t, "github.com/agenthost/agenthost/examples/hello")
	cfg := map[string]any{"dataDir": "data", "extensions": map[string]any{"hello": map[string]any{"path": bin}}}
	b, _ := json.Marshal(cfg)
	p := filepath.Join(dir, "agenthost.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelloThroughTheGoAPI(t *testing.T) {
	cfg, err := host.LoadConfig(writeConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tools, err := h.Tools(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0].Name != "hello/greet" || tools[0].Extension != "hello" {
		t.Fatalf("tools = %+v", tools)
	}
	res, err := h.Call(ctx, "alice", "", "hello/greet", json.RawMessage(`{"name":"Ann"}`))
	if err != nil || res.Text() != "Hello, Ann!" || res.IsError {
		t.Fatalf("greet = %+v, %v", res, err)
	}
	if err := h.SetSettings(ctx, "alice", "hello", "greeting", json.RawMessage(`{"greeting":"Bonjour"}`)); err != nil {
		t.Fatal(err)
	}
	res, _ = h.Call(ctx, "alice", "", "hello/greet", json.RawMessage(`{"name":"Ann"}`))
	if res.Text() != "Bonjour, Ann!" {
		t.Errorf("after settings = %q", res.Text())
	}
	res, _ = h.Call(ctx, "bob", "", "hello/greet", json.RawMessage(`{"name":"Ann"}`))
	if res.Text() != "Hello, Ann!" {
		t.Errorf("bob sees %q; alice's settings must not leak", res.Text())
	}
	res, err = h.Call(ctx, "alice", "", "hello/greet", json.RawMessage(`{}`))
	if err != nil || !res.IsError {
		t.Errorf("missing name = %+v, %v; want an IsError result", res, err)
	}
	if _, err := h.Call(ctx, "alice", "", "hello/nope", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("unknown tool: %v", err)
	}
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := testbin.Build(t, "github.com/agenthost/agenthost/host/cmd/agenthost")
	cmd := exec.Command(bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func TestHelloThroughTheCLI(t *testing.T) {
	cfg := writeConfig(t)
	out, errOut, code := runCLI(t, "--config", cfg, "tools", "--user", "alice")
	if code != 0 || !strings.Contains(out, "hello/greet") || !strings.Contains(out, "direct") {
		t.Fatalf("tools: code %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = runCLI(t, "--config", cfg, "tools", "--user", "alice", "--json")
	var tools []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &tools) != nil || len(tools) != 1 || tools[0]["name"] != "hello/greet" {
		t.Fatalf("tools --json: code %d\n%s", code, out)
	}
	out, errOut, code = runCLI(t, "--config", cfg, "call", "--user", "alice", "hello/greet", `{"name":"Ann"}`)
	if code != 0 || !strings.Contains(out, "Hello, Ann!") {
		t.Fatalf("call: code %d\n%s\n%s", code, out, errOut)
	}
	// A failed tool is exit status 1; bad usage is 2; errors go to stderr.
	_, errOut, code = runCLI(t, "--config", cfg, "call", "--user", "alice", "hello/greet", `{}`)
	if code != 1 || !strings.Contains(errOut, "failed") {
		t.Errorf("failing tool: code %d, stderr %q", code, errOut)
	}
	_, errOut, code = runCLI(t, "--config", cfg, "call", "--user", "alice", "hello/greet", `{not json`)
	if code != 2 || !strings.Contains(errOut, "not valid JSON") {
		t.Errorf("bad JSON: code %d, stderr %q", code, errOut)
	}
	_, _, code = runCLI(t, "--config", cfg, "tools")
	if code != 2 {
		t.Errorf("missing --user: code %d, want 2", code)
	}
	_, _, code = runCLI(t, "--config", cfg, "frobnicate")
	if code != 2 {
		t.Errorf("unknown verb: code %d, want 2", code)
	}
	_, errOut, code = runCLI(t, "--config", filepath.Join(t.TempDir(), "missing.json"), "tools", "--user", "a")
	if code != 1 || !strings.Contains(errOut, "missing.json") {
		t.Errorf("missing config: code %d, stderr %q", code, errOut)
	}
	out, _, code = runCLI(t, "--config", cfg, "ext", "list")
	if code != 0 || !strings.Contains(out, "hello") || !strings.Contains(out, "running") {
		t.Errorf("ext list: code %d\n%s", code, out)
	}
	out, _, code = runCLI(t, "version")
	if code != 0 || !strings.Contains(out, "agenthost") {
		t.Errorf("version: code %d %q", code, out)
	}
}
