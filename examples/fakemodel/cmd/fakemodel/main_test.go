package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// TestCommand: the built command prints its URL, answers a Messages
// request with the scripted tool call, writes the record file, and
// exits 0 on SIGTERM.
func TestCommand(t *testing.T) {
	bin := testbin.Build(t, "github.com/agenthost/agenthost/examples/fakemodel/cmd/fakemodel")
	rec := filepath.Join(t.TempDir(), "rec.json")
	cmd := exec.Command(bin, "-tool", "t", "-input", `{"a":1}`, "-record", rec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://127.0.0.1:") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("first line %q %v", line, err)
	}
	res, err := http.Post(strings.TrimSpace(line)+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","tools":[{"name":"t"}],"messages":[{"role":"user","content":"go"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var msg struct{ Content []struct{ Type, Name string } }
	_ = json.NewDecoder(res.Body).Decode(&msg)
	_ = res.Body.Close()
	if len(msg.Content) != 1 || msg.Content[0].Name != "t" {
		t.Errorf("answer %+v, want a tool_use of t", msg)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	b, err := os.ReadFile(rec)
	if err != nil || !strings.Contains(string(b), `"Answer": "tool_use"`) {
		t.Errorf("record file: %v\n%s", err, b)
	}
}
