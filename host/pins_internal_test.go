package host

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/pins"
)

// TestRegistryPinCheckOvertaken: a pin check that a newer publication of
// the same extension overtook is dropped (the newer list stays), and a
// held tool is neither listed, looked up nor reached through the tools
// that left the list.
func TestRegistryPinCheckOvertaken(t *testing.T) {
	r := newRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	first := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	r.pins = func(user string, tools []ext.Tool) ([]ext.Tool, map[string]pins.Held) {
		if len(tools) == 1 && tools[0].Name == "s/old" {
			once.Do(func() { close(first) })
			<-release // the old list's check is slow
		}
		held := map[string]pins.Held{}
		var keep []ext.Tool
		for _, t := range tools {
			if t.Description == "changed" {
				held[t.Name] = pins.Held{Tool: t.Name, Mode: ext.PinBlock, Change: "changed"}
				continue
			}
			keep = append(keep, t)
		}
		return keep, held
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.setUser("e", "alice", []ext.Tool{{Name: "s/old"}}) })
	<-first
	if err := r.setUser("e", "alice", []ext.Tool{{Name: "s/new"}, {Name: "s/x"}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	if got := r.list("alice"); len(got) != 2 || got[0].Name != "s/new" {
		t.Fatalf("the overtaken check won: %v", got)
	}
	// s/x changes: held back, not reached through gone.
	if err := r.setUser("e", "alice", []ext.Tool{{Name: "s/new"}, {Name: "s/x", Description: "changed"}}); err != nil {
		t.Fatal(err)
	}
	if got := r.list("alice"); len(got) != 1 {
		t.Errorf("listed: %v", got)
	}
	if _, ok := r.lookup("alice", "s/x"); ok {
		t.Error("the held tool was found (through gone)")
	}
	if h, ok := r.heldTool("alice", "s/x"); !ok || h.Change != "changed" {
		t.Errorf("heldTool: %+v %v", h, ok)
	}
}
