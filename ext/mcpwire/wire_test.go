package mcpwire_test

import (
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

// TestMessages: each builder's bytes, as the golden transcripts of the
// endpoint and ext-mcp show them; every message is valid JSON.
func TestMessages(t *testing.T) {
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"result", mcpwire.ResultMsg([]byte(`7`), []byte(`{"content":[]}`)), `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`},
		{"result, string id", mcpwire.AppendResult([]byte("x"), []byte(`"a-1"`), []byte(`{}`)), `x{"jsonrpc":"2.0","id":"a-1","result":{}}`},
		{"error", mcpwire.ErrorMsg([]byte(`3`), mcpwire.CodeMethodNotFound, `method "x" <not> found`, nil),
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"method \"x\" \u003cnot\u003e found"}}`},
		{"error, no id, data", mcpwire.ErrorMsg(nil, mcpwire.CodeInvalidRequest, "bad", json.RawMessage(`{"k":1}`)),
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad","data":{"k":1}}}`},
		{"request", mcpwire.RequestMsg("ah-1", mcpwire.MethodToolsCall, json.RawMessage(`{"name":"echo"}`)),
			`{"jsonrpc":"2.0","id":"ah-1","method":"tools/call","params":{"name":"echo"}}`},
		{"request, no params", mcpwire.RequestMsg("s-2", "roots/list", nil), `{"jsonrpc":"2.0","id":"s-2","method":"roots/list"}`},
		{"request, number id", mcpwire.AppendRequestRawID(nil, json.RawMessage(`2`), mcpwire.MethodToolsList, nil), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`},
		{"request, odd method", mcpwire.RequestMsg("1", "a\"b", nil), `{"jsonrpc":"2.0","id":"1","method":"a\"b"}`},
		{"notification", mcpwire.NotificationMsg(mcpwire.MethodProgress, json.RawMessage(`{"progress":1}`)),
			`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`},
		{"notification, no params", mcpwire.NotificationMsg(mcpwire.MethodInitialized, nil), `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"cancelled", mcpwire.NotificationMsg(mcpwire.MethodCancelled, mcpwire.CancelledParams("ah-7", "context canceled")),
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"context canceled","requestId":"ah-7"}}`},
	} {
		if string(c.got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, c.got, c.want)
		}
		if c.name != "result, string id" && !json.Valid(c.got) {
			t.Errorf("%s: not valid JSON: %s", c.name, c.got)
		}
	}
}

// TestEvent: an SSE event of a message, with and without an id; a message
// with line breaks is compacted onto one data line.
func TestEvent(t *testing.T) {
	for _, c := range []struct {
		id, msg, want string
	}{
		{"", `{"a":1}`, "event: message\ndata: {\"a\":1}\n\n"},
		{"5", `{"a":1}`, "id: 5\nevent: message\ndata: {\"a\":1}\n\n"},
		{"", "{\n \"a\": 1\r\n}", "event: message\ndata: {\"a\":1}\n\n"},
	} {
		got, err := mcpwire.AppendEvent(nil, c.id, []byte(c.msg))
		if err != nil || string(got) != c.want || len(got) > mcpwire.EventSize(c.id, []byte(c.msg)) {
			t.Errorf("AppendEvent(%q, %q) = %q, %v; want %q", c.id, c.msg, got, err, c.want)
		}
	}
	if _, err := mcpwire.AppendEvent(nil, "", []byte("{\n")); err == nil {
		t.Error("an event of broken JSON with a line break: no error")
	}
}

// TestRevisions: which revisions are stateless.
func TestRevisions(t *testing.T) {
	for v, want := range map[string]bool{mcpwire.V20250326: false, mcpwire.V20250618: false, mcpwire.V20251125: false,
		mcpwire.V20260728: true, "2027-01-01": true} {
		if mcpwire.Stateless(v) != want {
			t.Errorf("Stateless(%q) = %v", v, !want)
		}
	}
}

// TestEventField: SSE lines as the standard splits them.
func TestEventField(t *testing.T) {
	for line, want := range map[string][3]string{
		"data: {\"a\":1}": {"data", `{"a":1}`, "colon"},
		"data:x":          {"data", "x", "colon"},
		"data:  two":      {"data", " two", "colon"},
		"id":              {"id", "", ""},
		"id: 7":           {"id", "7", "colon"},
		"retry: 100":      {"retry", "100", "colon"},
		": a comment":     {"", "a comment", "colon"},
		"a:b:c":           {"a", "b:c", "colon"},
	} {
		name, v, colon := mcpwire.EventField([]byte(line))
		c := ""
		if colon {
			c = "colon"
		}
		if got := [3]string{name, string(v), c}; got != want {
			t.Errorf("EventField(%q) = %q, want %q", line, got, want)
		}
	}
}
