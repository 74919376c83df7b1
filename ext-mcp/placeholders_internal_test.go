package extmcp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestPlaceholdersParse: ${user} and ${userDir} are accepted in args, env,
// cwd and (${user} only) headers; anything else is a load error naming the
// field, and env and header values are not quoted.
func TestPlaceholdersParse(t *testing.T) {
	if _, err := ParseConfig(json.RawMessage(`{"mcpServers": {
		"mem": {"command": "x", "args": ["--db=${userDir}/db", "$${literal}"], "env": {"F": "${userDir}/m.jsonl", "U": "${user}"}, "cwd": "${userDir}"},
		"web": {"url": "https://h/mcp", "headers": {"X-User": "${user}"}}}}`)); err != nil {
		t.Fatalf("valid placeholders refused: %v", err)
	}
	_, err := ParseConfig(json.RawMessage(`{"mcpServers": {
		"a": {"command": "x", "args": ["${home}"], "env": {"S": "${sekrit}"}, "cwd": "${userDir"},
		"w": {"url": "https://h/mcp", "headers": {"X-Dir": "${userDir}"}}}}`))
	want := []string{
		"mcpServers.a.args[0]: unknown placeholder ${home}",
		"mcpServers.a.env.S: has an unknown placeholder",
		"mcpServers.a.cwd: has a ${ without its closing }",
		"mcpServers.w.headers.X-Dir: ${userDir} names a folder of this machine",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v; want it to say %q", err, w)
		}
	}
	if err != nil && strings.Contains(err.Error(), "sekrit") {
		t.Errorf("an env value is quoted in %v", err)
	}
	if got := expand("a-${user}-$${user}-${userDir}", "alice", "/d"); got != "a-alice-${user}-/d" {
		t.Errorf("expand = %q", got)
	}
}

// TestPlaceholdersSpec: each user's process spec carries their own id and
// folder (the HOME the host gives the process), the sandboxed one the
// sandbox's folder.
func TestPlaceholdersSpec(t *testing.T) {
	h := &pathsHost{dir: t.TempDir()}
	x := New(nil)
	s := Server{Command: "/usr/bin/srv", Args: []string{"--user=${user}"}, Env: map[string]string{"MEMORY_FILE_PATH": "${userDir}/memory.jsonl"}, Cwd: "${userDir}"}
	specs := map[string][]string{}
	for _, u := range []string{"alice", "bob"} {
		sp, err := x.processSpec(context.Background(), h, "mem", u, &userSpec{spec: &spec{name: "mem", server: s}})
		if err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(h.dir, u, "data")
		if sp.Dir != data || !slices.Equal(sp.Args, []string{"--user=" + u}) || !slices.Contains(sp.Env, "MEMORY_FILE_PATH="+data+"/memory.jsonl") {
			t.Errorf("%s's spec: dir %q args %q env %q", u, sp.Dir, sp.Args, sp.Env)
		}
		specs[u] = sp.Env
	}
	on := true
	s.Sandbox = &on
	sp, err := x.processSpec(context.Background(), h, "mem", "alice", &userSpec{spec: &spec{name: "mem", server: s}})
	if err != nil {
		t.Fatal(err)
	}
	if box := filepath.Join(h.dir, "alice", "sandbox"); sp.Dir != box || slices.Contains(sp.ReadablePaths, box) {
		t.Errorf("sandboxed spec: dir %q readable %q; want %s, not listed as readable", sp.Dir, sp.ReadablePaths, box)
	}
}

// TestCommandCheck: a stdio command that is missing or not executable is
// refused at load, naming the server; one on PATH or beside the file
// passes.
func TestCommandCheck(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "ok"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := parseConfig(json.RawMessage(`{"mcpServers": {"good": {"command": "bin/ok"}, "path": {"command": "sh"},
		"notes": {"command": "bin/notez"}, "nx": {"command": "bin/noexec"}, "gone": {"command": "no-such-program-g17"},
		"off": {"command": "bin/missing", "enabled": false}}}`), base, true)
	for _, w := range []string{`mcpServers.notes.command: "bin/notez" not found`, `mcpServers.nx.command: "bin/noexec" is not executable`,
		`mcpServers.gone.command: "no-such-program-g17" not found on PATH`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v; want %q", err, w)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "good") || strings.Contains(err.Error(), "path.") || strings.Contains(err.Error(), "off")) {
		t.Errorf("a runnable or switched-off server is refused: %v", err)
	}
}

// TestFixedPaths: a writable file path (to be created, or existing) is
// named; folders, read-only system files and placeholder paths are not.
func TestFixedPaths(t *testing.T) {
	d := t.TempDir()
	ro := filepath.Join(d, "ro.json")
	if err := os.WriteFile(ro, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	s := Server{Command: "/usr/bin/node", Args: []string{"server.js", "--db=" + d + "/a.db", d, "/usr/bin/env", "/no/such/dir/x", ro},
		Env: map[string]string{"MEMORY_FILE_PATH": d + "/memory.jsonl", "OK": "${userDir}/m.jsonl", "N": "3"}}
	got := fixedPaths(s, "/usr/bin/node")
	if !slices.Equal(got, []string{"args[1]", "env.MEMORY_FILE_PATH"}) {
		t.Errorf("fixedPaths = %q; want args[1], env.MEMORY_FILE_PATH", got)
	}
	if perUser(s) == false {
		t.Error("a server with ${userDir} in env is not per user")
	}
}

// pathsHost gives each user a folder under dir, as the host does.
type pathsHost struct {
	ext.Host
	dir string
}

func (h *pathsHost) UserStore(user string) ext.UserStore {
	return pathsStore{dir: filepath.Join(h.dir, user)}
}

type pathsStore struct {
	ext.UserStore
	dir string
}

func (s pathsStore) Paths(context.Context) (ext.Paths, error) {
	return ext.Paths{Data: filepath.Join(s.dir, "data"), State: filepath.Join(s.dir, "state"), Cache: filepath.Join(s.dir, "cache")}, nil
}
