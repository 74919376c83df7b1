package mcpwire_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

func TestParseCall(t *testing.T) {
	for _, p := range []string{
		`{"name":"s/t","arguments":{"a":1},"_meta":{"progressToken":7,"x":"y"},"task":{"ttl":1}}`,
		// An escaped key: encoding/json reads it alike.
		`{"n\u0061me":"s/t","arguments":{"a":1},"_meta":{"progressToken":7,"x":"y"},"task":{"ttl":1}}`,
	} {
		c, err := mcpwire.ParseCall(json.RawMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		if c.Name != "s/t" || string(c.Arguments) != `{"a":1}` || string(c.Meta) != `{"progressToken":7,"x":"y"}` || string(c.Task) != `{"ttl":1}` {
			t.Errorf("ParseCall(%s) = %+v", p, c)
		}
	}
	if _, err := mcpwire.ParseCall(json.RawMessage(`{"name":1}`)); err == nil {
		t.Error("a number as the name: no error")
	}
}

func TestProgressToken(t *testing.T) {
	for meta, want := range map[string]string{
		``: ``, `null`: ``, `{}`: ``, `{"progressToken":null}`: ``,
		`{"x":1,"progressToken":"abc"}`: `"abc"`, `{"progressToken":7}`: `7`,
		`{"progress\u0054oken":7}`: `7`,
	} {
		got, err := mcpwire.ProgressToken(json.RawMessage(meta))
		if err != nil || string(got) != want {
			t.Errorf("ProgressToken(%s) = %s, %v; want %s", meta, got, err, want)
		}
	}
	if _, err := mcpwire.ProgressToken(json.RawMessage(`[1]`)); !errors.Is(err, mcpwire.ErrMetaNotObject) {
		t.Errorf("an array: %v, want ErrMetaNotObject", err)
	}
}

// TestEditCall: the name and _meta replaced, every other member's bytes
// as they came, in their order.
func TestEditCall(t *testing.T) {
	for _, c := range []struct{ p, name, meta, want string }{
		{`{"name":"s/t","arguments":{"b":2, "a":[1 ,2]},"_meta":{"progressToken":7},"task":{"ttl":1},"other":true}`, "t", `{"progressToken":"raw-1"}`,
			`{"arguments":{"b":2, "a":[1 ,2]},"task":{"ttl":1},"other":true,"name":"t","_meta":{"progressToken":"raw-1"}}`},
		{`{"name":"s/t","arguments":{}}`, "t", ``, `{"arguments":{},"name":"t"}`},
		{`{ "name" : "s/t" , "_meta":{"a":1} }`, "", ``, `{"name":"s/t"}`},
		{`{}`, "t\"", `{"a":1}`, `{"name":"t\"","_meta":{"a":1}}`},
		// An escaped key: encoding/json edits it (its keys sorted).
		{`{"n\u0061me":"s/t","arguments":{}}`, "t", ``, `{"arguments":{},"name":"t"}`},
	} {
		got, err := mcpwire.EditCall(json.RawMessage(c.p), c.name, json.RawMessage(c.meta))
		if err != nil || string(got) != c.want {
			t.Errorf("EditCall(%s, %q, %s) = %s, %v; want %s", c.p, c.name, c.meta, got, err, c.want)
		}
	}
	if _, err := mcpwire.EditCall(json.RawMessage(`[]`), "t", nil); !errors.Is(err, mcpwire.ErrParamsNotObject) {
		t.Errorf("an array: %v, want ErrParamsNotObject", err)
	}
}
