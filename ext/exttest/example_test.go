package exttest_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// greeter is the extension under test: one tool, for every user.
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
	if req.Name != "greet/hello" {
		return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
	}
	var args struct{ Name string }
	_ = json.Unmarshal(req.Arguments, &args)
	return ext.TextResult("Hello, " + args.Name), nil
}

// conformance is what an extension's own test does: in its package,
//
//	func TestConformance(t *testing.T) { conformance(t) }
//
// runs the suite on every carrier (in process, gRPC, the call channel),
// then the extension's own checks against a FakeHost.
func conformance(t *testing.T) {
	exttest.Run(t, func() ext.Extension { return greeter{} }, nil)

	h := exttest.NewFakeHost(t)
	x := exttest.Connect(t, greeter{}, nil) // over real gRPC
	if err := x.Configure(context.Background(), &ext.ConfigureRequest{Name: "greet", Host: h}); err != nil {
		t.Fatal(err)
	}
	if tools := h.SystemTools(); len(tools) != 1 || tools[0].Name != "greet/hello" {
		t.Errorf("system tools: %+v", tools)
	}
	res, err := x.CallTool(context.Background(), &ext.CallToolRequest{User: "alice", Name: "greet/hello", Arguments: json.RawMessage(`{"name":"Bob"}`)})
	if err != nil || res.Text() != "Hello, Bob" {
		t.Errorf("greet/hello: %v, %v", res, err)
	}
}

// ExampleRun: an extension's tests run the conformance suite with Run,
// and check the rest against a [exttest.FakeHost] (see conformance above;
// Run needs a *testing.T, so this example is compiled, and
// TestExampleConformance runs it).
func ExampleRun() {}
