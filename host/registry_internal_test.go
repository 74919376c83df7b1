package host

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestRegistry covers lookup through the name indexes, collisions between
// extensions (refused, for system and per-user tools), replacement of a
// whole list, and tools that left a user's list still reaching their
// extension.
func TestRegistry(t *testing.T) {
	r := newRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tools := func(names ...string) []ext.Tool {
		out := make([]ext.Tool, len(names))
		for i, n := range names {
			out[i] = ext.Tool{Name: n}
		}
		return out
	}
	owner := func(user, name string) string {
		t.Helper()
		tool, ok := r.lookup(user, name)
		if !ok {
			return ""
		}
		return tool.Extension
	}
	if err := r.setSystem("a", tools("a/x", "a/y")); err != nil {
		t.Fatal(err)
	}
	if err := r.setUser("b", "alice", tools("b/z", "b/w")); err != nil {
		t.Fatal(err)
	}
	if owner("alice", "a/x") != "a" || owner("alice", "b/z") != "b" || owner("bob", "b/z") != "" {
		t.Error("lookup does not follow the lists")
	}
	// Collisions are refused, and change nothing.
	if err := r.setUser("b", "alice", tools("a/x")); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a user tool named like another extension's system tool: %v", err)
	}
	if err := r.setSystem("c", tools("b/z")); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a system tool named like another extension's user tool: %v", err)
	}
	if owner("alice", "b/w") != "b" {
		t.Error("a refused list changed the registry")
	}
	// The same extension may re-register its own names.
	if err := r.setSystem("a", tools("a/x")); err != nil {
		t.Fatal(err)
	}
	if owner("alice", "a/y") != "" {
		t.Error("a/y is still found after a replaced the whole list")
	}
	// A tool that left alice's list still routes to its extension.
	if err := r.setUser("b", "alice", tools("b/z")); err != nil {
		t.Fatal(err)
	}
	if owner("alice", "b/w") != "b" {
		t.Error("a tool that just left the list no longer reaches its extension")
	}
	if got := len(r.list("alice")); got != 2 {
		t.Errorf("alice lists %d tools, want a/x and b/z", got)
	}
	if err := r.setUser("b", "alice", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.userIdx["alice"]; ok {
		t.Error("an empty user index is kept")
	}
}
