package host

import (
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
