package ext

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Content is one MCP content block. Extensions that build results by hand
// can marshal a slice of these into [CallToolResult.Content]; the host
// itself never decodes content on the call path.
type Content struct {
	// Type is "text", "image", "audio", "resource_link" or "resource".
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Data     string `json:"data,omitempty"` // base64, for image and audio
	MIMEType string `json:"mimeType,omitempty"`
	URI      string `json:"uri,omitempty"`
	Name     string `json:"name,omitempty"`
	// Resource is an embedded resource, raw.
	Resource json.RawMessage `json:"resource,omitempty"`
	// Annotations and Meta are carried raw.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Meta        json.RawMessage `json:"_meta,omitempty"`
}

// TextResult returns a result holding one text block.
func TextResult(text string) *CallToolResult {
	return &CallToolResult{Content: textContent(text)}
}

// ErrorResult returns a failed result (IsError) holding one text block
// with the formatted message. Tool failures travel as data, not as Go
// errors.
func ErrorResult(format string, args ...any) *CallToolResult {
	return &CallToolResult{Content: textContent(fmt.Sprintf(format, args...)), IsError: true}
}

func textContent(text string) json.RawMessage {
	b, err := json.Marshal([]Content{{Type: "text", Text: text}})
	if err != nil {
		// A string always marshals; this is a broken invariant.
		panic(fmt.Sprintf("ext: marshalling text content: %v", err))
	}
	return b
}

// RawResult returns a result that carries b, a whole MCP result object,
// raw, with IsError read from it (the top level only).
func RawResult(b json.RawMessage) (*CallToolResult, error) {
	var o struct {
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("the result is not a JSON object: %w", err)
	}
	return &CallToolResult{Raw: b, IsError: o.IsError}, nil
}

// JSON returns r as one MCP result object: Raw when set, else the object
// built from the fields. The fields themselves are not decoded.
func (r *CallToolResult) JSON() (json.RawMessage, error) {
	if r == nil {
		return nil, fmt.Errorf("ext: nil result")
	}
	if len(r.Raw) > 0 {
		return r.Raw, nil
	}
	// Built by hand so the parts keep their bytes (json.Marshal would
	// compact and HTML-escape them); each is checked to be valid JSON.
	content := r.Content
	if len(content) == 0 {
		content = json.RawMessage("[]")
	} else if !json.Valid(content) {
		return nil, fmt.Errorf("the result's content is not valid JSON")
	}
	n := len(`{"content":,"structuredContent":,"isError":true}`) + len(content) + len(r.StructuredContent)
	b := make([]byte, 0, n)
	b = append(b, `{"content":`...)
	b = append(b, content...)
	if len(r.StructuredContent) > 0 {
		if !json.Valid(r.StructuredContent) {
			return nil, fmt.Errorf("the result's structured content is not valid JSON")
		}
		b = append(b, `,"structuredContent":`...)
		b = append(b, r.StructuredContent...)
	}
	if r.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}'), nil
}

// Fields returns r with Content, StructuredContent and IsError filled in:
// r itself when it has no Raw, else a copy decoded from Raw (the top level
// only: content blocks stay raw). A CreateTaskResult has no content.
func (r *CallToolResult) Fields() (*CallToolResult, error) {
	if r == nil || len(r.Raw) == 0 {
		return r, nil
	}
	var o struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(r.Raw, &o); err != nil {
		return nil, fmt.Errorf("decoding the result: %w", err)
	}
	out := &CallToolResult{Content: o.Content, StructuredContent: o.StructuredContent, IsError: o.IsError, Details: r.Details}
	if string(out.StructuredContent) == "null" {
		out.StructuredContent = nil
	}
	return out, nil
}

// Blocks decodes r's content. It is for tests and UIs; the call path
// carries content raw.
func (r *CallToolResult) Blocks() ([]Content, error) {
	r, err := r.Fields()
	if err != nil {
		return nil, err
	}
	if r == nil || len(r.Content) == 0 {
		return nil, nil
	}
	var out []Content
	if err := json.Unmarshal(r.Content, &out); err != nil {
		return nil, fmt.Errorf("decoding content: %w", err)
	}
	return out, nil
}

// Text returns the concatenated text of r's text blocks, for tests and
// simple UIs.
func (r *CallToolResult) Text() string {
	blocks, err := r.Blocks()
	if err != nil {
		return ""
	}
	var s string
	for _, b := range blocks {
		if b.Type == "text" {
			if s != "" {
				s += "\n"
			}
			s += b.Text
		}
	}
	return s
}

// MarshalJSON writes r in MCP's CallToolResult shape, as [CallToolResult.JSON]
// does: {"content":[…],"structuredContent":…,"isError":true}, or Raw as it
// is. Details is the host's, not MCP's, and is left out.
func (r CallToolResult) MarshalJSON() ([]byte, error) { return r.JSON() }

// UnmarshalJSON reads an MCP CallToolResult (or a CreateTaskResult) the
// way the out-of-process carrier delivers one, as [RawResult] does: the
// object is kept as Raw and IsError is read from its top level.
func (r *CallToolResult) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json does for other types
	}
	res, err := RawResult(bytes.Clone(b))
	if err != nil {
		return err
	}
	*r = *res
	return nil
}
