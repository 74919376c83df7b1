package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// TestCodeModeScopedToken: a scoped token's /mcp session (token create
// --servers notes) lists code__run with the declarations of its scope's
// tools only (no name of another server's), search_tools finds no
// codemode tool outside the scope, and a script's tools.call of an
// out-of-scope tool fails as unknown while an in-scope one runs; a token
// whose scope leaves code no tool has no code__run at all.
func TestCodeModeScopedToken(t *testing.T) {
	b := build(t)
	codemodeBin := testbin.Build(t, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{
			"notes":  map[string]any{"command": b.notes, "tools": map[string]any{"*": "codemode"}},
			"secret": map[string]any{"command": b.notes, "tools": map[string]any{"*": "codemode"}},
			"plain":  map[string]any{"command": b.notes},
		},
	}, map[string]any{"extensions": map[string]any{"code": map[string]any{"path": codemodeBin, "config": map[string]any{
		"openServers": []string{"notes", "secret"},
	}}}})
	e.startServe()
	ctx := context.Background()
	token := func(servers string) string {
		return strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "s-"+servers, "--servers", servers))
	}
	describe := func(c *client) string {
		t.Helper()
		for tool, err := range c.cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if tool.Name == "code__run" {
				if tool.Meta != nil {
					if _, ok := tool.Meta["agenthost/scopedDescription"]; ok {
						t.Errorf("code__run is listed with its description's parts in _meta")
					}
				}
				return tool.Description
			}
		}
		return ""
	}

	// Unscoped: both servers are declared.
	whole, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "all")))
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(whole); !strings.Contains(d, "notes: {") || !strings.Contains(d, "secret: {") {
		t.Fatalf("the unscoped code__run does not declare both servers:\n%s", d)
	}

	scoped, err := connect(t, e.url, token("notes"))
	if err != nil {
		t.Fatal(err)
	}
	d := describe(scoped)
	if d == "" {
		t.Fatal("the scoped session (servers notes) has no code__run")
	}
	if !strings.Contains(d, "notes: {") || !strings.Contains(d, "list_notes(args") || strings.Contains(d, "secret") {
		t.Errorf("the scoped code__run's description, want notes' declarations only:\n%s", d)
	}
	if sr, err := scoped.call(t, "search_tools", map[string]any{"query": "notes"}); err != nil {
		t.Errorf("search_tools: %v", err)
	} else if strings.Contains(text(sr), "secret") || !strings.Contains(text(sr), "notes/list_notes") {
		t.Errorf("the scoped search_tools, want notes' codemode tools only: %s", text(sr))
	}
	res, o, err := runCode(t, ctx, scoped, `return (await tools.notes.list_notes({})).notes;`, nil)
	if err != nil || res.IsError || o.Error != nil {
		t.Fatalf("an in-scope call from a scoped script: %v %+v %s", err, o.Error, text(res))
	}
	_, o, err = runCode(t, ctx, scoped, `return await tools.call("secret/list_notes", {});`, nil)
	if err != nil || o.Error == nil || !strings.Contains(o.Error.Message, "secret/list_notes") || !strings.Contains(o.Error.Message, "not one code may call") {
		t.Errorf("an out-of-scope tools.call: %v %+v, want it unknown", err, o.Error)
	}

	// A scope that leaves code no tool: no code__run.
	plain, err := connect(t, e.url, token("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(plain); d != "" {
		t.Errorf("a scope without code-reachable tools lists code__run:\n%s", d)
	}
	if r, err := plain.call(t, "code__run", map[string]any{"code": "return 1"}); err == nil && !r.IsError {
		t.Errorf("code__run called in a scope without code-reachable tools: %s", text(r))
	}
}
