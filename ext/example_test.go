package ext_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"

	"github.com/agenthost/agenthost/ext"
)

// greeter is an extension with one tool, for every user.
type greeter struct{}

func (greeter) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "greet", Version: "v1", Description: "Greets people.",
		Capabilities: []ext.Capability{ext.CapabilityTools}}, nil
}

func (greeter) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	return req.Host.SetSystemTools(ctx, []ext.Tool{{Name: "greet/hello", Description: "Greet someone.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)}})
}

func (greeter) Shutdown(context.Context) error { return nil }

func (greeter) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	var args struct{ Name string }
	if err := json.Unmarshal(req.Arguments, &args); err != nil || args.Name == "" {
		return ext.ErrorResult(`greet/hello needs {"name": "..."}`), nil
	}
	return ext.TextResult("Hello, " + args.Name), nil
}

// ExampleServe serves an extension. In an extension's binary it is all of
// main — the host launches the binary and speaks to it over go-plugin:
//
//	func main() { ext.Serve(greeter{}) }
//
// Here Serve runs in go-plugin's test mode inside this process, and the
// host's side of the connection (what the host does for a launched
// binary) describes the extension and calls its tool.
func ExampleServe() {
	ctx, cancel := context.WithCancel(context.Background())
	reattach := make(chan *plugin.ReattachConfig, 1)
	closed := make(chan struct{})
	served := make(chan struct{})
	go func() {
		defer close(served)
		ext.Serve(greeter{}, ext.WithTestConfig(&plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed}))
	}()

	// The host's side.
	rc := <-reattach
	rc.ReattachFunc = func() (runner.AttachedRunner, error) { return inProcess{served}, nil }
	plugins, err := ext.HostPlugins(nil)
	if err != nil {
		panic(err)
	}
	client := plugin.NewClient(&plugin.ClientConfig{HandshakeConfig: ext.Handshake, Plugins: plugins, Reattach: rc,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, Logger: hclog.New(&hclog.LoggerOptions{Output: io.Discard})})
	rpc, err := client.Client()
	if err != nil {
		panic(err)
	}
	x, err := ext.Dispense(rpc)
	if err != nil {
		panic(err)
	}
	d, err := x.Describe(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Name, d.Version, "-", d.Description)
	res, err := x.CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "greet/hello", Arguments: json.RawMessage(`{"name":"Bob"}`)})
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(res) // MCP's CallToolResult, as the extension sent it
	fmt.Println(string(b))
	if err := x.Shutdown(ctx); err != nil {
		panic(err)
	}
	// The end: Serve returns once its context ends; then the host's side
	// closes.
	cancel()
	<-closed
	<-served
	_ = rpc.Close()
	client.Kill()
	// Output:
	// greet v1 - Greets people.
	// {"content":[{"type":"text","text":"Hello, Bob"}]}
}

// inProcess stands for the extension's process, which here is Serve's
// goroutine.
type inProcess struct{ done <-chan struct{} }

func (r inProcess) Wait(ctx context.Context) error {
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	return nil
}
func (inProcess) Kill(context.Context) error                       { return nil }
func (inProcess) ID() string                                       { return "" }
func (inProcess) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (inProcess) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }
