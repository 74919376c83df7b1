package e2e_test

import (
	"slices"
	"strings"
	"testing"
)

// TestReloadPolicyAndLimits (issue 21): with the real binaries, a reload
// that adds a policy denying notes/echo to alice makes it vanish from her
// open go-sdk session (she hears list_changed; a call is refused) while
// bob still lists and calls it; and a reload that lowers alice's limit
// from 100 to 2 calls a minute refuses her third call at once with the
// rate-limit error, without a restart (the same session, the same
// process).
func TestReloadPolicyAndLimits(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"limits": map[string]any{"user": map[string]any{"perMinute": 100}}})
	e.startServe()
	alice, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	bob, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	if names := alice.names(t); !slices.Contains(names, "notes__echo") {
		t.Fatalf("alice's tools before the reload: %v", names)
	}
	for range 3 {
		if res, err := alice.call(t, "notes__echo", map[string]any{"text": "hi"}); err != nil || res.IsError {
			t.Fatalf("alice under 100 calls a minute: %v %v", err, res)
		}
	}
	drain := func(c *client) {
		for {
			select {
			case <-c.changed:
			default:
				return
			}
		}
	}
	drain(alice)

	// Deny notes/echo to alice.
	e.editConfig(func(cfg map[string]any) {
		cfg["policy"] = map[string]any{"rules": []any{
			map[string]any{"users": []string{"alice"}, "tools": []string{"notes/echo"}, "effect": "deny"},
		}}
	})
	if out := e.must("", "reload"); !strings.Contains(out, "policy") {
		t.Errorf("reload printed %q; want the policy named as changed", out)
	}
	alice.waitChanged(t, "a reload that denied alice a tool")
	if names := alice.names(t); slices.Contains(names, "notes__echo") {
		t.Fatalf("after the reload alice still lists notes__echo: %v", names)
	}
	if res, err := alice.call(t, "notes__echo", map[string]any{"text": "hi"}); err == nil && !res.IsError {
		t.Errorf("alice still calls the denied tool: %s", text(res))
	}
	if names := bob.names(t); !slices.Contains(names, "notes__echo") {
		t.Errorf("bob lost notes__echo to alice's rule: %v", names)
	}
	if res, err := bob.call(t, "notes__echo", map[string]any{"text": "hi"}); err != nil || res.IsError {
		t.Errorf("bob's call after the reload: %v %v", err, res)
	}

	// Lower alice's limit to 2 a minute: her bucket (97 left of 100) is
	// cut to the new burst; the third call is refused.
	e.editConfig(func(cfg map[string]any) {
		delete(cfg, "policy")
		cfg["limits"] = map[string]any{"overrides": map[string]any{"alice": map[string]any{"user": map[string]any{"perMinute": 2}}},
			"user": map[string]any{"perMinute": 100}}
	})
	if out := e.must("", "reload"); !strings.Contains(out, "limits") {
		t.Errorf("reload printed %q; want the limits named as changed", out)
	}
	alice.waitChanged(t, "a reload that lifted the policy")
	if names := alice.names(t); !slices.Contains(names, "notes__echo") {
		t.Fatalf("the policy lifted, alice still lacks notes__echo: %v", names)
	}
	for i := range 2 {
		if res, err := alice.call(t, "notes__echo", map[string]any{"text": "hi"}); err != nil || res.IsError {
			t.Fatalf("alice's call %d under her new limit of 2: %v %v", i+1, err, res)
		}
	}
	_, err = alice.call(t, "notes__echo", map[string]any{"text": "hi"})
	if _, d, ok := refusedByLimit(err); !ok || d.Scope != "user" || d.RetryAfterMs <= 0 {
		t.Errorf("alice's third call after lowering her limit: %v (%+v); want the -32029 refusal of the user limit with a retry", err, d)
	}
	// bob keeps the 100 a minute.
	for range 3 {
		if res, err := bob.call(t, "notes__echo", map[string]any{"text": "hi"}); err != nil || res.IsError {
			t.Fatalf("bob's call after alice's limit was lowered: %v %v", err, res)
		}
	}
}
