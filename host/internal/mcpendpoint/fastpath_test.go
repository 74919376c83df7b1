package mcpendpoint_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// TestFastPath checks that tools/call on an open session is served by the
// fast path with the same answer go-sdk gives, and that everything it does
// not recognise exactly still goes to go-sdk.
func TestFastPath(t *testing.T) {
	e := newEnv(t, nil)
	c := e.mustConnect(t, aliceTok)
	before := mcpendpoint.FastCalls(e.ep)
	res := c.call(t, "notes__add", `{"text":"hi"}`)
	if res.IsError || !strings.Contains(text(res), "notes/add") {
		t.Fatalf("call = %+v", res)
	}
	if got := mcpendpoint.FastCalls(e.ep) - before; got != 1 {
		t.Fatalf("fast path served %d calls of 1 made through go-sdk's client", got)
	}

	// The same call, once on the fast path and once through go-sdk (a
	// progress token sends it there), answers the same.
	result := func(body string) json.RawMessage {
		t.Helper()
		resp := e.rawPost(t, aliceTok, c.ID(), body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d for %s", resp.StatusCode, body)
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(rpcMessage(t, resp), &msg); err != nil {
			t.Fatal(err)
		}
		if string(msg.ID) != `"x-1"` {
			t.Errorf("response id %s, want the request's", msg.ID)
		}
		if msg.Error != nil {
			return msg.Error
		}
		return msg.Result
	}
	n := mcpendpoint.FastCalls(e.ep)
	fast := result(`{"jsonrpc":"2.0","id":"x-1","method":"tools/call","params":{"name":"notes__add","arguments":{"text":"hi"}}}`)
	if mcpendpoint.FastCalls(e.ep) != n+1 {
		t.Fatal("a plain tools/call missed the fast path")
	}
	slow := result(`{"jsonrpc":"2.0","id":"x-1","method":"tools/call","params":{"name":"notes__add","arguments":{"text":"hi"},"_meta":{"progressToken":"p"}}}`)
	if mcpendpoint.FastCalls(e.ep) != n+1 {
		t.Fatal("a call with a progress token took the fast path")
	}
	var a, b any
	if json.Unmarshal(fast, &a) != nil || json.Unmarshal(slow, &b) != nil {
		t.Fatalf("results: %s / %s", fast, slow)
	}
	if ja, jb := mustJSON(a), mustJSON(b); ja != jb {
		t.Errorf("fast path answered\n%s\ngo-sdk answered\n%s", ja, jb)
	}

	// An unknown tool gets go-sdk's error; bob's token on alice's session
	// is refused by go-sdk's binding, not served.
	if got := result(`{"jsonrpc":"2.0","id":"x-1","method":"tools/call","params":{"name":"nope","arguments":{}}}`); !strings.Contains(string(got), "nope") {
		t.Errorf("unknown tool: %s", got)
	}
	resp := e.rawPost(t, bobTok, c.ID(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob on alice's session: HTTP %d, want 403", resp.StatusCode)
	}
	if mcpendpoint.FastCalls(e.ep) != n+1 {
		t.Error("the fast path served a call it should have passed on")
	}
	for _, call := range e.host.Calls() {
		if call.User != "alice" {
			t.Errorf("the host ran a call for %q", call.User)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
