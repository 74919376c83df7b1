package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/fakemodel"
)

// claudeBin returns Claude Code's CLI as pinned in testdata/claude.
// Missing, the test is skipped loudly, except under CI=true, where it
// fails; installed at another version than the lockfile pins (what the
// README's profile was checked with), it fails.
func claudeBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("testdata/claude/node_modules/.bin/claude")
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			checkClaudeVersion(t, bin)
			return bin
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and @anthropic-ai/claude-code is missing (%v): .ci/run installs it with `npm ci` in examples/e2e/testdata/claude", err)
	}
	t.Skipf("SKIPPING THE CLAUDE CODE END-TO-END TEST: @anthropic-ai/claude-code is missing (%v): run `npm ci` in examples/e2e/testdata/claude; under CI=true this fails", err)
	return ""
}

// checkClaudeVersion fails the test when bin --version is not the
// version testdata/claude/package-lock.json pins.
func checkClaudeVersion(t *testing.T, bin string) {
	t.Helper()
	raw, err := os.ReadFile("testdata/claude/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct{ Version string }
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatalf("testdata/claude/package-lock.json: %v", err)
	}
	pinned := lock.Packages["node_modules/@anthropic-ai/claude-code"].Version
	cmd := exec.Command(bin, "--version")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	out, err := cmd.Output()
	if v, _, _ := strings.Cut(string(out), " "); err != nil || pinned == "" || v != pinned {
		t.Fatalf("claude --version = %q (%v), the lockfile pins %q: run `npm ci` in examples/e2e/testdata/claude", out, err, pinned)
	}
}

// claudeRun is one run of `claude -p` and what came of it.
type claudeRun struct {
	code           int
	stdout, stderr string
	home           string
	out            struct {
		Result            string `json:"result"`
		IsError           bool   `json:"is_error"`
		NumTurns          int    `json:"num_turns"`
		Subtype           string `json:"subtype"`
		PermissionDenials []struct {
			ToolName string `json:"tool_name"`
		} `json:"permission_denials"`
	}
}

// claudeArgs is what a run of the CLI is given.
type claudeArgs struct {
	mcpURL, token string
	// modelURL is the stand-in's.
	modelURL, prompt string
	allowed          []string
	// maxTurns (default 3) and budget (USD, default "1") are the limits.
	maxTurns int
	budget   string
}

// runClaude runs Claude Code's CLI as the runner's Claude Code profile
// does (examples/fakemodel's doc): an MCP configuration reaching only our
// /mcp with the token, no built-in tools, allowed the given tools, against
// the stand-in, in a folder of its own with a HOME of its own and an
// environment holding nothing of ours but what it names.
func runClaude(t *testing.T, bin string, a claudeArgs) *claudeRun {
	t.Helper()
	mcpURL, token := a.mcpURL, a.token
	if a.maxTurns == 0 {
		a.maxTurns = 3
	}
	if a.budget == "" {
		a.budget = "1"
	}
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"agenthost": map[string]any{
		"type": "http", "url": mcpURL + "/mcp",
		"headers": map[string]string{"Authorization": "Bearer " + token},
	}}})
	cfgFile := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	run := &claudeRun{home: filepath.Join(dir, "home")}
	work := filepath.Join(dir, "work")
	for _, d := range []string{run.home, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A bound for a hung CLI, not an assertion on its speed.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", a.prompt,
		"--mcp-config", cfgFile, "--strict-mcp-config",
		"--tools", "",
		"--allowedTools", strings.Join(a.allowed, ","),
		"--disallowedTools", "Bash,Read,Write,Edit,MultiEdit,NotebookEdit,Glob,Grep,WebFetch,WebSearch,Agent,Task",
		"--max-turns", strconv.Itoa(a.maxTurns), "--max-budget-usd", a.budget,
		"--no-session-persistence",
		"--output-format", "json")
	cmd.Dir = work
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + run.home,
		"ANTHROPIC_BASE_URL=" + a.modelURL,
		"ANTHROPIC_API_KEY=sk-ant-dummy-for-the-stand-in",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"ENABLE_TOOL_SEARCH=false",
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		run.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running claude: %v", err)
	}
	// The token is in the MCP configuration file and nowhere else the CLI
	// writes: not its output (kept for failure messages with the token
	// blanked), not its HOME (config, caches, MCP logs).
	if strings.Contains(o.String()+e.String(), token) {
		t.Error("claude printed the token")
	}
	run.stdout = strings.ReplaceAll(o.String(), token, "[token]")
	run.stderr = strings.ReplaceAll(e.String(), token, "[token]")
	if err := json.Unmarshal(o.Bytes(), &run.out); err != nil {
		t.Fatalf("claude -p --output-format json printed no JSON (exit %d): %v\nstdout: %s\nstderr: %s", run.code, err, run.stdout, run.stderr)
	}
	_ = filepath.WalkDir(run.home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(token)) {
			t.Errorf("claude wrote the token into %s", p)
		}
		return nil
	})
	return run
}

