package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// addCall is a tools/call of notes__add with id (JSON) and arguments
// {"n":n}: the fake host records each that ran.
func addCall(id string, n int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"notes__add","arguments":{"n":%d}}}`, id, n)
}

// batchAnswers reads a POST's answers as "<id> ok" for a result and "<id>
// <code> #<n>" for an error, n the batch message its text names (0: none),
// sorted: a batch's answers come in any order.
func batchAnswers(t *testing.T, body []byte) []string {
	t.Helper()
	var msgs []struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &msgs); err != nil {
		t.Fatalf("the answer %s is no JSON-RPC batch: %v", body, err)
	}
	var out []string
	for _, m := range msgs {
		switch {
		case m.JSONRPC != "2.0" || len(m.ID) == 0 || (m.Result == nil) == (m.Error == nil):
			t.Errorf("an answer of %s is no JSON-RPC response", body)
		case m.Error != nil:
			n := 0
			if sub := regexp.MustCompile(`^message (\d+) of the batch: `).FindStringSubmatch(m.Error.Message); sub != nil {
				fmt.Sscan(sub[1], &n)
			}
			out = append(out, fmt.Sprintf("%s %d #%d", m.ID, m.Error.Code, n))
		default:
			out = append(out, string(m.ID)+" ok")
		}
	}
	slices.Sort(out)
	return out
}

// TestBatchElements: a 2025-03-26 session answers each message of a batch
// on its own (JSON-RPC 2.0 §6): the valid requests run and get their
// answers, and each element that is no valid message — or an initialize,
// which a batch may not hold — gets an Invalid Request error naming it,
// under its id when it is a request with a string or number id, else
// null (so is a second request with an id given before). A batch of
// notifications and responses alone gets 202; an empty one, one Invalid
// Request error; one that is not JSON, one Parse error.
func TestBatchElements(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.session(t, aliceTok, "2025-03-26", nil)
	hdr := map[string]string{"Mcp-Protocol-Version": "2025-03-26"}
	note := `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	for _, tc := range []struct {
		name   string
		body   string
		status int
		want   []string // the answers (batchAnswers); nil with status 202
		calls  []string // the arguments of the calls that ran
		notes  int      // notifications that reached the host
	}{
		{name: "valid", body: "[" + addCall("1", 1) + `,{"jsonrpc":"2.0","id":"p","method":"ping"}]`,
			status: 200, want: []string{`"p" ok`, "1 ok"}, calls: []string{`{"n":1}`}},
		{name: "no jsonrpc", body: "[" + addCall("1", 1) + `,{"id":2,"method":"tools/call","params":{"name":"notes__add","arguments":{"n":2}}}]`,
			status: 200, want: []string{"1 ok", "2 -32600 #2"}, calls: []string{`{"n":1}`}},
		{name: "wrong jsonrpc", body: `[{"jsonrpc":"1.0","id":"x","method":"ping"},` + addCall("1", 1) + `,{"jsonrpc":2,"id":3,"method":"ping"}]`,
			status: 200, want: []string{`"x" -32600 #1`, "1 ok", "3 -32600 #3"}, calls: []string{`{"n":1}`}},
		{name: "object id", body: "[" + addCall(`{"a":1}`, 2) + "," + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "null -32600 #1"}, calls: []string{`{"n":1}`}},
		{name: "array and boolean ids", body: "[" + addCall(`[1]`, 2) + "," + addCall("true", 3) + "," + addCall(`"s"`, 1) + "]",
			status: 200, want: []string{`"s" ok`, "null -32600 #1", "null -32600 #2"}, calls: []string{`{"n":1}`}},
		{name: "neither method nor id", body: `[{"jsonrpc":"2.0","params":{}},` + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "null -32600 #1"}, calls: []string{`{"n":1}`}},
		{name: "response without result or error", body: "[" + addCall("1", 1) + `,{"jsonrpc":"2.0","id":"ah-99"}]`,
			status: 200, want: []string{"1 ok", "null -32600 #2"}, calls: []string{`{"n":1}`}},
		{name: "method not a string", body: `[{"jsonrpc":"2.0","id":4,"method":5},` + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "null -32600 #1"}, calls: []string{`{"n":1}`}},
		{name: "array element", body: "[[" + addCall("9", 9) + "]," + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "null -32600 #1"}, calls: []string{`{"n":1}`}},
		{name: "scalar elements", body: `[1,"tools/call",null,true,` + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "null -32600 #1", "null -32600 #2", "null -32600 #3", "null -32600 #4"}, calls: []string{`{"n":1}`}},
		{name: "initialize", body: `[{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}},` + addCall("1", 1) + "]",
			status: 200, want: []string{"1 ok", "3 -32600 #1"}, calls: []string{`{"n":1}`}},
		{name: "same id twice", body: "[" + addCall("1", 1) + "," + addCall("1", 2) + "," + addCall(`"1"`, 3) + "]",
			status: 200, want: []string{`"1" ok`, "1 ok", "null -32600 #2"}, calls: []string{`{"n":1}`, `{"n":3}`}},
		{name: "only invalid", body: `[1,2,3]`,
			status: 200, want: []string{"null -32600 #1", "null -32600 #2", "null -32600 #3"}},
		{name: "invalid beside a notification", body: "[" + note + `,{"foo":"boo"}]`,
			status: 200, want: []string{"null -32600 #2"}, notes: 1},
		{name: "notifications and responses", body: "[" + note + `,{"jsonrpc":"2.0","id":"ah-7","result":{}},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
			status: 202, notes: 1},
		{name: "empty", body: ` [ ] `, status: 400, want: []string{"null -32600 #0"}},
		{name: "not JSON", body: "[" + addCall("1", 1) + ",", status: 400, want: []string{"null -32700 #0"}},
		{name: "not JSON after it", body: "[" + addCall("1", 1) + "] x", status: 400, want: []string{"null -32700 #0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, notes := len(e.host.Calls()), len(e.host.SessionNotes())
			resp := e.rawPost(t, aliceTok, cs.ID(), tc.body, hdr)
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d %s, want %d", resp.StatusCode, b, tc.status)
			}
			if tc.status == http.StatusAccepted {
				if len(b) != 0 {
					t.Errorf("a body with 202: %s", b)
				}
			} else {
				if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
				}
				if tc.status == http.StatusBadRequest {
					// One error, not an array (JSON-RPC 2.0 §6).
					b = append(append([]byte("["), b...), ']')
				}
				if got := batchAnswers(t, b); !slices.Equal(got, tc.want) {
					t.Errorf("answers %q, want %q; body %s", got, tc.want, b)
				}
			}
			var ran []string
			for _, c := range e.host.Calls()[calls:] {
				ran = append(ran, c.Args)
			}
			slices.Sort(ran)
			if !slices.Equal(ran, tc.calls) {
				t.Errorf("calls ran with %q, want %q", ran, tc.calls)
			}
			if got := len(e.host.SessionNotes()) - notes; got != tc.notes {
				t.Errorf("%d notifications reached the host, want %d", got, tc.notes)
			}
		})
	}
	// Without a session, a batch holding an initialize opens none.
	resp := e.rawPost(t, aliceTok, "", `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}]`, hdr)
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Mcp-Session-Id") != "" ||
		!strings.Contains(string(b), `"code":-32600`) || !strings.Contains(string(b), "initialize must be sent alone") {
		t.Errorf("an initialize in a batch without a session: HTTP %d %s", resp.StatusCode, b)
	}
	if n := e.ep.Sessions(); n != 1 {
		t.Errorf("%d sessions open after initializes in batches, want 1", n)
	}
	// The session still serves a plain request.
	if res := e.rawPost(t, aliceTok, cs.ID(), addCall("10", 10), hdr); res.StatusCode != http.StatusOK {
		t.Errorf("a request after the batches: HTTP %d", res.StatusCode)
	}
}

// TestBatchElementErrorsNamed: each refused element's error says which
// message of the batch it is and what is wrong with it.
func TestBatchElementErrorsNamed(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.session(t, aliceTok, "2025-03-26", nil)
	resp := e.rawPost(t, aliceTok, cs.ID(), `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"id":2,"method":"ping"},`+
		`{"jsonrpc":"2.0","id":{},"method":"ping"},{"jsonrpc":"2.0","method":[]},7,[],`+
		`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{}},{"jsonrpc":"2.0","id":4},{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		map[string]string{"Mcp-Protocol-Version": "2025-03-26"})
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`"id":2,"error":{"code":-32600,"message":"message 2 of the batch: \"jsonrpc\" must be \"2.0\""}`,
		`"id":null,"error":{"code":-32600,"message":"message 3 of the batch: \"id\" must be a string or a number"}`,
		`"id":null,"error":{"code":-32600,"message":"message 4 of the batch: \"method\" must be a string, not a JSON array"}`,
		`"id":null,"error":{"code":-32600,"message":"message 5 of the batch: a JSON-RPC message must be an object, not a number"}`,
		`"id":null,"error":{"code":-32600,"message":"message 6 of the batch: a JSON-RPC message must be an object, not an array"}`,
		`"id":3,"error":{"code":-32600,"message":"message 7 of the batch: initialize must not be part of a JSON-RPC batch"}`,
		`"id":null,"error":{"code":-32600,"message":"message 8 of the batch: a response needs a result or an error"}`,
		`"id":null,"error":{"code":-32600,"message":"message 9 of the batch: message 1 of the batch has the same id"}`,
		`"id":1,"result":{}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in %s", want, b)
		}
	}
}

// TestBatchRefusedOnStream: when a request of the batch sends progress,
// its answer becomes an SSE stream, and the errors of the batch's refused
// elements travel on it as events beside the request's progress and result.
func TestBatchRefusedOnStream(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		if err := ext.Progress(ctx, req.Session, 1, 1, "step"); err != nil {
			return nil, err
		}
		return ext.TextResult("done"), nil
	})
	cs := e.session(t, aliceTok, "2025-03-26", nil)
	_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-03-26", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add","arguments":{},"_meta":{"progressToken":"t"}}},"x",{"id":2,"method":"ping"}]`)
	var got []string
	for _, m := range msgs {
		got = append(got, string(m))
	}
	all := strings.Join(got, "\n")
	if len(msgs) != 4 || !strings.Contains(all, `"progressToken":"t"`) || !strings.Contains(all, `"id":1,"result"`) ||
		!strings.Contains(all, `"id":null,"error":{"code":-32600,"message":"message 2 of the batch`) ||
		!strings.Contains(all, `"id":2,"error":{"code":-32600,"message":"message 3 of the batch`) {
		t.Errorf("events:\n%s", all)
	}
	if calls := e.host.Calls(); len(calls) != 1 {
		t.Errorf("%d calls ran, want 1", len(calls))
	}
}

