package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// statelessPost sends a tools/call of tool on the stateless revision
// (2026-07-28) as a go-sdk client writes it, and returns the status,
// the Retry-After header and the body.
func statelessPost(ctx context.Context, url, token, tool, args string) (int, string, string, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{` +
		`"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"e2e","version":"1"},` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"` + tool + `","arguments":` + args + `}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/mcp", strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + token, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool} {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err
}

// TestStatelessOpenRequestsUnderConcurrentCalls: against `agenthost serve`
// with mcp.maxOpenRequestsPerUser 3, twelve of alice's calls of a slow
// tool on the stateless revision sent at once from outside the process:
// exactly three are held open, nine are refused at once with 429,
// Retry-After and -32029 naming the cap; bob is served meanwhile; once
// her calls end, alice is served again.
func TestStatelessOpenRequestsUnderConcurrentCalls(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"mcp": map[string]any{"maxOpenRequestsPerUser": 3}})
	e.startServe()
	alice := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	bob := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "e2e"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Both users' tools are loaded first, so that all twelve race for
	// the cap, not for the first activation.
	for _, tok := range []string{alice, bob} {
		if code, _, body, err := statelessPost(ctx, e.url, tok, "notes__echo", `{"text":"warm"}`); err != nil || code != 200 || !strings.Contains(body, "warm") {
			t.Fatalf("warm-up call: %d %s %v", code, body, err)
		}
	}

	slowCtx, stopSlow := context.WithCancel(ctx)
	type answer struct {
		code        int
		retry, body string
		err         error
	}
	answers := make(chan answer, 12)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, retry, body, err := statelessPost(slowCtx, e.url, alice, "notes__slow", `{"duration":"1m"}`)
			answers <- answer{code, retry, body, err}
		}()
	}
	close(start)
	refused := 0
	for refused < 9 {
		select {
		case a := <-answers:
			var msg struct {
				Error struct {
					Code    int             `json:"code"`
					Message string          `json:"message"`
					Data    json.RawMessage `json:"data"`
				} `json:"error"`
			}
			if a.err != nil || a.code != http.StatusTooManyRequests || a.retry == "" || json.Unmarshal([]byte(a.body), &msg) != nil ||
				msg.Error.Code != -32029 || !strings.Contains(msg.Error.Message, "at most 3 open requests") || !strings.Contains(string(msg.Error.Data), `"scope":"user"`) {
				t.Fatalf("an answer while alice's three calls are held: %d %q %s %v; want 429, Retry-After and -32029 naming the cap", a.code, a.retry, a.body, a.err)
			}
			refused++
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of twelve concurrent calls refused, want 9 (the cap is 3)", refused)
		}
	}
	select {
	case a := <-answers:
		t.Fatalf("a tenth answer while three calls should be held: %d %s %v", a.code, a.body, a.err)
	case <-time.After(500 * time.Millisecond):
	}
	if code, _, body, err := statelessPost(ctx, e.url, bob, "notes__echo", `{"text":"bob"}`); err != nil || code != 200 || !strings.Contains(body, `"bob"`) {
		t.Errorf("bob while alice is at her cap: %d %s %v", code, body, err)
	}
	// The held calls end (the client gives up); alice is served again.
	stopSlow()
	wg.Wait()
	eventually(t, "alice served again once her calls ended", func() bool {
		code, _, body, err := statelessPost(ctx, e.url, alice, "notes__echo", `{"text":"again"}`)
		return err == nil && code == 200 && strings.Contains(body, "again")
	})
}
