package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// initialize opens a session the way the flood does: one raw initialize,
// nothing after it. It returns the status and the session ID.
func initialize(t testing.TB, ep *mcpendpoint.Endpoint, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	ep.ServeHTTP(w, req)
	return w.Code, w.Header().Get("Mcp-Session-Id")
}

// post sends one message on a session, in process.
func post(ep *mcpendpoint.Endpoint, token, sid, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sid)
	w := httptest.NewRecorder()
	ep.ServeHTTP(w, req)
	return w
}

const listBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

// TestSessionFlood reproduces the session-flood attack (8,000 initializes
// by one token took the host from 30 MB to 1.96 GB, none expired): with
// the default caps, 3,000 initializes leave the user 64 sessions, the
// oldest idle ones closed first (404), the newest working, a session with
// a request in flight kept, and the heap flat once the cap is reached.
func TestSessionFlood(t *testing.T) {
	e := newEnv(t, nil)
	block := make(chan struct{})
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ext.TextResult("ok"), nil
	})
	code, busy := initialize(t, e.ep, aliceTok)
	if code != http.StatusOK {
		t.Fatalf("initialize: %d", code)
	}
	// The first session has a call in flight throughout the flood.
	busyDone := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		busyDone <- post(e.ep, aliceTok, busy, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`)
	}()
	waitFor(t, "the busy call to start", func() bool { return len(e.host.Calls()) == 1 })

	var ids []string
	var heapAtCap uint64
	for i := range 3000 {
		code, sid := initialize(t, e.ep, aliceTok)
		if code != http.StatusOK {
			t.Fatalf("initialize %d: HTTP %d", i, code)
		}
		ids = append(ids, sid)
		if i == 999 {
			heapAtCap, _ = memInUse()
		}
	}
	heapEnd, _ := memInUse()
	if n := e.ep.Sessions(); n != mcpendpoint.DefaultMaxSessionsPerUser {
		t.Errorf("Sessions() = %d after the flood, want the per-user cap %d", n, mcpendpoint.DefaultMaxSessionsPerUser)
	}
	if grown := int64(heapEnd) - int64(heapAtCap); grown > 1<<20 {
		t.Errorf("the heap grew %d KiB over 2,000 more initializes at the cap", grown>>10)
	}
	t.Logf("heap at 1,000 initializes %d KiB, at 3,000 %d KiB", heapAtCap>>10, heapEnd>>10)
	if w := post(e.ep, aliceTok, ids[0], listBody); w.Code != http.StatusNotFound {
		t.Errorf("the oldest idle session: HTTP %d, want 404 (closed first)", w.Code)
	}
	if w := post(e.ep, aliceTok, ids[len(ids)-1], listBody); w.Code != http.StatusOK {
		t.Errorf("the newest session: HTTP %d, want 200", w.Code)
	}
	if w := post(e.ep, aliceTok, busy, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); w.Code != http.StatusOK {
		t.Errorf("the busy session: HTTP %d, want 200 (never closed while a request is in flight)", w.Code)
	}
	close(block)
	if w := <-busyDone; !strings.Contains(w.Body.String(), `"ok"`) {
		t.Errorf("the busy call answered %s", w.Body)
	}
	// Another user is not affected.
	if code, _ := initialize(t, e.ep, bobTok); code != http.StatusOK {
		t.Errorf("bob's initialize: %d", code)
	}
}

// TestSessionCaps: when every session of a user at the cap has a request
// in flight, initialize gets 429 naming the user; at the global cap,
// initialize gets 503 with Retry-After and no other user's session is
// closed.
func TestSessionCaps(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{MaxSessionsPerUser: 2, MaxSessions: 3})
	release := make(chan struct{})
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ext.TextResult("ok"), nil
	})
	var alice []string
	done := make(chan struct{}, 2)
	for range 2 {
		_, sid := initialize(t, e.ep, aliceTok)
		alice = append(alice, sid)
		go func() {
			post(e.ep, aliceTok, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`)
			done <- struct{}{}
		}()
	}
	waitFor(t, "both calls to start", func() bool { return len(e.host.Calls()) == 2 })
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	w := httptest.NewRecorder()
	e.ep.ServeHTTP(w, req)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `user \"alice\" has 2 open sessions`) {
		t.Errorf("all busy at the cap: HTTP %d %s, want 429", w.Code, w.Body)
	}
	if code, _ := initialize(t, e.ep, bobTok); code != http.StatusOK {
		t.Fatalf("bob: %d", code)
	}
	req = httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+bobTok)
	w = httptest.NewRecorder()
	e.ep.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "most sessions (3)") {
		t.Errorf("at the global cap: HTTP %d %q %s, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	for _, sid := range alice {
		if w := post(e.ep, aliceTok, sid, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); w.Code != http.StatusOK {
			t.Errorf("alice's session after bob's refusal: HTTP %d", w.Code)
		}
	}
	close(release)
	<-done
	<-done
}

