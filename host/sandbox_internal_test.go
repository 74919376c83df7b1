package host

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/services"
)

// TestSandboxHidesOperatorFile: the operator's file holds secrets (the
// environment and headers of the operator's servers); a sandboxed process
// shown the folder it lies in (a readable path, or /etc where an operator
// keeps it) does not read it.
func TestSandboxHidesOperatorFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, DefaultConfigFile)
	const canary = "OPERATOR-FILE-CANARY"
	conf := `{"dataDir": "` + t.TempDir() + `", "extensions": {"x": {"path": "/bin/true", "disabled": true, "env": {"API_KEY": "` + canary + `"}}}}`
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	data := cfg.DataPath()
	m := newServices(cfg, data, 200*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.Close()
	if kind, err := m.Sandboxing(); kind == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and bwrap is missing: %v", err)
		}
		t.Skipf("SKIPPED: needs bwrap (apt-get install bubblewrap): %v (under CI=true this fails)", err)
	}
	h, err := m.Connect(context.Background(), services.Key{Extension: "x", Service: "probe", User: "alice"}, filepath.Join(data, "users", "alice"),
		func(context.Context) (*ext.ProcessSpec, error) {
			return &ext.ProcessSpec{Command: "/bin/sh", Args: []string{"-c", `cat "$0" 2>/dev/null; echo end`, file},
				ReadablePaths: []string{dir}, Sandbox: true, OneSession: true}, nil
		})
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	defer h.Release()
	b, _ := io.ReadAll(h.Stdout()) // until the probe exits
	out := string(b)
	if !strings.HasSuffix(out, "end\n") {
		t.Fatalf("the probe did not run to its end: %q", out)
	}
	if strings.Contains(out, canary) {
		t.Errorf("a sandboxed process read the operator's file: %q", out)
	}
}
