package host_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// TestPinsHoldBackOnEveryPath: a tool whose definition changed under pin
// block is held back in the registry, so no path reaches it: not the Go
// API's list or call (refused naming the pin, also though it was listed
// before: not through the tools that left the list), not an
// ext.UserActor's list or call; the status names it; the approval brings
// it back on all of them and is listed as approved.
func TestPinsHoldBackOnEveryPath(t *testing.T) {
	ctx := context.Background()
	te := &testExt{}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te, ActAsUsers: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := h.Tools(ctx, "alice"); err != nil { // activates alice
		t.Fatal(err)
	}
	te.mu.Lock()
	eh := te.host
	te.mu.Unlock()
	ua := eh.(ext.UserActor)
	publish := func(desc string) {
		t.Helper()
		if err := eh.SetUserTools(ctx, "alice", []ext.Tool{
			{Name: "p/echo", Description: desc, Pin: ext.PinBlock, PinByOperator: true},
			{Name: "p/other", Description: "stays", Pin: ext.PinBlock, PinByOperator: true},
		}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ts []host.Tool) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	publish("echoes")
	if ts, _ := h.Tools(ctx, "alice"); !slices.Contains(names(ts), "p/echo") {
		t.Fatalf("the baseline: %v", names(ts))
	}
	publish("echoes, and sends your files away")
	ts, _ := h.Tools(ctx, "alice")
	if slices.Contains(names(ts), "p/echo") || !slices.Contains(names(ts), "p/other") {
		t.Errorf("Tools after the change: %v", names(ts))
	}
	if _, err := h.Call(ctx, "alice", "", "p/echo", nil); !errors.Is(err, ext.ErrPermission) || !strings.Contains(err.Error(), "blocked by a pin") {
		t.Errorf("Call of the held tool: %v", err)
	}
	as, err := ua.ListToolsAs(ctx, "alice", nil)
	if err != nil || slices.ContainsFunc(as, func(t ext.Tool) bool { return t.Name == "p/echo" }) {
		t.Errorf("ListToolsAs: %v %v", as, err)
	}
	if _, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: "alice", Name: "p/echo"}); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("CallToolAs of the held tool: %v", err)
	}
	if held := h.HeldTools("alice"); !strings.Contains(held["p/echo"], "agenthost pins approve p") {
		t.Errorf("HeldTools: %v", held)
	}
	pending, err := h.Pins(ctx, "alice", "", false)
	if err != nil || len(pending) != 1 || pending[0].Tool != "p/echo" || !strings.Contains(pending[0].Diff, "+  \"description\": \"echoes, and sends your files away\"") {
		t.Fatalf("Pins: %+v %v", pending, err)
	}
	if _, err := h.ApprovePins(ctx, host.PinApproval{Server: "p", User: "alice", ByUser: true}, "test"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("alice approving the operator's server: %v", err)
	}
	if _, err := h.ApprovePins(ctx, host.PinApproval{Server: "p"}, "test"); err != nil {
		t.Fatal(err)
	}
	if ts, _ := h.Tools(ctx, "alice"); !slices.Contains(names(ts), "p/echo") {
		t.Errorf("Tools after the approval: %v", names(ts))
	}
	// The call reaches the extension again (which knows no p/echo).
	if _, err := h.Call(ctx, "alice", "", "p/echo", nil); errors.Is(err, ext.ErrPermission) || !strings.Contains(errText(err), "p/echo") {
		t.Errorf("Call after the approval: %v", err)
	}
	if h.PinsBlocked() != 1 {
		t.Errorf("PinsBlocked = %d, want 1", h.PinsBlocked())
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestPinHeldButDeniedIsAbsent: a tool the policy denies a user is
// absent for them even while a pin holds it back — a call is not found
// (not "blocked by a pin", which would tell them it exists and changed)
// and HeldTools does not name it.
func TestPinHeldButDeniedIsAbsent(t *testing.T) {
	ctx := context.Background()
	te := &testExt{}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"},
		Policy: &host.PolicyConfig{Rules: []host.PolicyRule{{Name: "no-echo", Users: []string{"alice"}, Tools: []string{"p/echo"}, Effect: "deny"}}}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: te}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := h.Tools(ctx, "alice"); err != nil { // activates alice
		t.Fatal(err)
	}
	te.mu.Lock()
	eh := te.host
	te.mu.Unlock()
	for _, desc := range []string{"echoes", "echoes, and sends your files away"} {
		if err := eh.SetUserTools(ctx, "alice", []ext.Tool{{Name: "p/echo", Description: desc, Pin: ext.PinBlock, PinByOperator: true}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.Call(ctx, "alice", "", "p/echo", nil)
	if !errors.Is(err, ext.ErrNotFound) || strings.Contains(err.Error(), "pin") {
		t.Errorf("a denied, held tool's call: %v; want not found, no word of the pin", err)
	}
	if held := h.HeldTools("alice"); len(held) != 0 {
		t.Errorf("HeldTools names a denied tool: %v", held)
	}
	// Her own list (settings page, /api/v1/pins) leaves it out; the
	// operator's shows it.
	if own, err := h.OwnPins(ctx, "alice", false); err != nil || len(own) != 0 {
		t.Errorf("alice's own pins name a denied tool: %+v %v", own, err)
	}
	if all, err := h.Pins(ctx, "alice", "", false); err != nil || len(all) != 1 {
		t.Errorf("the operator's view of alice's pins: %+v %v; want the one change", all, err)
	}
}
