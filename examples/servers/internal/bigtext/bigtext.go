// Package bigtext gives the example servers a tool that returns a text of
// any size, for tests of the limits a client puts on a server's results
// (ext-mcp's maxResultBytes). AddTool may be called on any number of
// servers; the tool's handler is safe for concurrent use.
package bigtext

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Max bounds the size a call may ask for, so that a mistaken call cannot
// exhaust the server's memory.
const Max = 256 << 20

type bigIn struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes of text to return"`
}

// AddTool adds the tool "big" to s: it returns a text of the given number
// of bytes.
func AddTool(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Return a text of the given number of bytes (for tests of result size limits)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in bigIn) (*mcp.CallToolResult, any, error) {
			if in.Bytes < 0 || in.Bytes > Max {
				return nil, nil, fmt.Errorf("bytes must be between 0 and %d", Max)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		})
}
