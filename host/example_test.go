package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
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

// ExampleNew embeds a host with one extension running in process (a Go
// value; extensions of the config run as processes), lists a user's
// tools and calls one.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "agenthost-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := &host.Config{DataDir: dir, Secrets: host.SecretsConfig{Backend: "memory"}}
	h, err := host.New(ctx, cfg, &host.Options{Extensions: map[string]host.InProcess{"greet": {Extension: greeter{}}}})
	if err != nil {
		panic(err)
	}
	defer h.Close()

	tools, err := h.Tools(ctx, "alice")
	if err != nil {
		panic(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name, "-", t.Description)
	}
	res, err := h.Call(ctx, "alice", "conversation-1", "greet/hello", json.RawMessage(`{"name":"Bob"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Text())
	b, _ := json.Marshal(res) // MCP's CallToolResult
	fmt.Println(string(b))
	// Output:
	// greet/hello - Greet someone.
	// Hello, Bob (asked by alice)
	// {"content":[{"type":"text","text":"Hello, Bob (asked by alice)"}]}
}
