package mcpendpoint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzObjectFields: the fields objectFields walks are the ones
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
			return // not what parseFast walks
		}
		var keys []string
		got := map[string][]byte{}
		if !objectFields(b, func(k, v []byte) bool {
			keys = append(keys, string(k))
			got[string(k)] = v
			return true
		}) {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("objectFields walked %q, which does not decode as an object: %v", b, err)
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

func TestPlainID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		`0`: true, `7`: true, `-12`: true, `123456789012345`: true, `"x"`: true, `""`: true, `"<é>"`: true,
		`"\ud800"`: false, `"a\u0041"`: false, `"\""`: false,
		`1234567890123456`: false, `-0`: false, `1.5`: false, `1e3`: false, `null`: false, ``: false, `-`: false,
	} {
		if got := plainID(json.RawMessage(id)); got != want {
			t.Errorf("plainID(%s) = %v, want %v", id, got, want)
		}
	}
}

func TestPlainJSON(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`{"a":[1,2.5,-3,true,false,null,"1e400"]}`: true,
		`{"a":1e3}`:                              false,
		`{"a":2E-1}`:                             false,
		`{"a":` + strings.Repeat("9", 301) + `}`: false,
		strings.Repeat("[", 1000) + strings.Repeat("]", 1000): true,
		strings.Repeat("[", 1001) + strings.Repeat("]", 1001): false,
		"{\"a\":\"\xff\"}": false,
	} {
		if got := plainJSON([]byte(s)); got != want {
			t.Errorf("plainJSON(%.40s) = %v, want %v", s, got, want)
		}
	}
}
