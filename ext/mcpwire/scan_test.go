package mcpwire_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

// FuzzObjectFields: the fields ObjectFields walks are the ones
// encoding/json decodes, value bytes included.
func FuzzObjectFields(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}], "d":"x\"y" ,"e":null,"f":true,"g":-1.5e3}`,
		`{"a":{"b":{}},"c":[]}`, `{"a":"\\"}`, `{"k\"":1}`, `[1]`, `"s"`, `{"a":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return // not what the scanner walks
		}
		var keys []string
		got := map[string][]byte{}
		if !mcpwire.ObjectFields(b, func(k, v []byte) bool {
			keys = append(keys, string(k))
			got[string(k)] = v
			return true
		}) {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("ObjectFields walked %q, which does not decode as an object: %v", b, err)
		}
		if len(keys) == len(got) && len(got) != len(want) {
			t.Fatalf("%q: fields %q, want %d", b, keys, len(want))
		}
		for k, v := range got {
			if len(keys) == len(got) && !bytes.Equal(bytes.TrimSpace(want[k]), v) {
				t.Fatalf("%q: field %q = %q, want %q", b, k, v, want[k])
			}
		}
	})
}

// TestPlainString: printable ASCII strings without escapes are read; the
// rest is left to encoding/json.
func TestPlainString(t *testing.T) {
	for v, want := range map[string]bool{`"tools/call"`: true, `""`: true, `"a\"b"`: false, `"é"`: false, `1`: false, `"`: false} {
		var s string
		if got := mcpwire.PlainString([]byte(v), &s); got != want || got && `"`+s+`"` != v {
			t.Errorf("PlainString(%s) = %v, %q", v, got, s)
		}
	}
	s := "kept"
	if !mcpwire.PlainString(nil, &s) || s != "kept" {
		t.Errorf("PlainString(nil) changed its target: %q", s)
	}
	var a []byte
	if !mcpwire.Once(&a, []byte("1")) || mcpwire.Once(&a, []byte("2")) || string(a) != "1" {
		t.Errorf("Once: %q", a)
	}
}