// TestSingleMessageRefused: a POST of one message that is no valid one is
// refused whole (400): Parse error when it is not JSON, else Invalid
// Request, under its id only when it is a request with a string or number
// id.
func TestSingleMessageRefused(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.session(t, aliceTok, "2025-11-25", nil)
	for _, tc := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"`, `"id":null,"error":{"code":-32700,`},
		{`5`, `"id":null,"error":{"code":-32600,"message":"a JSON-RPC message must be an object, not a number"}`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `"id":null,"error":{"code":-32600,"message":"\"id\" must be a string or a number"}`},
		{`{"id":"q","method":"ping"}`, `"id":"q","error":{"code":-32600,"message":"\"jsonrpc\" must be \"2.0\""}`},
		{`{"jsonrpc":"2.0","id":"ah-1"}`, `"id":null,"error":{"code":-32600,"message":"a response needs a result or an error"}`},
		{`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}`, `"id":2,"error":{"code":-32600,"message":"the session is already initialized"}`},
	} {
		resp := e.rawPost(t, aliceTok, cs.ID(), tc.body, nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: HTTP %d %s, want 400 with %s", tc.body, resp.StatusCode, b, tc.want)
		}
	}
	if calls := e.host.Calls(); len(calls) != 0 {
		t.Errorf("calls ran: %v", calls)
	}
}
