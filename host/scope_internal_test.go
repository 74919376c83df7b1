package host

import (
	"errors"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestResourceInScope: a scoped read reaches a resource its server
// published, or a URI matching a template of a server of the scope and of
// no other server (an ambiguous URI is refused: its read could go to the
// other); a resource of no server is outside every scope.
func TestResourceInScope(t *testing.T) {
	x := newExtras()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(x.set("mcp", "alice", &ext.Catalog{
		Resources: []ext.Resource{{URI: "notes://today", Server: "notes"}, {URI: "files://a", Server: "files"}},
		ResourceTemplates: []ext.ResourceTemplate{
			{URITemplate: "notes://day/{day}", Server: "notes"},
			{URITemplate: "shared://{id}", Server: "notes"},
		},
	}))
	must(x.set("other", "alice", &ext.Catalog{
		Resources:         []ext.Resource{{URI: "old://x"}},
		ResourceTemplates: []ext.ResourceTemplate{{URITemplate: "shared://{id}", Server: "files"}},
	}))
	notes := &ext.Scope{Servers: []string{"notes"}}
	for uri, want := range map[string]bool{
		"notes://today": true, "notes://day/monday": true, "files://a": false,
		"shared://1": false, "old://x": false, "notes://other": false,
	} {
		if got := x.resourceInScope("alice", uri, notes); got != want {
			t.Errorf("resourceInScope(%q) = %v, want %v", uri, got, want)
		}
	}
	if x.resourceInScope("bob", "notes://today", notes) {
		t.Error("bob reaches alice's resource")
	}
}

// TestConversationScope: a conversation keeps the scope of its first call;
// a later call in it (an extension acting for the caller) must stay
// within it, and another user's call is refused as before.
func TestConversationScope(t *testing.T) {
	h := &Host{convs: map[string]convBinding{}}
	notes := &ext.Scope{Servers: []string{"notes"}}
	if err := h.bindConversation("alice", "mcp:1", notes); err != nil {
		t.Fatal(err)
	}
	narrower := &ext.Scope{Servers: []string{"notes"}, Tools: []string{"notes/list_*"}}
	for _, sc := range []*ext.Scope{notes, narrower} {
		if err := h.bindConversation("alice", "mcp:1", sc); err != nil {
			t.Errorf("a call within the scope (%s): %v", sc, err)
		}
	}
	for _, sc := range []*ext.Scope{nil, {Servers: []string{"notes", "files"}}} {
		if err := h.bindConversation("alice", "mcp:1", sc); !errors.Is(err, ext.ErrPermission) {
			t.Errorf("a call wider than the conversation (%s): %v, want ErrPermission", sc, err)
		}
	}
	if err := h.bindConversation("bob", "mcp:1", notes); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("bob in alice's conversation: %v", err)
	}
	if err := h.bindConversation("alice", "cli:2", nil); err != nil {
		t.Fatal(err)
	}
	if err := h.bindConversation("alice", "cli:2", notes); err != nil {
		t.Errorf("a scoped call in an unscoped conversation: %v", err)
	}
}
