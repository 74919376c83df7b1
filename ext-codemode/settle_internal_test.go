package codemode

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// settleDecoded is settle as it was, decoding the whole result with
// encoding/json: the oracle settle's in-place reading must agree with.
func settleDecoded(res *InnerResult) (payload string, ok bool, other []json.RawMessage) {
	var r struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	}
	_ = json.Unmarshal(res.Raw, &r)
	var text []string
	for _, b := range r.Content {
		var c struct{ Type, Text string }
		if json.Unmarshal(b, &c) != nil {
			continue
		}
		if c.Type == "text" {
			text = append(text, c.Text)
		} else {
			other = append(other, b)
		}
	}
	joined := strings.Join(text, "\n")
	if res.IsError {
		if joined == "" {
			joined = "the tool failed"
		}
		return joined, false, nil
	}
	if len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" {
		return string(r.StructuredContent), true, other
	}
	b, _ := json.Marshal(joined)
	return string(b), true, other
}

// TestSettleAsDecoded: settle reads a result in place (ext/mcpwire's
// scanner) as encoding/json decoded it: the same promise payload (as
// JavaScript would parse it), outcome and passed-on blocks, for plain
// results and the odd ones the scanner leaves to encoding/json.
func TestSettleAsDecoded(t *testing.T) {
	for _, raw := range []string{
		`{"content":[],"structuredContent":{"a":1}}`,
		`{"content":[{"type":"text","text":"hello"}]}`,
		`{"content":[{"type":"text","text":"a \"quoted\" line\nand é ✓"},{"type":"text","text":"two"}]}`,
		`{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
		`{ "content" : [ { "type" : "text" , "text" : "spaced" } ] , "structuredContent" : null }`,
		`{"content":[{"type":"text"}]}`,
		`{"content":[{"type":"text","text":null}]}`,
		`{"content":[{"type":"text","text":5},{"type":"image"}]}`,
		`{"content":[{"Type":"text","TEXT":"folded"}]}`,
		`{"Content":[{"type":"text","text":"folded key"}]}`,
		`{"content":[{"type":"te\u0078t","text":"escaped type"}]}`,
		`{"content":[{"text":"no type"}]}`,
		`{"content":[1,"x",null,{"type":"text","text":"after junk"}]}`,
		`{"content":null,"structuredContent":[1,2]}`,
		`{"content":"not an array","structuredContent":{"b":true}}`,
		`{"content":[{"type":"text","text":"dup"}],"content":[{"type":"text","text":"second"}]}`,
		`{"structuredContent":{"x":"y"},"isError":false,"_meta":{"k":1}}`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///a","text":"t"}}]}`,
		`[]`,
		`not json`,
		``,
	} {
		for _, isError := range []bool{false, true} {
			res := &InnerResult{Raw: json.RawMessage(raw), IsError: isError}
			wantPayload, wantOK, wantOther := settleDecoded(res)
			s, ic, other := settle(3, res, nil)
			if s.id != 3 || s.ok != wantOK || !reflect.DeepEqual(other, wantOther) {
				t.Errorf("%s (isError %v): ok %v other %s, want ok %v other %s", raw, isError, s.ok, other, wantOK, wantOther)
			}
			// The payload as the promise gets it: JSON.parse'd when ok.
			if wantOK {
				var got, want any
				if json.Unmarshal([]byte(s.payload), &got) != nil || json.Unmarshal([]byte(wantPayload), &want) != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("%s: payload %s, want %s", raw, s.payload, wantPayload)
				}
			} else if s.payload != wantPayload || ic.Error != wantPayload {
				t.Errorf("%s (isError): payload %q error %q, want %q", raw, s.payload, ic.Error, wantPayload)
			}
		}
	}
}
