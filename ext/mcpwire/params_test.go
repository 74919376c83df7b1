package mcpwire_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

// TestCallParamsName: a tool name goes out as json.Marshal writes it,
// whether it takes the plain path or not.
func TestCallParamsName(t *testing.T) {
	for _, name := range []string{"echo", "a b/c-d_e.f", "say \"hi\"", `back\slash`, "<tag>&", "tab\there", "ünï", "\x7f", "\xff"} {
		got, err := mcpwire.CallParams(name, json.RawMessage(`{}`), nil, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		nb, _ := json.Marshal(name)
		if want := `{"name":` + string(nb) + `,"arguments":{}}`; string(got) != want {
			t.Errorf("CallParams(%q) = %s, want %s", name, got, want)
		}
	}
}

// TestCallParams: the client's _meta goes out with ext-mcp's progress
// token in place of the client's, task params as they came.
func TestCallParams(t *testing.T) {
	for _, c := range []struct {
		meta, token, task, want string
	}{
		{"", "", "", `{"name":"t","arguments":{"a":1}}`},
		{`null`, "", "", `{"name":"t","arguments":{"a":1}}`},
		{`{"trace":"x"}`, "", `{"ttl":5}`, `{"name":"t","arguments":{"a":1},"_meta":{"trace":"x"},"task":{"ttl":5}}`},
		{"", "ah-1", "", `{"name":"t","arguments":{"a":1},"_meta":{"progressToken":"ah-1"}}`},
		{`{"trace":"x","progressToken":7}`, "ah-2", "", `{"name":"t","arguments":{"a":1},"_meta":{"progressToken":"ah-2","trace":"x"}}`},
	} {
		var meta, task json.RawMessage
		if c.meta != "" {
			meta = json.RawMessage(c.meta)
		}
		if c.task != "" {
			task = json.RawMessage(c.task)
		}
		got, err := mcpwire.CallParams("t", json.RawMessage(`{"a":1}`), meta, c.token, task)
		if err != nil || string(got) != c.want {
			t.Errorf("CallParams(meta %s, token %q) = %s, %v; want %s", c.meta, c.token, got, err, c.want)
		}
	}
	if _, err := mcpwire.CallParams("t", json.RawMessage(`{}`), json.RawMessage(`[1]`), "ah-1", nil); !errors.Is(err, mcpwire.ErrMetaNotObject) {
		t.Errorf("a _meta that is an array: %v", err)
	}
}

// TestSplitProgressToken: the client's progress token comes out of its
// _meta; the rest stays.
func TestSplitProgressToken(t *testing.T) {
	for _, c := range []struct{ meta, token, rest string }{
		{``, ``, ``},
		{`null`, ``, ``},
		{`{}`, ``, ``},
		{`{"progressToken":5}`, `5`, ``},
		{`{"progressToken":null,"trace":"x"}`, ``, `{"trace":"x"}`},
		{`{"trace":"x","progressToken":"p"}`, `"p"`, `{"trace":"x"}`},
	} {
		tok, rest, err := mcpwire.SplitProgressToken(json.RawMessage(c.meta))
		if err != nil || string(tok) != c.token || string(rest) != c.rest {
			t.Errorf("SplitProgressToken(%s) = %s, %s, %v; want %s, %s", c.meta, tok, rest, err, c.token, c.rest)
		}
	}
	if _, _, err := mcpwire.SplitProgressToken(json.RawMessage(`"x"`)); !errors.Is(err, mcpwire.ErrMetaNotObject) {
		t.Errorf("a _meta that is a string: %v", err)
	}
}

func TestTraceContext(t *testing.T) {
	for _, c := range []struct{ meta, tp, ts string }{
		{``, "", ""},
		{`null`, "", ""},
		{`{"progressToken":1}`, "", ""},
		{`[1]`, "", ""},
		{`{"traceparent":"00-a-b-01"}`, "00-a-b-01", ""},
		{`{"traceparent":"00-a-b-01","tracestate":"k=v","x":1}`, "00-a-b-01", "k=v"},
		{`{"traceparent":7}`, "", ""},
	} {
		tp, ts := mcpwire.TraceContext(json.RawMessage(c.meta))
		if tp != c.tp || ts != c.ts {
			t.Errorf("TraceContext(%s) = %q, %q; want %q, %q", c.meta, tp, ts, c.tp, c.ts)
		}
	}
}

func TestWithTraceContext(t *testing.T) {
	for _, c := range []struct{ meta, tp, ts, want string }{
		{``, "", "", ``},               // nothing to change
		{`{"x":1}`, "", "", `{"x":1}`}, // as it is
		{`null`, "00-a-b-01", "", `{"traceparent":"00-a-b-01"}`},
		{`{"x":1,"tracestate":"old"}`, "00-a-b-01", "k=v", `{"traceparent":"00-a-b-01","tracestate":"k=v","x":1}`},
		{`{"x":1,"traceparent":"old","tracestate":"old"}`, "00-a-b-01", "", `{"traceparent":"00-a-b-01","x":1}`},
		{`{"x":1,"traceparent":"old"}`, "", "", `{"x":1}`}, // a stale one removed
		{`{"traceparent":"old"}`, "", "", ``},              // nothing left
	} {
		got, err := mcpwire.WithTraceContext(json.RawMessage(c.meta), c.tp, c.ts)
		if err != nil || string(got) != c.want {
			t.Errorf("WithTraceContext(%s, %q, %q) = %s, %v; want %s", c.meta, c.tp, c.ts, got, err, c.want)
		}
	}
	if _, err := mcpwire.WithTraceContext(json.RawMessage(`[1]`), "00-a-b-01", ""); !errors.Is(err, mcpwire.ErrMetaNotObject) {
		t.Errorf("a _meta array: %v, want ErrMetaNotObject", err)
	}
}

// TestEnvelope: the stateless revision's envelope is taken from a
// request's _meta (the three members, nothing else), and none from an
// older revision's request or one without.
func TestEnvelope(t *testing.T) {
	for _, tc := range []struct{ p, want string }{
		{`{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/logLevel":"info","progressToken":1}}`,
			`{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`, ``},
		{`{"name":"x"}`, ``},
		{`{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}`, ``},
		{`not json io.modelcontextprotocol/protocolVersion`, ``},
	} {
		if got := string(mcpwire.Envelope(json.RawMessage(tc.p))); got != tc.want {
			t.Errorf("Envelope(%s) = %s, want %s", tc.p, got, tc.want)
		}
	}
}

// TestWithEnvelope: the envelope's members are set in the params' _meta
// over the same keys (the hop's revision is the sender's, not the one a
// client put there), the other members keep their bytes, and a _meta is
// added where there was none.
func TestWithEnvelope(t *testing.T) {
	env := json.RawMessage(`{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`)
	for _, tc := range []struct{ p, want string }{
		{`{"name":"echo","arguments":{"b":1, "a":2}}`,
			`{"name":"echo","arguments":{"b":1, "a":2},"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`},
		{`{"name":"echo","_meta":{"progressToken":"ah-3","io.modelcontextprotocol/protocolVersion":"2099-01-01"},"arguments":{}}`,
			`{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"ah-3"}}`},
		{`{"name":"echo","arguments":{},"_meta":{"progressToken":"ah-3", "traceparent":"00-x"}}`,
			`{"name":"echo","arguments":{},"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"ah-3", "traceparent":"00-x"}}`},
		{`{"name":"echo","_meta":{ }}`,
			`{"name":"echo","_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`},
		{`{"n\u0061me":"echo","_meta":null}`,
			`{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo"}`},
	} {
		got, err := mcpwire.WithEnvelope(json.RawMessage(tc.p), env)
		if err != nil || string(got) != tc.want {
			t.Errorf("WithEnvelope(%s) = %s, %v; want %s", tc.p, got, err, tc.want)
		}
	}
	if got, err := mcpwire.WithEnvelope(json.RawMessage(`{"a":1}`), nil); err != nil || string(got) != `{"a":1}` {
		t.Errorf("no envelope: %s %v", got, err)
	}
	for _, bad := range []string{`[1]`, `{"_meta":[1]}`} {
		if _, err := mcpwire.WithEnvelope(json.RawMessage(bad), env); err == nil {
			t.Errorf("WithEnvelope(%s) took it", bad)
		}
	}
}

// BenchmarkWithEnvelope is the edit ext-mcp makes to each raw request to
// a stdio server at 2026-07-28: params without _meta, and with a progress
// token.
func BenchmarkWithEnvelope(b *testing.B) {
	env := json.RawMessage(`{"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"agenthost-ext-mcp","version":"v0.1.0"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`)
	for name, p := range map[string]string{
		"plain":    `{"name":"echo","arguments":{"text":"hello"}}`,
		"progress": `{"name":"echo","arguments":{"text":"hello"},"_meta":{"progressToken":"ah-3"}}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := mcpwire.WithEnvelope(json.RawMessage(p), env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
