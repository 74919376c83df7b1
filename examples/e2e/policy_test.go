package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// policyConfig is the operator's tool policy of the policy tests: alice
// may not use the notes server's echo (bob may), and every tool annotated
// destructiveHint: true (the notes server's clear_notes) waits for its
// user's approval.
var policyConfig = map[string]any{"policy": map[string]any{
	"approveDestructive": true,
	"rules": []any{
		map[string]any{"name": "no-echo-for-alice", "users": []string{"alice"}, "tools": []string{"notes/echo"}, "effect": "deny"},
	},
}}

// approvalLink finds the settings page's link in a refused call's text.
var approvalLink = regexp.MustCompile(`https?://\S+/settings#approval-(ap_[0-9a-f]+)`)

// notesOf lists the user's notes through the client.
func notesOf(t *testing.T, c *client) []string {
	t.Helper()
	res, err := c.call(t, "notes__list_notes", map[string]any{})
	if err != nil || res.IsError {
		t.Fatalf("list_notes: %v %v", err, res)
	}
	var out struct{ Notes []string }
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return out.Notes
}

// TestToolPolicy (issue 21): with the real binaries, a tool the operator
// denies alice is absent from her /mcp list and `agenthost tools`, and a
// call of it is an unknown tool, while bob lists and calls it; a
// destructive tool asks bob's client through elicitation (the form names
// the tool and the arguments): declining refuses the call (the server
// never ran it: the notes are still there), approving runs it; a client
// without elicitation is refused with a link to the settings page, the
// call is listed at /api/v1/approvals for alice only, and denied there its
// retry is refused; the approvals and refusals are in the audit log and
// the metrics; through the CLI the denied tool is not found and the
// destructive one refused with the link, then runs within the window
// alice opens for it; `agenthost config check` names the rule.
func TestToolPolicy(t *testing.T) {
	b := build(t)
	more := map[string]any{"telemetry": map[string]any{"metrics": true}}
	for k, v := range policyConfig {
		more[k] = v
	}
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}}, more)
	if out := e.must("", "config", "check"); !strings.Contains(out, "first matching rule wins") ||
		!strings.Contains(out, "no-echo-for-alice: deny tools notes/echo for alice") || !strings.Contains(out, "approveDestructive true") {
		t.Errorf("config check does not show the policy:\n%s", out)
	}
	e.startServe()
	eventually(t, "alice and bob have the notes server's tools", func() bool {
		return hasPrefix(e.toolNames("alice"), "notes/") && hasPrefix(e.toolNames("bob"), "notes/")
	})
	if n := e.toolNames("alice"); slices.Contains(n, "notes/echo") || !slices.Contains(n, "notes/add_note") {
		t.Errorf("agenthost tools --user alice: %v; want no notes/echo", n)
	}
	if n := e.toolNames("bob"); !slices.Contains(n, "notes/echo") {
		t.Errorf("agenthost tools --user bob: %v; want notes/echo", n)
	}
	aliceTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "agent"))
	bobTok := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "agent"))

	// Denied: absent for alice, present for bob.
	// Both clients open sessions (2025-11-25): the stateless revision
	// has no requests to the client (TestApprovalInABrowser's client).
	alice, err := connectWith(t, e.url, aliceTok, nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if n := alice.names(t); slices.Contains(n, "notes__echo") || !slices.Contains(n, "notes__add_note") {
		t.Errorf("alice's tools/list: %v; want no notes__echo", n)
	}
	if res, err := alice.call(t, "notes__echo", map[string]any{"text": "hi"}); err == nil && !res.IsError {
		t.Errorf("alice called the denied notes__echo: %s", text(res))
	}
	var mu sync.Mutex
	var asked []*mcp.ElicitParams
	answer := "decline"
	bob, err := connectWith(t, e.url, bobTok, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, r.Params)
			if answer == "approve" {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "approve"}}, nil
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	}, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(bob.names(t), "notes__echo") {
		t.Error("bob's tools/list lacks notes__echo")
	}
	if res, err := bob.call(t, "notes__echo", map[string]any{"text": "hi"}); err != nil || res.IsError || text(res) != "hi" {
		t.Errorf("bob calls notes__echo: %v %v", res, err)
	}

	// Destructive, with elicitation: declined, then approved.
	if res, err := bob.call(t, "notes__add_note", map[string]any{"text": "keep me"}); err != nil || res.IsError {
		t.Fatalf("bob adds a note: %v %v", res, err)
	}
	res, err := bob.call(t, "notes__clear_notes", map[string]any{})
	if err != nil || !res.IsError || !strings.Contains(text(res), "not approved") {
		t.Errorf("bob declines clear_notes: %v %v", text(res), err)
	}
	mu.Lock()
	if len(asked) != 1 || !strings.Contains(asked[0].Message, "notes/clear_notes") || asked[0].RequestedSchema == nil {
		t.Errorf("bob's client was asked %+v", asked)
	}
	answer = "approve"
	mu.Unlock()
	if n := notesOf(t, bob); !slices.Equal(n, []string{"keep me"}) {
		t.Errorf("after the declined clear_notes bob's notes are %q: the server ran the call", n)
	}
	if res, err := bob.call(t, "notes__clear_notes", map[string]any{}); err != nil || res.IsError {
		t.Errorf("bob approves clear_notes: %v %v", res, err)
	}
	if n := notesOf(t, bob); len(n) != 0 {
		t.Errorf("after the approved clear_notes bob's notes are %q", n)
	}
	mu.Lock()
	if len(asked) != 2 {
		t.Errorf("bob's client was asked %d times, want 2", len(asked))
	}
	mu.Unlock()

	// Destructive, without elicitation: refused with the link; denied on
	// the JSON API.
	if res, err := alice.call(t, "notes__add_note", map[string]any{"text": "mine"}); err != nil || res.IsError {
		t.Fatalf("alice adds a note: %v %v", res, err)
	}
	res, err = alice.call(t, "notes__clear_notes", map[string]any{})
	if err != nil || !res.IsError {
		t.Fatalf("alice's clear_notes without elicitation: %v %v", res, err)
	}
	m := approvalLink.FindStringSubmatch(text(res))
	if m == nil || !strings.HasPrefix(m[0], e.url+"/settings#approval-") {
		t.Fatalf("the refusal carries no link to the settings page: %q", text(res))
	}
	id := m[1]
	code, body := e.api("GET", "/api/v1/approvals", aliceTok, "")
	var list []struct{ ID, Tool, Arguments, Rule string }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 || list[0].ID != id ||
		list[0].Tool != "notes/clear_notes" || list[0].Rule != "approveDestructive" {
		t.Errorf("GET /api/v1/approvals as alice: %d %s", code, body)
	}
	if code, body := e.api("GET", "/api/v1/approvals", bobTok, ""); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET /api/v1/approvals as bob: %d %s; want none of alice's", code, body)
	}
	if code, body := e.api("POST", "/api/v1/approvals/"+id, aliceTok, `{"decision":"maybe"}`); code != http.StatusBadRequest {
		t.Errorf("a decision that is neither approve nor deny: %d %s", code, body)
	}
	if code, body := e.api("POST", "/api/v1/approvals/"+id, aliceTok, `{"decision":"approve","minutes":100000}`); code != http.StatusBadRequest || !strings.Contains(body, "minutes") {
		t.Errorf("a window beyond maxApprovalMinutes: %d %s", code, body)
	}
	if code, _ := e.api("POST", "/api/v1/approvals/"+id, bobTok, `{"decision":"approve"}`); code != http.StatusNotFound {
		t.Errorf("bob approves alice's call: HTTP %d, want 404", code)
	}
	if code, body := e.api("POST", "/api/v1/approvals/"+id, aliceTok, `{"decision":"deny"}`); code != http.StatusNoContent {
		t.Errorf("alice denies her call: %d %s", code, body)
	}
	if res, err := alice.call(t, "notes__clear_notes", map[string]any{}); err != nil || !res.IsError || !strings.Contains(text(res), "not approved") {
		t.Errorf("the denied call's retry: %v %v", res, err)
	}
	if n := notesOf(t, alice); !slices.Equal(n, []string{"mine"}) {
		t.Errorf("alice's notes after the refused clear_notes: %q", n)
	}

	// The CLI: the denied tool is unknown; the destructive one refused
	// with the link, and runs within the window alice opens for it.
	if out, errOut, code := e.run("", "call", "--user", "alice", "notes/echo", `{"text":"x"}`); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("agenthost call alice notes/echo: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code := e.run("", "call", "--user", "alice", "notes/clear_notes", `{}`)
	m = approvalLink.FindStringSubmatch(errOut)
	if code == 0 || m == nil {
		t.Fatalf("agenthost call alice notes/clear_notes: exit %d, no link:\n%s", code, errOut)
	}
	if code, body := e.api("POST", "/api/v1/approvals/"+m[1], aliceTok, `{"decision":"approve","minutes":5}`); code != http.StatusNoContent {
		t.Fatalf("alice approves clear_notes for 5 minutes: %d %s", code, body)
	}
	for range 2 {
		e.must("", "call", "--user", "alice", "notes/clear_notes", `{"reason":"window"}`)
	}
	if n := notesOf(t, alice); len(n) != 0 {
		t.Errorf("alice's notes after clear_notes in her window: %q", n)
	}

	// Audited and counted.
	var approvals []string
	for _, r := range e.auditLines("--kind", "approval") {
		approvals = append(approvals, r.User+" "+r.Tool+" "+r.Outcome+" "+r.Reason)
	}
	joined := strings.Join(approvals, "\n")
	for _, want := range []string{
		"bob notes/clear_notes refused declined through the client", "bob notes/clear_notes ok approved through the client",
		"alice notes/clear_notes refused waiting for approval " + id, "alice notes/clear_notes refused denied on the settings page",
		"alice notes/clear_notes ok approved for 5 minutes on the settings page",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("the audit log lacks %q:\n%s", want, joined)
		}
	}
	opTok := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	_, metrics := e.api("GET", "/metrics", opTok, "")
	for _, d := range []string{"approved", "declined", "pending", "window", "denied"} {
		if !regexp.MustCompile(`agenthost_policy_decisions_total\{[^}]*agenthost_decision="` + d + `"[^}]*\} [1-9]`).MatchString(metrics) {
			t.Errorf("/metrics lacks agenthost_policy_decisions_total for %s:\n%s", d, grepLines(metrics, "policy"))
		}
	}
}
