package extmcp

import (
	"encoding/json"
	"testing"
)

// TestTopIsError: a result's isError is read in place from its top level
// only; a result that is no JSON object, or whose isError is no boolean,
// is malformed; an escaped key is read as encoding/json reads it.
func TestTopIsError(t *testing.T) {
	for res, want := range map[string][2]bool{
		`{"content":[],"isError":true}`:                {true, true},
		`{"content":[],"isError":false}`:               {false, true},
		`{"content":[{"isError":true}]}`:               {false, true},
		` { "isError" : true } `:                       {true, true},
		`{"isError":null}`:                             {false, false},
		`{"isError":"yes"}`:                            {false, false},
		`{"isError":true`:                              {false, false},
		`[true]`:                                       {false, false},
		`{"is\u0045rror":true,"content":[]}`:           {true, true},
		`{"a\"b":1,"isError":true}`:                    {true, true},
		`{"content":"}","isError":true,"x":{"y":"{"}}`: {true, true},
	} {
		isErr, ok := topIsError(json.RawMessage(res))
		if [2]bool{isErr, ok} != want {
			t.Errorf("topIsError(%s) = %v, %v; want %v", res, isErr, ok, want)
		}
	}
}

// TestRawID: ext-mcp's own ids and tokens are JSON strings with its
// prefix; anything else is the server's or go-sdk's.
func TestRawID(t *testing.T) {
	for v, want := range map[string]string{`"ah-1"`: "ah-1", `"ah-"`: "ah-", `1`: "", `"x-1"`: "", `null`: "", ``: "", `"ah-1`: ""} {
		if got := string(rawID([]byte(v))); got != want {
			t.Errorf("rawID(%s) = %q, want %q", v, got, want)
		}
	}
}
