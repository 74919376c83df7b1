package extmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// serveStrict2026 is a stdio server of the stateless revision that holds
// every request to it (SEP-2575): a request without the revision in its
// _meta is refused (-32602), whatever came before it. go-sdk's own server
// remembers server/discover and takes such requests, so it cannot tell.
func serveStrict2026() int {
	s := mcp.NewServer(&mcp.Implementation{Name: "strict", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "p"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "prompted"}}}}, nil
	})
	s.AddResource(&mcp.Resource{URI: "strict://r", Name: "r"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "strict://r", Text: "read"}}}, nil
	})
	if err := s.Run(context.Background(), strictTransport{}); err != nil {
		return 1
	}
	return 0
}

// strictTransport is stdio that refuses, itself, the requests without the
// revision in their _meta.
type strictTransport struct{}

func (strictTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := (&mcp.StdioTransport{}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &strictConn{Connection: c}, nil
}

type strictConn struct{ mcp.Connection }

func (c *strictConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return nil, err
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok || !req.IsCall() {
			return msg, nil
		}
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if v, _ := p.Meta["io.modelcontextprotocol/protocolVersion"].(string); v >= "2026-07-28" {
			return msg, nil
		}
		fmt.Fprintf(os.Stderr, "strict: refused %s without the revision in _meta\n", req.Method)
		_ = c.Connection.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{
			Code: jsonrpc.CodeInvalidParams, Message: req.Method + ": _meta lacks io.modelcontextprotocol/protocolVersion (SEP-2575)"}})
	}
}

// TestStrictStatelessServer: over stdio at 2026-07-28 ext-mcp's own
// requests (tools/call, prompts/get, resources/read) carry the revision,
// its identity and capabilities in _meta as go-sdk's do, so a server that
// holds every request to that envelope serves them (it refused each
// before: "_meta lacks io.modelcontextprotocol/protocolVersion").
func TestStrictStatelessServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "grpc", fmt.Sprintf(`{"mcpServers": {"strict": %s}}`, selfServer("strict2026", `"protocolVersion": "latest"`)), nil)
	f.activate("alice")
	if got := f.mustCall("alice", "strict/echo", `{"text":"milk"}`); got.Text() != "milk" {
		t.Errorf("strict/echo: %q", got.Text())
	}
	for _, check := range []struct {
		what string
		get  func() (string, error)
		want string
	}{
		{"prompts/get", func() (string, error) {
			b, err := f.e.(ext.PromptProvider).GetPrompt(ctx(t), &ext.GetPromptRequest{User: "alice", Name: "strict/p", Arguments: json.RawMessage(`{}`)})
			return string(b), err
		}, "prompted"},
		{"resources/read", func() (string, error) {
			b, err := f.e.(ext.ResourceProvider).ReadResource(ctx(t), &ext.ReadResourceRequest{User: "alice", URI: "strict://r"})
			return string(b), err
		}, `"read"`},
	} {
		got, err := check.get()
		if err != nil || !strings.Contains(got, check.want) {
			t.Errorf("%s: %s %v; want %q", check.what, got, err, check.want)
		}
	}
}
