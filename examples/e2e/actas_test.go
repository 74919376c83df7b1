package e2e_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// TestExtensionActsAsUser: a real extension binary (examples/actas, over
// go-plugin) uses ext.UserActor. Without the operator's grant every use is
// refused. With it, called by alice through a token scoped to actas and
// notes, it lists and calls only alice's tools within that scope (a tool
// of another of her servers is not found, bob's opt-in server is never
// hers; dropping the caller's scope in the caller's conversation is
// refused by the host), it cannot mint a token wider than the caller, and
// the token it
// mints reaches alice's notes on /mcp (not bob's server, even when named)
// until it revokes it.
func TestExtensionActsAsUser(t *testing.T) {
	bin := everythingBin(t)
	b := build(t)
	actas := testbin.Build(t, pkg+"examples/actas")
	servers := map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"command": bin, "args": []string{"stdio"}},
		"notes":      map[string]any{"command": b.notes},
		"private":    map[string]any{"command": b.notes, "availability": "opt-in"},
	}}

	// No grant: refused.
	e := newEnv(t, b, servers, map[string]any{"extensions": map[string]any{"actas": map[string]any{"path": actas}}})
	e.startServe()
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "full"))
	c, err := connect(t, e.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.call(t, "actas__list", map[string]any{}); err != nil || !r.IsError || !strings.Contains(text(r), "actAsUsers") {
		t.Errorf("actas/list without the grant: %v %v, want the refusal naming actAsUsers", err, text(r))
	}
	e.stopServe()

	// Granted.
	e = newEnv(t, b, servers, map[string]any{"extensions": map[string]any{"actas": map[string]any{"path": actas, "actAsUsers": true}}})
	e.startServe()
	e.must("", "settings", "set", "--user", "bob", "--ext", "mcp", "servers", `{"private":true}`)
	scoped := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "agent", "--servers", "actas,notes"))
	// A session (pinned to 2025-11-25), so that its calls have a
	// conversation, which the host binds to the caller's scope.
	c, err = connectWith(t, e.url, scoped, nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.call(t, "actas__list", map[string]any{})
	if err != nil || r.IsError {
		t.Fatalf("actas/list: %v %v", err, r)
	}
	names := strings.Split(text(r), "\n")
	if !slices.Contains(names, "notes/echo") || !slices.Contains(names, "actas/call") || hasPrefix(names, "everything/") || hasPrefix(names, "private/") {
		t.Errorf("actas/list within alice's scope (actas, notes) = %v", names)
	}
	if r, err := c.call(t, "actas__call", map[string]any{"name": "notes/echo", "arguments": map[string]any{"text": "via actas"}}); err != nil || r.IsError || !strings.Contains(text(r), "via actas") {
		t.Errorf("actas/call notes/echo: %v %v", err, text(r))
	}
	for _, name := range []string{"everything/echo", "private/echo"} {
		if r, err := c.call(t, "actas__call", map[string]any{"name": name, "arguments": map[string]any{"text": "x"}}); err != nil || !r.IsError || !strings.Contains(text(r), "not found") {
			t.Errorf("actas/call %s outside the caller's scope: %v %v, want not found", name, err, text(r))
		}
	}
	// An extension that drops the caller's scope, in the caller's
	// conversation, is refused by the host: the conversation is scoped.
	if r, err := c.call(t, "actas__call", map[string]any{"name": "everything/echo", "arguments": map[string]any{"text": "x"}, "unscoped": true}); err != nil || !r.IsError || !strings.Contains(text(r), "scoped to") {
		t.Errorf("actas/call dropping the caller's scope: %v %v, want the host's refusal", err, text(r))
	}
	if r, err := c.call(t, "actas__mint", map[string]any{"servers": []string{"everything"}, "seconds": 60}); err != nil || !r.IsError {
		t.Errorf("minting a token wider than the caller: %v %v, want a refusal", err, text(r))
	}
	r, err = c.call(t, "actas__mint", map[string]any{"servers": []string{"notes"}, "seconds": 600})
	if err != nil || r.IsError {
		t.Fatalf("actas/mint: %v %v", err, r)
	}
	var minted struct{ Token, ID string }
	if err := json.Unmarshal([]byte(text(r)), &minted); err != nil || minted.Token == "" {
		t.Fatalf("actas/mint answered %q", text(r))
	}
	agent, err := connect(t, e.url, minted.Token)
	if err != nil {
		t.Fatal(err)
	}
	got := agent.names(t)
	if !slices.Contains(got, "notes__echo") || hasPrefix(got, "actas__") || hasPrefix(got, "everything__") {
		t.Errorf("the minted token's tools = %v, want notes' only", got)
	}
	if list := e.must("", "token", "list", "--user", "alice"); !strings.Contains(list, "minted by actas") {
		t.Errorf("token list does not say which extension minted the token:\n%s", list)
	}

	// Never wider than the user: a token of alice naming bob's server
	// reaches nothing of it (the unscoped caller may ask for any scope).
	full := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "full"))
	fc, err := connect(t, e.url, full)
	if err != nil {
		t.Fatal(err)
	}
	r, err = fc.call(t, "actas__mint", map[string]any{"servers": []string{"private", "notes"}, "seconds": 600})
	if err != nil || r.IsError {
		t.Fatalf("actas/mint: %v %v", err, r)
	}
	var wide struct{ Token, ID string }
	_ = json.Unmarshal([]byte(text(r)), &wide)
	wc, err := connect(t, e.url, wide.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got := wc.names(t); hasPrefix(got, "private__") || !slices.Contains(got, "notes__echo") {
		t.Errorf("alice's minted token naming bob's server lists %v", got)
	}

	// Revoked by the extension: refused at once, on the open session too.
	if r, err := c.call(t, "actas__revoke", map[string]any{"id": minted.ID}); err != nil || r.IsError {
		t.Fatalf("actas/revoke: %v %v", err, text(r))
	}
	if _, err := agent.call(t, "notes__echo", map[string]any{"text": "after"}); err == nil {
		t.Error("the revoked minted token's session was still served")
	}
	if _, err := connect(t, e.url, minted.Token); err == nil {
		t.Error("the revoked minted token opened a session")
	}
}
