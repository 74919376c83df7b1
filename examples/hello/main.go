// Command hello is the smallest useful agenthost extension: one tool that
// greets, with a per-user greeting from its settings section.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agenthost/agenthost/ext"
)

type hello struct{ host ext.Host }

var _ ext.ToolCaller = (*hello)(nil)

func (h *hello) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{
		Name: "hello", Version: "v1", Description: "Greets people.",
		Capabilities: []ext.Capability{ext.CapabilityTools},
		Settings: []ext.SettingsSection{{ID: "greeting", Title: "Greeting", Scope: "user", Form: json.RawMessage(
			`{"v":1,"root":{"type":"form","children":[{"type":"text","name":"greeting","label":"Greeting","default":"Hello"}]}}`)}},
	}, nil
}

func (h *hello) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	h.host = req.Host
	return req.Host.SetSystemTools(ctx, []ext.Tool{{
		Name: "hello/greet", Description: "Greet someone by name.", Replay: ext.ReplaySafe,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
	}})
}

func (h *hello) Shutdown(context.Context) error { return nil }

func (h *hello) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	if req.Name != "hello/greet" {
		return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
	}
	var args struct{ Name string }
	if err := json.Unmarshal(req.Arguments, &args); err != nil || args.Name == "" {
		return ext.ErrorResult(`hello/greet needs {"name": "..."}`), nil
	}
	greeting := "Hello"
	if raw, err := h.host.UserStore(req.User).Settings().Get(ctx, "greeting"); err == nil {
		var s struct{ Greeting string }
		if json.Unmarshal(raw, &s) == nil && s.Greeting != "" {
			greeting = s.Greeting
		}
	}
	return ext.TextResult(fmt.Sprintf("%s, %s!", greeting, args.Name)), nil
}

func main() { ext.Serve(&hello{}) }
