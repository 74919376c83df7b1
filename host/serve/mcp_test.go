package serve_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/serve"
)

// TestMCPSessionBounds: the operator's mcp bounds reach the endpoint: a
// user's third session closes the first (maxSessionsPerUser 2), and idle
// sessions expire after sessionIdleMinutes.
func TestMCPSessionBounds(t *testing.T) {
	h := newHost(t, &host.Config{MCP: host.MCPConfig{MaxSessionsPerUser: 2, SessionIdleMinutes: 0.01}})
	s, err := serve.New(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	tok, err := s.CreateToken(t.Context(), "alice", "test")
	if err != nil {
		t.Fatal(err)
	}
	send := func(sid, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tok)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const ping = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	var ids []string
	for range 3 {
		code, sid := send("", initialize)
		if code != http.StatusOK {
			t.Fatalf("initialize: %d", code)
		}
		ids = append(ids, sid)
	}
	if code, _ := send(ids[0], ping); code != http.StatusNotFound {
		t.Errorf("the first of 3 sessions (cap 2): HTTP %d, want 404", code)
	}
	if code, _ := send(ids[2], ping); code != http.StatusOK {
		t.Errorf("the newest session: HTTP %d, want 200", code)
	}
	// ids[1] has had no request since it opened; each probe is a request,
	// so probes are further apart than the timeout.
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(time.Second)
		code, _ := send(ids[1], ping)
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a session idle past sessionIdleMinutes (0.6 s) did not expire")
		}
	}
}

// TestCloseSkipsSilentConnections: a connection that never sent a request
// (a client's unused spare) does not hold Close for Shutdown's 5 s, nor
// make it fail.
func TestCloseSkipsSilentConnections(t *testing.T) {
	h := newHost(t, nil)
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // accepted: StateNew
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
