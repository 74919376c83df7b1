package mcpendpoint

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agenthost/agenthost/ext/mcpwire"
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
	`"a string"`, `[]`, `null`, `{"jsonrpc":"2.0"`, `{"a":}`, `5`,
	// Batches: each element a message of its own, or marked as none.
	`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"id":2,"method":"ping"},{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}]`,
	`[{"jsonrpc":"2.0","method":5,"id":1},[{"jsonrpc":"2.0","id":1,"method":"ping"}],1,"x",null,true,{"jsonrpc":"2.0","id":3}]`,
	` [ {"jsonrpc":"2.0","id":"a","method":"tools\/call"} , {} ] `, `[1,]`, `[{"jsonrpc":"2.0"}`, `[] []`,
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
	in, err := parseBody(b)
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if err != nil && (err.code == mcpwire.CodeParseError) != !json.Valid(trimmed) {
		t.Fatalf("%q: parseBody error %v, but json.Valid says %v", b, err, json.Valid(trimmed))
	}
	if in.batch {
		checkBatch(t, trimmed, in, err)
		return
	}
	var want rpcMsg
	werr := json.Unmarshal(b, &want)
	if (err != nil) != (werr != nil) {
		t.Fatalf("%q: parseBody error %v, Unmarshal's %v", b, err, werr)
	}
	if err != nil {
		return
	}
	if !reflect.DeepEqual(in.msgs[0], want) {
		t.Fatalf("%q: parseBody %+v, Unmarshal %+v", b, in.msgs[0], want)
	}
	if len(want.Params) == 0 {
		return
	}
	var wantP callParams
	perr := json.Unmarshal(want.Params, &wantP)
	p, err2 := parseCallParams(want.Params)
	if (err2 != nil) != (perr != nil) || err2 == nil && !reflect.DeepEqual(p, wantP) {
		t.Fatalf("%q: parseCallParams %+v (%v), Unmarshal %+v (%v)", want.Params, p, err2, wantP, perr)
	}
}

// checkBatch checks parseBody's reading of a JSON array, element by
// element, against json.Unmarshal's: an element is a message when it is an
// object that Unmarshal decodes into an rpcMsg, and then the same one.
func checkBatch(t *testing.T, b []byte, in parsedBody, err *rpcError) {
	t.Helper()
	var raws []json.RawMessage
	if werr := json.Unmarshal(b, &raws); werr != nil || len(raws) == 0 || len(raws) > maxBatch {
		if err == nil {
			t.Fatalf("%q: parseBody took a batch that is not one (%d elements, %v)", b, len(raws), werr)
		}
		return
	}
	if err != nil || len(in.msgs) != len(raws) || len(in.bad) != len(raws) {
		t.Fatalf("%q: parseBody %d messages, %d marks, %v; want %d", b, len(in.msgs), len(in.bad), err, len(raws))
	}
	for i, raw := range raws {
		var want rpcMsg
		werr := json.Unmarshal(raw, &want)
		if ok := raw[0] == '{' && werr == nil; ok != (in.bad[i] == "") {
			t.Fatalf("%q: element %d marked %q, Unmarshal's error %v", b, i, in.bad[i], werr)
		}
		if in.bad[i] == "" && !reflect.DeepEqual(in.msgs[i], want) {
			t.Fatalf("%q: element %d %+v, Unmarshal %+v", b, i, in.msgs[i], want)
		}
	}
}

// BenchmarkParseToolCall parses a tools/call body and its params as the
// endpoint does, against json.Unmarshal of both (the baseline: what it did
// before fastMsg).
func BenchmarkParseToolCall(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"notes__echo","arguments":{"text":"hello, world"},"_meta":{"progressToken":"p-1"}}}`)
	b.Run("endpoint", func(b *testing.B) {
		for b.Loop() {
			in, err := parseBody(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parseCallParams(in.msgs[0].Params); err != nil {
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
