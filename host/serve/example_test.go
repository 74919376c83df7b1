package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/serve"
)

// greeter is an extension with one tool for everyone (a system tool).
type greeter struct{}

func (greeter) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "greet", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools}}, nil
}

func (greeter) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	return req.Host.SetSystemTools(ctx, []ext.Tool{{Name: "greet/hello", Description: "Greet someone.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}})
}

func (greeter) Shutdown(context.Context) error { return nil }

func (greeter) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	var args struct{ Name string }
	if err := json.Unmarshal(req.Arguments, &args); err != nil {
		return ext.ErrorResult("greet/hello needs a name: %v", err), nil
	}
	return ext.TextResult("Hello, " + args.Name + " (asked by " + req.User + ")"), nil
}

// ExampleNew_mcp serves a host to agents: an MCP client with a token the
// server issued lists the user's tools at /mcp and calls one.
func ExampleNew_mcp() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "agenthost-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	h, err := host.New(ctx, &host.Config{DataDir: dir, Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"greet": {Extension: greeter{}}}})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	token, err := s.CreateToken(ctx, "alice", "example")
	if err != nil {
		panic(err)
	}
	ln, err := s.Listen()
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
			fmt.Println("serve:", err)
		}
	}()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: s.URL() + "/mcp", HTTPClient: &http.Client{Transport: bearer(tr, token)}}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		panic(err)
	}
	for _, t := range tools.Tools {
		fmt.Println(t.Name, "-", t.Description)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tools.Tools[0].Name, Arguments: map[string]any{"name": "Bob"}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// greet__hello - Greet someone.
	// Hello, Bob (asked by alice)
}
