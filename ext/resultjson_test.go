package ext_test

import (
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestCallToolResultJSON: a CallToolResult marshals to MCP's
// CallToolResult object (not {"Content":…,"IsError":false}), in either of
// its forms, and reads back from one.
func TestCallToolResultJSON(t *testing.T) {
	raw, err := ext.RawResult(json.RawMessage(`{"content":[],"isError":true,"_meta":{"k":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   any
		want string
	}{
		{"text", ext.TextResult("hi"), `{"content":[{"type":"text","text":"hi"}]}`},
		{"error", ext.ErrorResult("no %s", "notes"), `{"content":[{"type":"text","text":"no notes"}],"isError":true}`},
		{"structured, a value", ext.CallToolResult{Content: json.RawMessage(`[]`), StructuredContent: json.RawMessage(`{"n":1}`), Details: json.RawMessage(`{"log":1}`)},
			`{"content":[],"structuredContent":{"n":1}}`},
		{"raw", raw, `{"content":[],"isError":true,"_meta":{"k":1}}`},
		{"in a struct", struct {
			Result *ext.CallToolResult `json:"result"`
		}{ext.TextResult("x")}, `{"result":{"content":[{"type":"text","text":"x"}]}}`},
		{"nil", (*ext.CallToolResult)(nil), `null`},
	} {
		b, err := json.Marshal(c.in)
		if err != nil || string(b) != c.want {
			t.Errorf("%s: Marshal = %s, %v; want %s", c.name, b, err, c.want)
		}
	}

	var back ext.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[{"type":"text","text":"no"}],"isError":true}`), &back); err != nil {
		t.Fatal(err)
	}
	if !back.IsError || back.Text() != "no" {
		t.Errorf("Unmarshal: %+v (text %q); want an error result saying no", back, back.Text())
	}
	if b, err := json.Marshal(&back); err != nil || string(b) != `{"content":[{"type":"text","text":"no"}],"isError":true}` {
		t.Errorf("round trip: %s, %v", b, err)
	}
	if err := json.Unmarshal([]byte(`[1]`), &back); err == nil {
		t.Error("Unmarshal of an array: no error")
	}
	var p *ext.CallToolResult
	if err := json.Unmarshal([]byte(`null`), &p); err != nil || p != nil {
		t.Errorf("Unmarshal of null: %v, %v", p, err)
	}
}

// TestContentAndToolJSON: Content and Tool marshal to MCP's content block
// and Tool objects (their fields carry MCP's names).
func TestContentAndToolJSON(t *testing.T) {
	b, err := json.Marshal(ext.Content{Type: "image", Data: "AAA=", MIMEType: "image/png"})
	if want := `{"type":"image","data":"AAA=","mimeType":"image/png"}`; err != nil || string(b) != want {
		t.Errorf("Content: %s, %v; want %s", b, err, want)
	}
	b, err = json.Marshal(ext.Tool{Name: "notes/add", Description: "Add.", InputSchema: json.RawMessage(`{"type":"object"}`)})
	if want := `{"name":"notes/add","description":"Add.","inputSchema":{"type":"object"}}`; err != nil || string(b) != want {
		t.Errorf("Tool: %s, %v; want %s", b, err, want)
	}
}
