package mcpendpoint

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// rawBlock is one MCP content block carried as the bytes the host gave
// us. go-sdk seals [mcp.Content] with an unexported method; embedding
// *mcp.TextContent supplies it (it is only used when decoding, which never
// happens to a result we send), and MarshalJSON, declared here, wins over
// the embedded one. encoding/json validates and compacts the bytes as it
// writes them, so a bad block fails the response instead of corrupting it.
type rawBlock struct {
	*mcp.TextContent
	raw []byte
}

// MarshalJSON returns the block as it came.
func (b *rawBlock) MarshalJSON() ([]byte, error) { return b.raw, nil }

var _ mcp.Content = (*rawBlock)(nil)

// isSpace reports JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// splitArray cuts a JSON array of objects into its elements without
// decoding them: one pass that tracks strings and nesting. It reports false
// for anything but an array of objects; the bytes inside each object are
// validated later, by the encoder.
func splitArray(raw []byte) ([][]byte, bool) {
	i := 0
	for i < len(raw) && isSpace(raw[i]) {
		i++
	}
	if i == len(raw) || raw[i] != '[' {
		return nil, false
	}
	var (
		out     [][]byte
		depth   int
		start   = -1
		inStr   bool
		escaped bool
	)
	for i++; i < len(raw); i++ {
		c := raw[i]
		if inStr {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '"':
			if depth == 0 {
				return nil, false // a string element, not a block
			}
			inStr = true
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
					if !isSpace(raw[i]) {
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

// emptyContent is sent when a result has no blocks: MCP requires the
// field.
var emptyContent = []mcp.Content{}

// toMCP converts a host result to go-sdk's form without decoding the
// content: each block travels as the host's bytes, and structured content
// as raw JSON. Details stay in the host (they are never shown to a model).
func toMCP(res *ext.CallToolResult) (*mcp.CallToolResult, bool) {
	res, err := res.Fields()
	if err != nil {
		return nil, false
	}
	out := &mcp.CallToolResult{IsError: res.IsError, Content: emptyContent}
	if len(res.Content) > 0 && string(res.Content) != "null" {
		blocks, ok := splitArray(res.Content)
		if !ok {
			return nil, false
		}
		if len(blocks) > 0 {
			// One allocation for the blocks, one for the interface slice.
			bs := make([]rawBlock, len(blocks))
			out.Content = make([]mcp.Content, len(blocks))
			for i, b := range blocks {
				bs[i].raw = b
				out.Content[i] = &bs[i]
			}
		}
	}
	if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
		out.StructuredContent = json.RawMessage(res.StructuredContent)
	}
	return out, true
}

// errorResult is a failed call (isError) with one text block.
func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