// claudeEnv starts the host with ext-mcp, alice's notes server and a
// second server (other, the same program), and makes alice a token
// limited to notes, expiring in 30 minutes, as the runner would mint it.
// It returns the token and its ID.
func claudeEnv(t *testing.T) (e *env, token, id string) {
	t.Helper()
	b := build(t)
	e = newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": b.notes},
		"other": map[string]any{"command": b.notes},
	}})
	e.startServe()
	token = strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "claude", "--servers", "notes", "--expires", "30m"))
	var toks []struct{ ID, Name string }
	if err := json.Unmarshal([]byte(e.must("", "token", "list", "--user", "alice", "--json")), &toks); err != nil || len(toks) != 1 {
		t.Fatalf("token list: %v %+v", err, toks)
	}
	return e, token, toks[0].ID
}

// claudeToolNames is the names Claude Code gives alice's tools of server
// on our /mcp (server "agenthost" in its MCP configuration):
// notes/add_note is notes__add_note on /mcp and
// mcp__agenthost__notes__add_note to the CLI.
func claudeToolNames(e *env, server string) []string {
	var names []string
	for _, n := range e.toolNames("alice") {
		if s, tool, ok := strings.Cut(n, "/"); ok && s == server {
			names = append(names, "mcp__agenthost__"+s+"__"+tool)
		}
	}
	slices.Sort(names)
	return names
}

// TestClaudeCodeCallsOurTool runs the real `claude -p` (Claude Code's CLI
// from npm) offline: its model is examples/fakemodel on loopback, which
// answers the first turn with a call of mcp__agenthost__notes__add_note.
// The CLI, given an MCP configuration with alice's token scoped to notes,
// exits 0 with the stand-in's final text; the stand-in was offered
// exactly alice's notes tools (none of her other server's, no built-in
// tool such as Bash); the tool ran on our /mcp with that token (the audit
// log records the call by the token's ID, and the note is in alice's
// notes) and its result went back to the model. The token is written
// nowhere but the MCP configuration file.
func TestClaudeCodeCallsOurTool(t *testing.T) {
	bin := claudeBin(t)
	e, token, id := claudeEnv(t)
	const note = "written by Claude Code through agenthost"
	fm := fakemodel.New(fakemodel.Script{
		Tool:  "mcp__agenthost__notes__add_note",
		Input: map[string]any{"text": note},
		Final: "The note is added.",
	})
	model := httptest.NewServer(fm)
	defer model.Close()

	run := runClaude(t, bin, claudeArgs{mcpURL: e.url, token: token, modelURL: model.URL,
		prompt: "Add a note: " + note, allowed: []string{"mcp__agenthost__notes__add_note"}})
	if run.code != 0 || run.out.IsError || run.out.Result != "The note is added." || len(run.out.PermissionDenials) != 0 {
		t.Fatalf("claude exited %d: %+v\nstdout: %s\nstderr: %s", run.code, run.out, run.stdout, run.stderr)
	}

	reqs := fm.Requests()
	if len(reqs) != 2 || reqs[0].Answer != "tool_use" || reqs[1].Answer != "final" {
		t.Fatalf("the stand-in answered %d requests (%+v), want a tool_use then the final text", len(reqs), reqs)
	}
	want := claudeToolNames(e, "notes")
	if len(want) == 0 || len(claudeToolNames(e, "other")) == 0 {
		t.Fatalf("alice lacks the notes or the other server's tools: %v", e.toolNames("alice"))
	}
	for i, r := range reqs {
		got := slices.Sorted(slices.Values(r.Tools))
		if !slices.Equal(got, want) {
			t.Errorf("request %d offered the model %v, want exactly alice's notes tools %v", i, r.Tools, want)
		}
	}
	res := reqs[1].ToolResults
	if len(res) != 1 || res[0].IsError || !strings.Contains(res[0].Text, `"count":1`) {
		t.Errorf("the tool result the model got back = %+v, want add_note's {\"count\":1}", res)
	}
	if other := fm.Other(); len(other) != 0 {
		t.Errorf("the CLI asked the stand-in for more than the Messages API: %v", other)
	}

	var call *auditLine
	for _, r := range e.auditLines("--user", "alice", "--tool", "notes/add_note") {
		if r.Kind == "tool" {
			call = &r
		}
	}
	if call == nil || call.Outcome != "ok" || call.Server != "notes" || call.Credential != "token:"+id {
		t.Errorf("audit log of alice's notes/add_note = %+v, want one ok call with credential token:%s", call, id)
	}
	if out := e.must("", "call", "--user", "alice", "notes/list_notes", "{}"); !strings.Contains(out, note) {
		t.Errorf("alice's notes after the run: %s", out)
	}
}

