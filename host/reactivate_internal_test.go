package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// gatedExt is an in-process extension whose activations report their
// start and then wait at its gate (nil: open).
type gatedExt struct {
	mu      sync.Mutex
	host    ext.Host
	gate    chan struct{}
	started chan string
}

func (g *gatedExt) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "g", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers}}, nil
}

func (g *gatedExt) Configure(_ context.Context, req *ext.ConfigureRequest) error {
	g.mu.Lock()
	g.host = req.Host
	g.mu.Unlock()
	return nil
}

func (g *gatedExt) Shutdown(context.Context) error { return nil }

func (g *gatedExt) Activate(ctx context.Context, user string) error {
	g.mu.Lock()
	h, gate, started := g.host, g.gate, g.started
	g.mu.Unlock()
	if started != nil {
		started <- user
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return h.SetUserTools(ctx, user, []ext.Tool{{Name: "g/mine_" + user}})
}

func (g *gatedExt) Retire(context.Context, string, string) error { return nil }
func (g *gatedExt) ReconcileAll(context.Context) error           { return nil }

func (g *gatedExt) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	return ext.TextResult("mine of " + req.User), nil
}

// TestWaitingUsersReactivatedFirst (issue 17, item 7): after a crash, a
// user with a call waiting is re-activated before the users without one,
// whatever their place in the order: here the last of 24, re-activated
// 8 at a time, is in the second wave instead of the third.
func TestWaitingUsersReactivatedFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ge := &gatedExt{}
	h, err := New(ctx, &Config{DataDir: t.TempDir(), Secrets: SecretsConfig{Backend: "memory"}},
		&Options{Extensions: map[string]InProcess{"g": {Extension: ge}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const users = 24
	name := func(i int) string { return fmt.Sprintf("u%02d", i) }
	for i := range users {
		if _, err := h.Tools(ctx, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	started := make(chan string, users)
	ge.mu.Lock()
	ge.gate, ge.started = gate1, started
	ge.mu.Unlock()
	// What a crash of a process does (an in-process extension never
	// crashes): mark the users, then re-activate them.
	e := h.exts["g"]
	e.crashed(h.ActiveUsers())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.reactivate(h.life, e)
	}()
	wave := func() []string {
		var w []string
		for range 8 {
			select {
			case u := <-started:
				w = append(w, u)
			case <-ctx.Done():
				t.Fatalf("the re-activations stalled after %v", w)
			}
		}
		return w
	}
	first := wave()
	last := name(users - 1)
	called := make(chan error, 1)
	go func() {
		res, err := h.Call(ctx, last, "", "g/mine_"+last, json.RawMessage(`{}`))
		if err == nil && res.Text() != "mine of "+last {
			err = fmt.Errorf("result %q", res.Text())
		}
		called <- err
	}()
	// The call waits: its user is queued first.
	r := e.pendingReactivations()[last]
	for len(r.hurry) == 0 {
		select {
		case err := <-called:
			t.Fatalf("the call did not wait for its user's re-activation: %v", err)
		case <-ctx.Done():
			t.Fatal("the waiting call did not queue its user")
		case <-time.After(time.Millisecond):
		}
	}
	ge.mu.Lock()
	ge.gate = gate2
	ge.mu.Unlock()
	close(gate1)
	second := wave()
	ge.mu.Lock()
	ge.gate = nil
	ge.mu.Unlock()
	close(gate2)
	third := wave()
	<-done
	if err := <-called; err != nil {
		t.Errorf("%s's call: %v", last, err)
	}
	if !slices.Contains(second, last) {
		t.Errorf("waves %v, %v, %v: want %s, whose call waits, in the second", first, second, third, last)
	}
}
