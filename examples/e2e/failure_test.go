package e2e_test

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// TestWhyAServerFailed (issue 16, item 4): a stdio server that prints
// "fatal: cannot open database" and exits 3 shows its user that, in one
// plain sentence, on every surface (status --user, the JSON API, the
// settings page); a shared server whose stderr prints the operator's
// credential shows its user only the sentence (no surface, nor a tool
// call's error, holds the credential), and the operator the output with
// the credential redacted.
func TestWhyAServerFailed(t *testing.T) {
	b := build(t)
	failing := testbin.Build(t, pkg+"examples/internal/failing")
	const opSecret = "operator-secret-8c1f5e2a9b"
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"db": map[string]any{"command": failing, "args": []string{"fatal: cannot open database"}},
		"team": map[string]any{"command": failing, "credentials": "shared", "users": []string{"alice"},
			"env": map[string]any{"PRINT_TOKEN": "1"}},
	}})
	e.startServe()
	e.must(opSecret, "secret", "set", "--operator", "--ext", "mcp", "token:team")
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", `{"team":true}`)
	alice := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))

	const dbReason = "it exited with status 3 before answering: failing: starting | fatal: cannot open database"
	const teamUser = "it exited with status 3 before answering (what it wrote is shown to the operator only)"
	const teamOperator = "it exited with status 3 before answering: failing: starting | auth failed for [redacted]"
	var cli string
	eventually(t, "alice's status shows why both servers failed", func() bool {
		cli = e.must("", "status", "--user", "alice")
		return strings.Contains(cli, dbReason) && strings.Contains(cli, teamUser)
	})
	check := func(surface, text string) {
		t.Helper()
		if !strings.Contains(text, dbReason) || !strings.Contains(text, teamUser) {
			t.Errorf("%s does not say why the servers failed:\n%s", surface, text)
		}
		if strings.Contains(text, opSecret) || strings.Contains(text, "auth failed") {
			t.Errorf("%s shows alice the shared server's output:\n%s", surface, text)
		}
	}
	check("status --user alice", cli)
	_, api := e.api("GET", "/api/v1/status", alice, "")
	check("the JSON API", api)
	hc := e.settingsBrowser("alice")
	_, _, page := fetch(t, hc, "GET", e.url+"/settings", nil)
	check("the settings page", page)

	// A call to the shared server's tool: its error holds no credential.
	c, err := connect(t, e.url+"/mcp", alice)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.call(t, "team/anything", map[string]any{})
	var callText string
	if err != nil {
		callText = err.Error()
	} else {
		callText = text(res)
	}
	if strings.Contains(callText, opSecret) || strings.Contains(callText, "auth failed") {
		t.Errorf("a call to the shared server answered alice with its output: %s", callText)
	}

	// The operator's status (every user's) shows it, redacted.
	op := e.must("", "status")
	if !strings.Contains(op, teamOperator) || !strings.Contains(op, dbReason) || strings.Contains(op, opSecret) {
		t.Errorf("the operator's status:\n%s\nwant %q, %q and no credential", op, teamOperator, dbReason)
	}
	if strings.Contains(e.serveOut.String(), opSecret) {
		t.Log("the host log holds the credential (the process's raw stderr is the operator's)")
	}
}
