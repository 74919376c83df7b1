package mcpendpoint_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// gatedHost is the fake host with hooks that hold the endpoint's calls
// back, to open the windows races need, and a count of the resource
// subscriptions the endpoint made and dropped.
type gatedHost struct {
	*hosttest.Host

	mu       sync.Mutex
	onAttach func()                             // run in AttachSession before it registers
	onDetach func()                             // run in detach before it unregisters
	onSub    func(uri string, unsubscribe bool) // run before SubscribeResource
	subs     map[string]int                     // successful subscribes by URI
	unsubs   map[string]int                     // successful unsubscribes by URI
}

func (g *gatedHost) wrap(h *hosttest.Host) mcpendpoint.Host {
	g.Host = h
	g.subs, g.unsubs = map[string]int{}, map[string]int{}
	return g
}

// set changes the hooks under the lock.
func (g *gatedHost) set(f func(g *gatedHost)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *gatedHost) AttachSession(user string, s ext.Session) (touch, detach func()) {
	g.mu.Lock()
	onAttach := g.onAttach
	g.mu.Unlock()
	if onAttach != nil {
		onAttach()
	}
	touch, detachHost := g.Host.AttachSession(user, s)
	return touch, func() {
		g.mu.Lock()
		onDetach := g.onDetach
		g.mu.Unlock()
		if onDetach != nil {
			onDetach()
		}
		detachHost()
	}
}

func (g *gatedHost) SubscribeResource(ctx context.Context, user, uri string, unsubscribe bool) error {
	g.mu.Lock()
	onSub := g.onSub
	g.mu.Unlock()
	if onSub != nil {
		onSub(uri, unsubscribe)
	}
	err := g.Host.SubscribeResource(ctx, user, uri, unsubscribe)
	if err == nil {
		g.mu.Lock()
		if unsubscribe {
			g.unsubs[uri]++
		} else {
			g.subs[uri]++
		}
		g.mu.Unlock()
	}
	return err
}

// balance returns the successful subscribes and unsubscribes of uri.
func (g *gatedHost) balance(uri string) (subs, unsubs int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.subs[uri], g.unsubs[uri]
}

// holdFirst returns a hook whose first call closes entered and waits for
// release; later calls pass.
func holdFirst(entered chan<- struct{}, release <-chan struct{}) func() {
	var once sync.Once
	return func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
}

// TestInitializeDuringClose: a session whose initialize is still
// registering it with the host when the endpoint closes is not left
// attached to the host (before, Close closed the half-made session
// without detaching it, and initialize then attached it for good, racing
// on its detach func), and its client is not handed a dead session.
func TestInitializeDuringClose(t *testing.T) {
	g := &gatedHost{}
	e := newEnvWith(t, nil, g.wrap)
	entered, release := make(chan struct{}), make(chan struct{})
	g.set(func(g *gatedHost) { g.onAttach = holdFirst(entered, release) })
	code := make(chan int, 1)
	go func() {
		c, _ := initialize(t, e.ep, aliceTok)
		code <- c
	}()
	<-entered
	if err := e.ep.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if c := <-code; c == http.StatusOK {
		t.Errorf("initialize during Close: HTTP %d, want a refusal", c)
	}
	if n := e.host.Attached("alice"); n != 0 {
		t.Errorf("%d sessions of alice still attached to the host after Close", n)
	}
}
