package host

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestSetUserCatalogAtomic: a catalog refused on its prompts (another
// extension has the name) changes nothing, its tools included; one
// refused on its tools leaves the prompts as they were too.
func TestSetUserCatalogAtomic(t *testing.T) {
	ctx := context.Background()
	h := &Host{reg: newRegistry(slog.New(slog.NewTextHandler(io.Discard, nil))), extras: newExtras()}
	a, b := &hostServices{h: h, ext: "a"}, &hostServices{h: h, ext: "b"}
	prompt := func(name string) ext.Prompt {
		return ext.Prompt{Name: name, Definition: json.RawMessage(`{"name":"` + name + `"}`)}
	}
	if err := a.SetUserCatalog(ctx, "alice", &ext.Catalog{Tools: []ext.Tool{{Name: "a/x"}}, Prompts: []ext.Prompt{prompt("p")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetUserCatalog(ctx, "alice", &ext.Catalog{Tools: []ext.Tool{{Name: "b/x"}}, Prompts: []ext.Prompt{prompt("q")}}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if _, ok := h.reg.lookup("alice", "b/x"); !ok {
			t.Errorf("%s: b/x is gone", when)
		}
		if _, ok := h.reg.lookup("alice", "b/y"); ok {
			t.Errorf("%s: b/y was registered", when)
		}
		h.extras.mu.RLock()
		ps := h.extras.user["alice"]["b"].Prompts
		h.extras.mu.RUnlock()
		if len(ps) != 1 || ps[0].Name != "q" {
			t.Errorf("%s: b's prompts = %+v, want q alone", when, ps)
		}
	}
	err := b.SetUserCatalog(ctx, "alice", &ext.Catalog{Tools: []ext.Tool{{Name: "b/y"}}, Prompts: []ext.Prompt{prompt("p")}})
	if !errors.Is(err, ext.ErrInvalidArgument) {
		t.Fatalf("a prompt of another extension's name: %v, want ErrInvalidArgument", err)
	}
	check("refused on a prompt")
	err = b.SetUserCatalog(ctx, "alice", &ext.Catalog{Tools: []ext.Tool{{Name: "a/x"}}, Prompts: []ext.Prompt{prompt("r")}})
	if !errors.Is(err, ext.ErrInvalidArgument) {
		t.Fatalf("a tool of another extension's name: %v, want ErrInvalidArgument", err)
	}
	check("refused on a tool")
}
