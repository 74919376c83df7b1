package mcpendpoint

import (
	"encoding/json"
	"strings"
	"testing"
)

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
