package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/examples/internal/testbin"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/host"
)

// TestFreedSlotWakesQuarantinedUser: with maxProcesses 1, alice's notes
// server holds the only slot and bob's is quarantined for want of one
// (services.maxProcesses). When alice is deactivated her process stops,
// and the host refreshes bob, who waited for the slot, at once: his
// server connects although its backoff (10 min here) is far from over.
// Before, bob got the slot only at his next backoff retry. A real host,
// the real ext-mcp (in process, for its backoff) and real notes servers.
func TestFreedSlotWakesQuarantinedUser(t *testing.T) {
	notes := testbin.Build(t, pkg+"examples/servers/notes")
	mcpCfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": notes}}})
	x := extmcp.New(&extmcp.Options{Catalog: &catalog.Options{Backoff: catalog.Backoff{Min: 10 * time.Minute, Max: 10 * time.Minute}}})
	h, err := host.New(context.Background(), &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"},
		Services: host.ServicesConfig{MaxProcesses: 1, ConnectWaitSeconds: 0.3}},
		&host.Options{Extensions: map[string]host.InProcess{"mcp": {Extension: x, Config: mcpCfg}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hasNotes := func(user string) bool {
		tools, err := h.Tools(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools {
			if strings.HasPrefix(tl.Name, "notes/") {
				return true
			}
		}
		return false
	}
	notesStatus := func(user string) host.StatusEntry {
		st, err := h.Status(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Name == "notes" {
				return s
			}
		}
		return host.StatusEntry{}
	}
	for _, u := range []string{"alice", "bob"} {
		if err := h.SetSecret(ctx, u, "mcp", "token:notes", "slot-"+u); err != nil {
			t.Fatal(err)
		}
	}
	if !hasNotes("alice") {
		t.Fatalf("alice has no notes tools: %+v", notesStatus("alice"))
	}
	if hasNotes("bob") {
		t.Fatal("bob got a process beyond maxProcesses")
	}
	if st := notesStatus("bob"); st.State != "quarantined" || !strings.Contains(st.Reason, "maxProcesses") ||
		time.Until(st.NextRetry) < 5*time.Minute {
		t.Fatalf("bob's notes: %+v; want quarantined for want of a slot (maxProcesses), retried in about 10 min", st)
	}
	if err := h.Deactivate(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for notesStatus("bob").State != "connected" {
		if time.Now().After(deadline) {
			t.Fatalf("bob's notes are still %+v 15 s after alice's slot freed; want connected, not waiting for the backoff", notesStatus("bob"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !hasNotes("bob") {
		t.Error("bob's notes server is connected but his tools lack it")
	}
	res, err := h.Call(ctx, "bob", "", "notes/add_note", json.RawMessage(`{"text":"got a slot"}`))
	if err != nil || res.IsError {
		t.Errorf("bob's call: %v %v", res, err)
	}
}
