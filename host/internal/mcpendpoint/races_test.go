package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
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

// subscribeBody subscribes to (or unsubscribes from) uri, as a request
// of a fresh id.
func subscribeBody(method, uri string) string {
	return `{"jsonrpc":"2.0","id":"s-` + strconv.FormatInt(subID.Add(1), 10) + `","method":"resources/` + method + `","params":{"uri":"` + uri + `"}}`
}

var subID atomic.Int64

const todayURI = "notes://alice/today"

// TestCloseWaitsForSessionsClosing: Close waits for a session that
// another request (DELETE) is closing at the same time, its resource
// subscriptions dropped, instead of returning while that close goes on
// and starts its cleanup after Close's wait (a goroutine no one waits for).
func TestCloseWaitsForSessionsClosing(t *testing.T) {
	g := &gatedHost{}
	e := newEnvWith(t, nil, g.wrap)
	e.host.SetCatalog("alice", hosttest.Catalog{Resources: []api.Resource{{Resource: ext.Resource{URI: todayURI}}}})
	_, sid := initialize(t, e.ep, aliceTok)
	if w := post(e.ep, aliceTok, sid, subscribeBody("subscribe", todayURI)); w.Code != http.StatusOK || strings.Contains(w.Body.String(), "error") {
		t.Fatalf("subscribing: HTTP %d %s", w.Code, w.Body)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	g.set(func(g *gatedHost) { g.onDetach = holdFirst(entered, release) })
	deleted := make(chan int, 1)
	go func() {
		req := httptest.NewRequest(http.MethodDelete, "/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+aliceTok)
		req.Header.Set("Mcp-Session-Id", sid)
		w := httptest.NewRecorder()
		e.ep.ServeHTTP(w, req)
		deleted <- w.Code
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		_ = e.ep.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Error("Close returned while a DELETE was still closing a session")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-closed
	if code := <-deleted; code != http.StatusNoContent {
		t.Errorf("DELETE: HTTP %d", code)
	}
	if subs, unsubs := g.balance(todayURI); subs != 1 || unsubs != 1 {
		t.Errorf("when Close returned: %d subscribes, %d unsubscribes of %s, want 1 and 1", subs, unsubs, todayURI)
	}
}

// holdFirstOf is holdFirst for the first subscribe (or, with unsubscribe,
// unsubscribe) at the host.
func holdFirstOf(unsubscribe bool, entered chan<- struct{}, release <-chan struct{}) func(string, bool) {
	var once sync.Once
	return func(_ string, unsub bool) {
		if unsub != unsubscribe {
			return
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
}

// deleteSession ends a session with DELETE.
func deleteSession(t *testing.T, ep *mcpendpoint.Endpoint, token, sid string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodDelete, "/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sid)
	w := httptest.NewRecorder()
	ep.ServeHTTP(w, req)
	if w.Code != http.StatusNoContent {
		t.Errorf("DELETE: HTTP %d %s", w.Code, w.Body)
	}
}

// TestSubscriptionRaces: a session's subscriptions stay in step with the
// host's count whatever runs at once. A second subscribe of a resource
// while the first is at the host is refused (before, both reached the
// host, the session recorded one, and its close dropped one: the other
// was held for good). A session closed while its unsubscribe is at the
// host leaves that unsubscribe to the request (before, close dropped the
// subscription too, taking another session's from the host).
func TestSubscriptionRaces(t *testing.T) {
	t.Run("twice at once", func(t *testing.T) {
		g := &gatedHost{}
		e := newEnvWith(t, nil, g.wrap)
		e.host.SetCatalog("alice", hosttest.Catalog{Resources: []api.Resource{{Resource: ext.Resource{URI: todayURI}}}})
		_, sid := initialize(t, e.ep, aliceTok)
		entered, release := make(chan struct{}), make(chan struct{})
		g.set(func(g *gatedHost) { g.onSub = holdFirstOf(false, entered, release) })
		first := make(chan string, 1)
		go func() { first <- post(e.ep, aliceTok, sid, subscribeBody("subscribe", todayURI)).Body.String() }()
		<-entered
		second := post(e.ep, aliceTok, sid, subscribeBody("subscribe", todayURI)).Body.String()
		close(release)
		if body := <-first; strings.Contains(body, "error") {
			t.Errorf("the first subscribe: %s", body)
		}
		if !strings.Contains(second, "under way") {
			t.Errorf("the second subscribe while the first ran: %s, want a refusal", second)
		}
		deleteSession(t, e.ep, aliceTok, sid)
		if err := e.ep.Close(); err != nil {
			t.Fatal(err)
		}
		if subs, unsubs := g.balance(todayURI); subs != unsubs {
			t.Errorf("%d subscribes and %d unsubscribes of %s at the host after Close", subs, unsubs, todayURI)
		}
	})
	t.Run("unsubscribe as the session closes", func(t *testing.T) {
		g := &gatedHost{}
		e := newEnvWith(t, nil, g.wrap)
		e.host.SetCatalog("alice", hosttest.Catalog{Resources: []api.Resource{{Resource: ext.Resource{URI: todayURI}}}})
		_, a := initialize(t, e.ep, aliceTok)
		_, b := initialize(t, e.ep, aliceTok)
		for _, sid := range []string{a, b} {
			if body := post(e.ep, aliceTok, sid, subscribeBody("subscribe", todayURI)).Body.String(); strings.Contains(body, "error") {
				t.Fatalf("subscribing: %s", body)
			}
		}
		entered, release := make(chan struct{}), make(chan struct{})
		g.set(func(g *gatedHost) { g.onSub = holdFirstOf(true, entered, release) })
		unsubscribed := make(chan string, 1)
		go func() { unsubscribed <- post(e.ep, aliceTok, a, subscribeBody("unsubscribe", todayURI)).Body.String() }()
		<-entered
		deleteSession(t, e.ep, aliceTok, a)
		close(release)
		<-unsubscribed
		if n := e.host.ResourceSubscribers("alice")[todayURI]; n != 1 {
			t.Errorf("%d subscribers of %s with b's subscription open, want 1", n, todayURI)
		}
		if err := e.ep.Close(); err != nil {
			t.Fatal(err)
		}
		if subs, unsubs := g.balance(todayURI); subs != 2 || unsubs != 2 {
			t.Errorf("%d subscribes and %d unsubscribes of %s at the host after Close, want 2 and 2", subs, unsubs, todayURI)
		}
	})
}

// TestPendingClientRequestsBounded: a session holds at most 256 requests
// to its client unanswered; one more fails at once (ext.ErrUnavailable)
// instead of growing the session's table for as long as a client that
// never answers is connected.
func TestPendingClientRequestsBounded(t *testing.T) {
	e := newEnv(t, nil)
	const asks = 257
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		ctx, cancel := context.WithCancel(ctx)
		refused := make(chan error, asks)
		var wg sync.WaitGroup
		for range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := req.Session.Request(ctx, ext.MethodCreateMessage, json.RawMessage(`{"messages":[],"maxTokens":1}`))
				if ctx.Err() == nil {
					refused <- err
				}
			}()
		}
		var res *ext.CallToolResult
		select {
		case err := <-refused:
			res = ext.TextResult(fmt.Sprintf("refused: %v (unavailable: %v)", err, errors.Is(err, ext.ErrUnavailable)))
		case <-time.After(5 * time.Second):
			res = ext.TextResult("none refused")
		}
		cancel()
		wg.Wait()
		return res, nil
	})
	resp := e.rawPost(t, aliceTok, "", strings.Replace(initBody, `"capabilities":{}`, `"capabilities":{"sampling":{}}`, 1), nil)
	sid := resp.Header.Get("Mcp-Session-Id")
	_, msgs := e.rpc(t, aliceTok, sid, "2025-11-25", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`)
	last := string(msgs[len(msgs)-1])
	if !strings.Contains(last, "too many requests to the client") || !strings.Contains(last, "unavailable: true") {
		t.Errorf("the %dth request to a client that answers none: %s", asks, last)
	}
}

// pings is a JSON-RPC batch of n pings.
func pings(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestBatchBounded: a 2025-03-26 batch holds at most 256 messages; a
// bigger one is refused whole (400, Invalid Request) instead of getting a
// goroutine per request (a 4 MiB body of pings held 12,000 goroutines and
// 60 MiB of heap).
func TestBatchBounded(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.session(t, aliceTok, "2025-03-26", nil)
	hdr := map[string]string{"Mcp-Protocol-Version": "2025-03-26"}
	resp := e.rawPost(t, aliceTok, cs.ID(), pings(256), hdr)
	var out []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out) != 256 {
		t.Errorf("a batch of 256: HTTP %d, %d answers, %v", resp.StatusCode, len(out), err)
	}
	resp = e.rawPost(t, aliceTok, cs.ID(), pings(257), hdr)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":-32600`) || !strings.Contains(string(b), "at most 256") {
		t.Errorf("a batch of 257: HTTP %d %.300s, want 400 Invalid Request", resp.StatusCode, b)
	}
}
