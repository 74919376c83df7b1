package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestDemoConfigServes runs `make run`'s config (examples/agenthost.json)
// as written, its binaries in place of ../bin: every extension starts, the
// demo user has the notes tools and code__run, and a script calls a notes
// tool (code mode reaches the demo's notes server, writes included).
func TestDemoConfigServes(t *testing.T) {
	b := build(t)
	codemodeBin := testbin.Build(t, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	raw, err := os.ReadFile("../agenthost.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		`"../bin/agenthost-ext-codemode"`, quote(codemodeBin),
		`"../bin/agenthost-ext-mcp"`, quote(b.extMCP),
		`"../bin/notes"`, quote(b.notes),
		`"../bin/hello"`, quote(b.hello),
		`"127.0.0.1:7777"`, `"127.0.0.1:0"`,
		`"../.agenthost"`, `"data"`,
	).Replace(string(raw))
	if strings.Contains(cfg, "../bin/") {
		t.Fatalf("the demo config names a binary this test does not build:\n%s", cfg)
	}
	dir := t.TempDir()
	e := &env{t: t, bin: b, dir: dir, cfg: filepath.Join(dir, "agenthost.json")}
	if err := os.WriteFile(e.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e.startServe()
	c, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", "demo", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := map[string]bool{}
	for tool, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names[tool.Name] = true
	}
	for _, want := range []string{"notes__echo", "notes__add_note", "code__run"} {
		if !names[want] {
			t.Errorf("the demo user has no %s (has %v)", want, names)
		}
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code__run", Arguments: map[string]any{
		"code": `await tools.notes.add_note({text: "from code"}); return await tools.notes.list_notes({});`}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(res), "from code") {
		t.Errorf("a script in the demo = %s", text(res))
	}
}
