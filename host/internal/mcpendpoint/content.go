package mcpendpoint

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// splitArray cuts a JSON array of objects into its elements without
// decoding them: one pass that tracks strings and nesting. It reports false
// for anything but an array of objects; the bytes inside each object are
// validated separately.
func splitArray(raw []byte) ([][]byte, bool) {
	i := 0
	for i < len(raw) && mcpwire.IsSpace(raw[i]) {
		i++
	}
	if i == len(raw) || raw[i] != '[' {
		return nil, false
	}
	var (
		out   [][]byte
		depth int
		start = -1
	)
	for i++; i < len(raw); i++ {
		switch c := raw[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			if depth == 0 {
				return nil, false // a string element, not a block
			}
			i = mcpwire.StringEnd(raw, i) - 1
		case '{', '[':
			if depth == 0 {
				if c != '{' || start >= 0 {
					return nil, false
				}
				start = i
			}
			depth++
		case '}', ']':
			if depth == 0 {
				// The end of the array: no dangling comma, nothing after it.
				if c != ']' || start < 0 && len(out) > 0 {
					return nil, false
				}
				for i++; i < len(raw); i++ {
					if !mcpwire.IsSpace(raw[i]) {
						return nil, false
					}
				}
				return out, true
			}
			depth--
			if depth == 0 {
				if start < 0 || (c == '}') != (raw[start] == '{') {
					return nil, false
				}
				out = append(out, raw[start:i+1])
			}
		case ',':
			if depth == 0 {
				if start < 0 {
					return nil, false
				}
				start = -1
			}
		default:
			if depth == 0 {
				return nil, false // a number or literal element
			}
		}
	}
	return nil, false
}

// isObject reports whether b is one valid JSON object.
func isObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// encodeResult is a host result as the MCP result object, without
// decoding the content: a whole raw result (ext-mcp's, or a task's
// CreateTaskResult) goes as it came, checked to be one JSON object; a
// result built from fields gets its content checked to be an array of
// valid blocks. Details stay in the host (never shown to a model).
func encodeResult(res *ext.CallToolResult) (json.RawMessage, bool) {
	if len(res.Raw) > 0 {
		return res.Raw, isObject(res.Raw)
	}
	f, ok := checkFields(res)
	if !ok {
		return nil, false
	}
	return fieldsResult(f), true
}

// checkFields returns the fields of a result built from them, checked:
// content an array of valid blocks ([] when none), structured content
// valid JSON (nil when none).
func checkFields(res *ext.CallToolResult) (*ext.CallToolResult, bool) {
	content := res.Content
	if len(content) == 0 || string(content) == "null" {
		content = json.RawMessage("[]")
	} else if _, ok := splitArray(content); !ok || !json.Valid(content) {
		return nil, false
	}
	sc := res.StructuredContent
	if string(sc) == "null" {
		sc = nil
	}
	if len(sc) > 0 && !json.Valid(sc) {
		return nil, false
	}
	return &ext.CallToolResult{Content: content, StructuredContent: sc, IsError: res.IsError}, true
}

// fieldsResult is the MCP result object of checked fields (checkFields).
func fieldsResult(f *ext.CallToolResult) json.RawMessage {
	b := make([]byte, 0, len(f.Content)+len(f.StructuredContent)+50)
	b = append(b, `{"content":`...)
	b = append(b, f.Content...)
	if len(f.StructuredContent) > 0 {
		b = append(b, `,"structuredContent":`...)
		b = append(b, f.StructuredContent...)
	}
	if f.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}')
}

// statelessFields is a host result as the stateless revision sends it:
// its content and structured content, checked; a raw result's other
// fields stay behind (go-sdk's form of a result, which both stateless
// paths answer with, has no place for them).
func statelessFields(res *ext.CallToolResult) (*ext.CallToolResult, bool) {
	if f, ok := rawFields(res.Raw); ok {
		return checkFields(f)
	}
	f, err := res.Fields()
	if err != nil {
		return nil, false
	}
	return checkFields(f)
}

// rawFields reads the fields of a raw result in place, as Fields decodes
// them, without decoding: ok is false when raw is none, not one valid
// object, or holds what the scanner leaves to encoding/json (an escaped
// key, one of the three twice or in another case, an isError that is no
// literal).
func rawFields(raw json.RawMessage) (*ext.CallToolResult, bool) {
	if len(raw) == 0 || !isObject(raw) {
		return nil, false
	}
	var content, sc, isErr []byte
	if !mcpwire.ObjectFields(raw, func(k, v []byte) bool {
		switch string(k) {
		case "content":
			return mcpwire.Once(&content, v)
		case "structuredContent":
			return mcpwire.Once(&sc, v)
		case "isError":
			return mcpwire.Once(&isErr, v)
		}
		// encoding/json matches keys without regard to case.
		return !bytes.EqualFold(k, []byte("content")) && !bytes.EqualFold(k, []byte("structuredContent")) &&
			!bytes.EqualFold(k, []byte("isError"))
	}) {
		return nil, false
	}
	switch string(isErr) {
	case "", "null", "false", "true":
	default:
		return nil, false
	}
	return &ext.CallToolResult{Content: content, StructuredContent: sc, IsError: string(isErr) == "true"}, true
}

// errorResult is a failed call (isError) with one text block.
func errorResult(msg string) json.RawMessage {
	return json.RawMessage(`{"content":[{"type":"text","text":` + quote(msg) + `}],"isError":true}`)
}

// rawBlock is one MCP content block carried as the bytes the host gave
// us, for go-sdk's server (the stateless revision). go-sdk seals
// [mcp.Content] with an unexported method; embedding *mcp.TextContent
// supplies it (it is only used when decoding, which never happens to a
// result we send), and MarshalJSON, declared here, wins over the embedded
// one. encoding/json validates and compacts the bytes as it writes them.
type rawBlock struct {
	*mcp.TextContent
	raw []byte
}

// MarshalJSON returns the block as it came.
func (b *rawBlock) MarshalJSON() ([]byte, error) { return b.raw, nil }

var _ mcp.Content = (*rawBlock)(nil)

// toMCP converts a result of statelessFields to go-sdk's form without
// decoding the content blocks.
func toMCP(f *ext.CallToolResult) *mcp.CallToolResult {
	out := &mcp.CallToolResult{IsError: f.IsError, Content: []mcp.Content{}}
	blocks, _ := splitArray(f.Content) // checked
	bs := make([]rawBlock, len(blocks))
	out.Content = make([]mcp.Content, len(blocks))
	for i, b := range blocks {
		bs[i].raw = b
		out.Content[i] = &bs[i]
	}
	if len(f.StructuredContent) > 0 {
		out.StructuredContent = json.RawMessage(f.StructuredContent)
	}
	return out
}
