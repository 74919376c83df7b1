package e2e_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/examples/fakemodel"
	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// TestRunnerClaudeCode runs the real Claude Code CLI through ext-runner:
// alice's runner limited to notes, with the Claude Code profile as the
// README gives it (its model the stand-in on loopback), run now from the
// CLI. The session's agent is offered exactly alice's notes tools (not
// her other server's, no built-in tool), calls add_note with the token
// the runner minted for the session (the audit log names it; the note is
// alice's), gets its result back to the model, and exits 0 with the final
// text in the run's output; the token is revoked after the session.
func TestRunnerClaudeCode(t *testing.T) {
	claude := claudeBin(t)
	const note = "written by Claude Code, run by the runner"
	fm := fakemodel.New(fakemodel.Script{
		Tool:  "mcp__agenthost__notes__add_note",
		Input: map[string]any{"text": note},
		Final: "The runner's note is added.",
	})
	model := httptest.NewServer(fm)
	defer model.Close()

	b := build(t)
	runner := testbin.Build(t, pkg+"ext-runner/cmd/agenthost-ext-runner")
	value := func(v string) map[string]string { return map[string]string{"value": v} }
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": b.notes},
		"other": map[string]any{"command": b.notes},
	}}, map[string]any{"extensions": map[string]any{"runner": map[string]any{
		"path": runner, "actAsUsers": true,
		// The model's key comes from the extension's own environment, as
		// an operator would give it (here a dummy: the model is the
		// stand-in).
		"env": map[string]string{"RUNNER_ANTHROPIC_KEY": "sk-ant-dummy-for-the-stand-in"},
		"config": map[string]any{
			"profiles": map[string]any{"claude-code": map[string]any{
				"command": claude,
				"args": []string{"-p", "{prompt}", "--mcp-config", "{mcpConfig}", "--strict-mcp-config",
					"--tools", "", "--allowedTools", "{allowedTools}",
					"--disallowedTools", "Bash,Read,Write,Edit,MultiEdit,NotebookEdit,Glob,Grep,WebFetch,WebSearch,Agent,Task",
					"--max-turns", "{maxTurns}", "--max-budget-usd", "1", "--no-session-persistence", "--output-format", "json"},
				"maxTurns": 3,
				"env": map[string]any{
					"ANTHROPIC_API_KEY":                        map[string]string{"env": "RUNNER_ANTHROPIC_KEY"},
					"ANTHROPIC_BASE_URL":                       value(model.URL),
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": value("1"),
					"DISABLE_AUTOUPDATER":                      value("1"),
					"DISABLE_TELEMETRY":                        value("1"),
					"DISABLE_ERROR_REPORTING":                  value("1"),
					"ENABLE_TOOL_SEARCH":                       value("false"),
				},
			}},
			"runners": map[string]any{"claude-notes": map[string]any{
				"user": "alice", "servers": []string{"notes"}, "profile": "claude-code", "timeLimit": "3m",
				"prompt": "Add a note: " + note,
			}},
		},
	}}})
	e.startServe()
	re := &runnerEnv{env: e}

	if out := e.must("", "runner", "run", "claude-notes", "--user", "alice"); !strings.Contains(out, "started") {
		t.Errorf("runner run: %q", out)
	}
	detail := re.waitRuns("claude-notes", 1)
	if !strings.Contains(detail, "by run now (operator): ok") || !strings.Contains(detail, "exit status 0") ||
		!strings.Contains(detail, `"result":"The runner's note is added."`) {
		t.Errorf("the run's status (want ok, exit 0 and the CLI's JSON with the final text):\n%s", detail)
	}

	reqs := fm.Requests()
	if len(reqs) != 2 || reqs[0].Answer != "tool_use" || reqs[1].Answer != "final" {
		t.Fatalf("the stand-in answered %+v, want a tool_use then the final text\nrun:\n%s", reqs, detail)
	}
	want := claudeToolNames(e, "notes")
	for i, r := range reqs {
		if got := slices.Sorted(slices.Values(r.Tools)); len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("request %d offered the model %v, want exactly alice's notes tools %v", i, r.Tools, want)
		}
	}
	if res := reqs[1].ToolResults; len(res) != 1 || res[0].IsError || !strings.Contains(res[0].Text, `"count":1`) {
		t.Errorf("the tool result the model got back = %+v", res)
	}

	var call *auditLine
	for _, r := range e.auditLines("--user", "alice", "--tool", "notes/add_note") {
		if r.Kind == "tool" {
			call = &r
		}
	}
	if call == nil || call.Outcome != "ok" || !strings.HasPrefix(call.Credential, "token:") {
		t.Errorf("audit log of alice's notes/add_note = %+v, want one ok call with a token", call)
	}
	if out := e.must("", "call", "--user", "alice", "notes/list_notes", "{}"); !strings.Contains(out, note) {
		t.Errorf("alice's notes after the run: %s", out)
	}
	// The call was made with a token issued for the session, revoked
	// after it (the audit log records both by the token's ID).
	var issued, revoked bool
	for _, r := range e.auditLines("--user", "alice") {
		if r.Kind == "token" && call != nil && "token:"+r.Credential == call.Credential {
			issued = issued || r.Tool == "token issued"
			revoked = revoked || r.Tool == "token revoked"
		}
	}
	if !issued || !revoked {
		t.Errorf("the call's token (%+v): issued %v, revoked after the session %v", call, issued, revoked)
	}
	if out := strings.TrimSpace(e.must("", "token", "list", "--user", "alice", "--json")); out != "[]" {
		t.Errorf("alice has live tokens after the session: %s", out)
	}
}
