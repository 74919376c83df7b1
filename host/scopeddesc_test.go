package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// describerExt publishes c/relay with a description in parts naming
// t/echo (as code mode's code/run does), with or without the usertools
// capability (and callertools, which its relay's caller handle needs).
type describerExt struct {
	relayExt
	userTools bool
}

func (e *describerExt) Describe(context.Context) (*ext.Descriptor, error) {
	caps := []ext.Capability{ext.CapabilityTools, ext.CapabilityCallerTools}
	if e.userTools {
		caps = append(caps, ext.CapabilityUserTools)
	}
	return &ext.Descriptor{Name: "c", Version: "v1", Capabilities: caps}, nil
}

func (e *describerExt) UserToolsChanged(context.Context, string, []ext.Tool) error { return nil }

func (e *describerExt) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	e.mu.Lock()
	e.host = req.Host
	e.mu.Unlock()
	t, err := ext.WithScopedDescription(ext.Tool{Name: "c/relay", Description: "relay: t/echo"}, &ext.ScopedDescription{Parts: []ext.DescriptionPart{
		{Text: "relay:"}, {Text: " t/echo", Tools: []string{"t/echo"}},
	}})
	if err != nil {
		return err
	}
	return req.Host.SetSystemTools(ctx, []ext.Tool{t})
}

// TestScopedDescriptionHonoured: a tool with a scoped description is in a
// scope that reaches a tool its parts name (called under it, listed to
// ListToolsAs-style surfaces by the view), and out of one that does not;
// from an extension without the usertools capability (ext-mcp, whose
// tools' _meta a remote server writes) the parts are removed, so the tool
// stays out of other servers' scopes.
func TestScopedDescriptionHonoured(t *testing.T) {
	ctx := context.Background()
	for _, userTools := range []bool{true, false} {
		h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
			&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}, "c": {Extension: &describerExt{userTools: userTools}}}})
		if err != nil {
			t.Fatal(err)
		}
		call := func(scope *ext.Scope) (string, error) {
			res, err := h.CallTool(ctx, &host.CallRequest{User: "alice", Name: "c/relay", Arguments: json.RawMessage(`{}`), Scope: scope})
			if err != nil {
				return "", err
			}
			b, _ := res.JSON()
			return string(b), nil
		}
		out, err := call(&ext.Scope{Servers: []string{"t"}, Tools: []string{"t/echo"}})
		if userTools && (err != nil || !strings.Contains(out, "t/echo") || strings.Contains(out, "t/greet")) {
			t.Errorf("c/relay under a scope reaching t/echo = %s, %v; want t/echo only", out, err)
		}
		if !userTools && !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("c/relay (parts from an extension without usertools) under scope t: %s, %v; want ErrNotFound", out, err)
		}
		if _, err := call(&ext.Scope{Servers: []string{"t"}, Tools: []string{"t/greet"}}); !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("usertools=%v: c/relay under a scope reaching none of its parts: %v, want ErrNotFound", userTools, err)
		}
		tools, err := h.Tools(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range tools {
			if tl.Name == "c/relay" && strings.Contains(string(tl.Meta), ext.MetaScopedDescription) != userTools {
				t.Errorf("usertools=%v: c/relay's _meta %s", userTools, tl.Meta)
			}
		}
		h.Close()
	}
}
