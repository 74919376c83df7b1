package ext

import (
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

// Blocks decodes r's content. It is for tests and UIs; the call path
// carries content raw.
func (r *CallToolResult) Blocks() ([]Content, error) {
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
