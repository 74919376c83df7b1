package host

import (
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
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

// TestValidateExtras: every kind refuses an empty or repeated key and a
// definition that is not JSON, naming the kind and the key; the same key
// in two kinds is fine.
func TestValidateExtras(t *testing.T) {
	def := []byte(`{"name":"x"}`)
	for name, tc := range map[string]struct {
		c    ext.Catalog
		want string // "" = valid
	}{
		"valid": {c: ext.Catalog{Prompts: []ext.Prompt{{Name: "s/p", Definition: def}},
			Resources: []ext.Resource{{URI: "s/p"}}, ResourceTemplates: []ext.ResourceTemplate{{URITemplate: "file:///{x}"}}}},
		"prompt twice":   {c: ext.Catalog{Prompts: []ext.Prompt{{Name: "s/p"}, {Name: "s/p"}}}, want: `prompt "s/p" is empty or listed twice`},
		"empty resource": {c: ext.Catalog{Resources: []ext.Resource{{URI: ""}}}, want: `resource "" is empty or listed twice`},
		"bad template":   {c: ext.Catalog{ResourceTemplates: []ext.ResourceTemplate{{URITemplate: "t", Definition: []byte("{")}}}, want: `resource template "t": definition is not valid JSON`},
		"resource twice": {c: ext.Catalog{Resources: []ext.Resource{{URI: "a"}, {URI: "a"}}}, want: `resource "a" is empty or listed twice`},
	} {
		t.Run(name, func(t *testing.T) {
			err := validateExtras(&tc.c)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validateExtras = %v, want nil", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validateExtras = %v, want %q (invalid argument)", err, tc.want)
			}
		})
	}
}

// TestValidUserShape checks validUser against the regexp of the user ID's
// documented shape.
func TestValidUserShape(t *testing.T) {
	shape := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)
	cases := []string{"", "a", "Z9", "alice", "bob@example.com", "a.b_c+d-e", "@operator", ".a", "-a", "_a", "+a",
		"a b", "a/b", "a\x00", "ä", "a\n", strings.Repeat("a", 128), strings.Repeat("a", 129), "0" + strings.Repeat("-", 127)}
	for c := range 256 {
		cases = append(cases, string(rune(c)), "a"+string([]byte{byte(c)}), string([]byte{byte(c)})+"a")
	}
	for _, id := range cases {
		if got, want := validUser(id), shape.MatchString(id); got != want {
			t.Errorf("validUser(%q) = %v, the shape says %v", id, got, want)
		}
	}
}