// TestClaudeCodeRevokedToken: with the token revoked before the run, the
// real CLI cannot list our tools (our /mcp answers 401; the CLI does not
// fall back to OAuth with a configured Authorization header), so the
// stand-in is offered none of them and nothing is called; the CLI still
// exits 0 with the stand-in's no-tool text.
func TestClaudeCodeRevokedToken(t *testing.T) {
	bin := claudeBin(t)
	e, token, id := claudeEnv(t)
	e.must("", "token", "revoke", id)
	fm := fakemodel.New(fakemodel.Script{Tool: "mcp__agenthost__notes__add_note", Input: map[string]any{"text": "x"}, Final: "added", NoTool: "no notes tool"})
	model := httptest.NewServer(fm)
	defer model.Close()

	run := runClaude(t, bin, claudeArgs{mcpURL: e.url, token: token, modelURL: model.URL,
		prompt: "Add a note: x", allowed: []string{"mcp__agenthost__notes__add_note"}})
	if run.code != 0 || run.out.Result != "no notes tool" {
		t.Fatalf("claude exited %d: %+v\nstdout: %s\nstderr: %s", run.code, run.out, run.stdout, run.stderr)
	}
	reqs := fm.Requests()
	if len(reqs) == 0 {
		t.Fatal("the CLI never asked the stand-in")
	}
	for i, r := range reqs {
		if len(r.Tools) != 0 || r.Answer != "no-tool" {
			t.Errorf("request %d: offered %v, answered %s; want no tools with a revoked token", i, r.Tools, r.Answer)
		}
	}
	for _, r := range e.auditLines("--user", "alice") {
		if r.Kind == "tool" {
			t.Errorf("a tool call with the revoked token: %+v", r)
		}
	}
}

// TestClaudeCodeLimits: the turn and budget limits the Claude Code
// profile passes hold against a runaway model (the stand-in calls the
// tool at every turn). With --max-turns 2 the CLI stops after two tool
// calls and exits 1 saying error_max_turns; with --max-budget-usd 1 and
// a model reporting ten million output tokens an answer, it stops after
// the first answer and exits 1 saying error_max_budget_usd.
func TestClaudeCodeLimits(t *testing.T) {
	bin := claudeBin(t)
	e, token, _ := claudeEnv(t)
	for _, c := range []struct {
		name      string
		script    fakemodel.Script
		maxTurns  int
		subtype   string
		maxModel  int
		wantCalls int
	}{
		{"turns", fakemodel.Script{Loop: true}, 2, "error_max_turns", 2, 2},
		{"budget", fakemodel.Script{Loop: true, OutputTokens: 10_000_000}, 5, "error_max_budget_usd", 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(e.auditLines("--user", "alice", "--tool", "notes/echo"))
			c.script.Tool = "mcp__agenthost__notes__echo"
			c.script.Input = map[string]any{"text": c.name}
			fm := fakemodel.New(c.script)
			model := httptest.NewServer(fm)
			defer model.Close()
			run := runClaude(t, bin, claudeArgs{mcpURL: e.url, token: token, modelURL: model.URL,
				prompt: "Echo forever", allowed: []string{"mcp__agenthost__notes__echo"}, maxTurns: c.maxTurns})
			if run.code != 1 || !run.out.IsError || run.out.Subtype != c.subtype {
				t.Errorf("claude exited %d with %+v, want 1 and %s\nstdout: %s\nstderr: %s", run.code, run.out, c.subtype, run.stdout, run.stderr)
			}
			if n := len(fm.Requests()); n > c.maxModel {
				t.Errorf("the model was asked %d times, want at most %d", n, c.maxModel)
			}
			if n := len(e.auditLines("--user", "alice", "--tool", "notes/echo")) - before; n != c.wantCalls {
				t.Errorf("%d calls of notes/echo on /mcp, want %d", n, c.wantCalls)
			}
		})
	}
}
