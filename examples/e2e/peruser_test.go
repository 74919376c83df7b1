package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// memoryBin returns the pinned @modelcontextprotocol/server-memory (a
// knowledge graph kept in one file, MEMORY_FILE_PATH) that ext-mcp's
// interop tests install (ext-mcp/testdata/npm). Missing, the test is
// skipped loudly, except under CI=true, where it fails.
func memoryBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("../../ext-mcp/testdata/npm/node_modules/.bin/mcp-server-memory")
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and @modelcontextprotocol/server-memory is missing (%v): .ci/run installs it with `npm ci` in ext-mcp/testdata/npm", err)
	}
	t.Skipf("SKIPPING THE PER-USER PLACEHOLDER TEST: @modelcontextprotocol/server-memory is missing (%v): run `npm ci` in ext-mcp/testdata/npm; under CI=true this fails", err)
	return ""
}

// TestPerUserPlaceholders (issue 17): the operator's stateful stdio server
// (the real server-memory) with MEMORY_FILE_PATH under ${userDir} keeps
// each user's graph in their own folder, so bob never reads alice's; the
// same server with one fixed path is warned about when the file loads (and
// does share the graph: the leak the placeholder closes).
func TestPerUserPlaceholders(t *testing.T) {
	mem := memoryBin(t)
	b := build(t)
	fixed := filepath.Join(t.TempDir(), "memory.jsonl")
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{
			"mine":   map[string]any{"command": mem, "env": map[string]string{"MEMORY_FILE_PATH": "${userDir}/memory.jsonl"}},
			"shared": map[string]any{"command": mem, "env": map[string]string{"MEMORY_FILE_PATH": fixed}},
		},
	})
	if out := e.must("", "config", "check"); strings.TrimSpace(out) != "ok" {
		t.Errorf("config check = %q; want ok", out)
	}
	e.startServe()

	const canary = "alice-private-canary"
	create := `{"entities": [{"name": "` + canary + `", "entityType": "person", "observations": ["lives at 1 Secret Lane"]}]}`
	e.must("", "call", "--user", "alice", "mine/create_entities", create)
	e.must("", "call", "--user", "alice", "shared/create_entities", create)
	if out := e.must("", "call", "--user", "alice", "mine/read_graph", "{}"); !strings.Contains(out, canary) {
		t.Fatalf("alice does not read back her own graph: %s", out)
	}
	if out := e.must("", "call", "--user", "bob", "mine/read_graph", "{}"); strings.Contains(out, canary) {
		t.Errorf("bob read alice's graph through a ${userDir} path: %s", out)
	}
	file := filepath.Join(e.dir, "data", "users", "alice", "mcp", "data", "memory.jsonl")
	if raw, err := os.ReadFile(file); err != nil || !strings.Contains(string(raw), canary) {
		t.Errorf("alice's graph is not in her own folder %s: %v", file, err)
	}
	// The fixed path: one file for everyone, which the host warned about.
	if out := e.must("", "call", "--user", "bob", "shared/read_graph", "{}"); !strings.Contains(out, canary) {
		t.Errorf("the fixed-path server did not share the graph (the test no longer shows the leak): %s", out)
	}
	logs := e.serveOut.String()
	if !strings.Contains(logs, "several users run names one fixed writable path") || !strings.Contains(logs, "server=shared") ||
		!strings.Contains(logs, "env.MEMORY_FILE_PATH") {
		t.Errorf("no load-time warning naming shared's env.MEMORY_FILE_PATH:\n%s", logs)
	}
	if strings.Contains(logs, "server=mine") {
		t.Errorf("the per-user server is warned about:\n%s", logs)
	}
}

// TestConfigCheck (issue 17): `agenthost config check` validates the file
// and each extension's config without serving: ok and exit 0 on a good
// file; every problem, naming its field, and exit 1 on a file with an
// unknown field or a stdio command that does not exist; no data folder is
// made.
func TestConfigCheck(t *testing.T) {
	b := build(t)
	for name, tc := range map[string]struct {
		mcp  map[string]any
		more map[string]any
		want []string
	}{
		"good":               {mcp: map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes, "env": map[string]string{"F": "${userDir}/f"}}}}},
		"unknown host field": {more: map[string]any{"listn": "127.0.0.1:0"}, want: []string{`unknown field "listn"`}},
		"unknown server field": {mcp: map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"comand": b.notes}}},
			want: []string{`mcpServers.notes.comand: unknown field (did you mean "command"?)`}},
		"missing command": {mcp: map[string]any{"mcpServers": map[string]any{
			"notes": map[string]any{"command": "bin/notez"},
			"x":     map[string]any{"command": "sh", "args": []string{"${home}"}},
		}}, want: []string{`mcpServers.notes.command: "bin/notez" not found`, "mcpServers.x.args[0]: unknown placeholder ${home}"}},
	} {
		t.Run(name, func(t *testing.T) {
			var more []map[string]any
			if tc.more != nil {
				more = append(more, tc.more)
			}
			e := newEnv(t, b, tc.mcp, more...)
			out, errOut, code := e.run("", "config", "check")
			switch {
			case tc.want == nil && (code != 0 || strings.TrimSpace(out) != "ok"):
				t.Errorf("config check: exit %d, %q %q; want ok, exit 0", code, out, errOut)
			case tc.want != nil && code != 1:
				t.Errorf("config check: exit %d, %q %q; want exit 1", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("config check says %q; want %q", errOut, w)
				}
			}
			if _, err := os.Stat(filepath.Join(e.dir, "data")); !os.IsNotExist(err) {
				t.Errorf("config check made the data folder (%v)", err)
			}
		})
	}
}