// TestSessionTimeout: a session with no request for SessionTimeout closes
// (404 after), while one that keeps calling tools, or has a long call in
// flight, stays open.
func TestSessionTimeout(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{SessionTimeout: 150 * time.Millisecond})
	slow := make(chan struct{})
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		if req.Name == "notes/list" {
			select {
			case <-slow:
			case <-ctx.Done():
			}
		}
		return ext.TextResult("ok"), nil
	})
	_, idle := initialize(t, e.ep, aliceTok)
	_, active := initialize(t, e.ep, aliceTok)
	_, long := initialize(t, e.ep, aliceTok)
	longDone := make(chan string, 1)
	go func() {
		longDone <- post(e.ep, aliceTok, long, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__list","arguments":{}}}`).Body.String()
	}()
	for deadline := time.Now().Add(600 * time.Millisecond); time.Now().Before(deadline); time.Sleep(40 * time.Millisecond) {
		if w := post(e.ep, aliceTok, active, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`); w.Code != http.StatusOK {
			t.Fatalf("the active session: HTTP %d", w.Code)
		}
	}
	waitFor(t, "the idle session to close", func() bool { return post(e.ep, aliceTok, idle, listBody).Code == http.StatusNotFound })
	close(slow)
	if body := <-longDone; !strings.Contains(body, `"ok"`) {
		t.Errorf("the long call answered %s", body)
	}
	if w := post(e.ep, aliceTok, long, listBody); w.Code != http.StatusOK {
		t.Errorf("the session of the long call: HTTP %d, want 200", w.Code)
	}
	waitFor(t, "every session to expire", func() bool { return e.ep.Sessions() == 0 })

	// Through a real client: its session ends, and its next request fails.
	c := e.mustConnect(t, aliceTok)
	c.names(t)
	waitFor(t, "the client's idle session to close", func() bool { return e.ep.Sessions() == 0 })
	if _, err := c.ListTools(context.Background(), nil); err == nil {
		t.Error("a timed-out session still lists tools")
	}
}

// TestStatelessLease: a stateless request keeps its user's tables for the
// next one, and a flood of them opens no session.
func TestStatelessLease(t *testing.T) {
	e := newEnv(t, nil)
	c := e.session(t, aliceTok, "", nil)
	for i := range 50 {
		if _, err := c.CallTool(tctx(t), mcpCall("notes__add", fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("Sessions() = %d, want 0", n)
	}
	if n := e.host.Subscribers("alice"); n != 1 {
		t.Errorf("%d subscriptions of alice's tools, want 1 (kept between requests)", n)
	}
	b, _ := io.ReadAll(e.rawPost(t, aliceTok, "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil).Body)
	if !strings.Contains(string(b), "first request must be initialize") {
		t.Errorf("a request without a session or a revision: %s", b)
	}
}

func mcpCall(name, args string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)}
}
