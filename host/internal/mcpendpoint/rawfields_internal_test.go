package mcpendpoint

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// fieldsByDecoding is statelessFields as it was: the result decoded by
// encoding/json (ext.CallToolResult.Fields).
func fieldsByDecoding(res *ext.CallToolResult) (*ext.CallToolResult, bool) {
	f, err := res.Fields()
	if err != nil {
		return nil, false
	}
	return checkFields(f)
}

var rawFieldsCases = []string{
	`{"content":[{"type":"text","text":"hello"}]}`,
	`{"content":[{"type":"text","text":"x"}],"isError":true,"structuredContent":{"a":1},"_meta":{"k":"v"}}`,
	`{"content":null,"structuredContent":null,"isError":null}`,
	`{}`, `null`, `[]`, `{"content":{}}`, `{"content":[1]}`, `{"isError":"yes","content":[]}`,
	`{"Content":[{"type":"text","text":"case"}]}`, `{"ISERROR":true,"content":[]}`,
	`{"content":[],"content":[{"type":"text","text":"twice"}]}`,
	`{"cont\u0065nt":[{"type":"text","text":"escaped"}]}`,
	`{"ſtructuredContent":{"long s":1},"content":[]}`,
	` { "content" : [ {"type":"text","text":"spaced"} ] , "isError" : false } `,
	`{"content":[{"type":"text","text":"x"}]`, `{"content":[{"type":"text","text":"x"}]}x`,
}

// TestRawFieldsAsDecoded: the stateless revision's fields read in place
// are what decoding them gave, for every shape (and FuzzRawFields).
func TestRawFieldsAsDecoded(t *testing.T) {
	for _, raw := range rawFieldsCases {
		checkRawFields(t, raw)
	}
}

func FuzzRawFields(f *testing.F) {
	for _, raw := range rawFieldsCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) { checkRawFields(t, raw) })
}

func checkRawFields(t *testing.T, raw string) {
	t.Helper()
	res := &ext.CallToolResult{Raw: json.RawMessage(raw)}
	got, gotOK := statelessFields(res)
	want, wantOK := fieldsByDecoding(res)
	if gotOK != wantOK || !reflect.DeepEqual(got, want) {
		t.Errorf("%s: read %+v %v, decoded %+v %v", raw, got, gotOK, want, wantOK)
	}
}

// BenchmarkStatelessFields: a tool's result read for the stateless
// revision in place (ours) against decoding it (the baseline, same run).
func BenchmarkStatelessFields(b *testing.B) {
	res := &ext.CallToolResult{Raw: json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`)}
	for _, s := range []struct {
		name string
		fn   func(*ext.CallToolResult) (*ext.CallToolResult, bool)
	}{{"in-place", statelessFields}, {"decoded", fieldsByDecoding}} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				s.fn(res)
			}
		})
	}
}
