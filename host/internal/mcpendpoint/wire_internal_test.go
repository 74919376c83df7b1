package mcpendpoint

import (
	"encoding/json"
	"reflect"
	"testing"
)

// parseSamples are bodies of one message: plain ones (fastMsg's), and
// ones that only json.Unmarshal may take as it does.
var parseSamples = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__echo","arguments":{"text":"hi"}}}`,
	` {"jsonrpc" : "2.0" , "id" : "a" , "method" : "tools/call" , "params" : {"name":"x","_meta":{"progressToken":1},"task":null}} `,
	`{"jsonrpc":"2.0","id":null,"result":{}}`,
	`{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"m"}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized","params":null}`,
	`{}`,
	// Spelled otherwise, given twice, unknown, escaped, not strings, not ASCII:
	`{"JSONRPC":"2.0","Method":"tools/call","ID":1}`,
	`{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`,
	`{"jsonrpc":"2.0","id":1,"method":"a","extra":true}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools\/call"}`,
	`{"jsonrpc":"2.0","id":1,"method":null}`,
	`{"jsonrpc":2,"id":1,"method":"a"}`,
	`{"jsonrpc":"2.0","id":1,"method":"caf\u00e9"}`,
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"caf\xc3\xa9\"}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
	`{"jsonrpc":"2.0","id":1,"method":"a","params":[1,2]}`,
	`"a string"`, `[]`, `null`, `{"jsonrpc":"2.0"`, `{"a":}`,
}

// TestParseBodyAsUnmarshal checks the plain path of parseBody (fastMsg)
// and of parseCallParams against json.Unmarshal, which they stand for.
func TestParseBodyAsUnmarshal(t *testing.T) {
	for _, s := range parseSamples {
		checkParse(t, []byte(s))
	}
	if !fastMsg([]byte(parseSamples[0]), new(rpcMsg)) {
		t.Fatal("a plain tools/call did not take the fast path")
	}
	if _, ok := fastCallParams(json.RawMessage(`{"name":"notes__echo","arguments":{"text":"hi"}}`)); !ok {
		t.Fatal("plain tools/call params did not take the fast path")
	}
}

func FuzzParseBody(f *testing.F) {
	for _, s := range parseSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParse(t, b) })
}

func checkParse(t *testing.T, b []byte) {
	t.Helper()
	var want rpcMsg
	werr := json.Unmarshal(b, &want)
	msgs, batch, err := parseBody(b)
	if batch {
		return // arrays are Unmarshal's alone
	}
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: parseBody error %v, Unmarshal's %v", b, err, werr)
	}
	if err != nil {
		return
	}
	if !reflect.DeepEqual(msgs[0], want) {
		t.Fatalf("%q: parseBody %+v, Unmarshal %+v", b, msgs[0], want)
	}
	if len(want.Params) == 0 {
		return
	}
	var wantP callParams
	perr := json.Unmarshal(want.Params, &wantP)
	p, err := parseCallParams(want.Params)
	if (err != nil) != (perr != nil) || err == nil && !reflect.DeepEqual(p, wantP) {
		t.Fatalf("%q: parseCallParams %+v (%v), Unmarshal %+v (%v)", want.Params, p, err, wantP, perr)
	}
}

// BenchmarkParseToolCall parses a tools/call body and its params as the
// endpoint does, against json.Unmarshal of both (the baseline: what it did
// before fastMsg).
func BenchmarkParseToolCall(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"notes__echo","arguments":{"text":"hello, world"},"_meta":{"progressToken":"p-1"}}}`)
	b.Run("endpoint", func(b *testing.B) {
		for b.Loop() {
			msgs, _, err := parseBody(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parseCallParams(msgs[0].Params); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-unmarshal", func(b *testing.B) {
		for b.Loop() {
			var m rpcMsg
			var p callParams
			if json.Unmarshal(body, &m) != nil || json.Unmarshal(m.Params, &p) != nil {
				b.Fatal("unmarshal")
			}
		}
	})
}
