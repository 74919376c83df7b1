// Command barechain is the benchmark baseline for DESIGN.md §7: the bare
// architecture chain, a gRPC hop into an extension that makes a direct
// go-sdk stdio call. It has no catalog, no host services, no registry: it
// starts the MCP server named by BARECHAIN_SERVER itself and forwards every
// tool call to it.
package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

type bare struct {
	mu sync.Mutex
	cs *mcp.ClientSession
}

func (b *bare) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "barechain", Capabilities: []ext.Capability{ext.CapabilityTools}}, nil
}

func (b *bare) Configure(ctx context.Context, _ *ext.ConfigureRequest) error {
	opts := &mcp.ClientSessionOptions{ProtocolVersion: os.Getenv("BARECHAIN_PROTOCOL")}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "barechain"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: exec.Command(os.Getenv("BARECHAIN_SERVER")), TerminateDuration: time.Second}, opts)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.cs = cs
	b.mu.Unlock()
	return nil
}

func (b *bare) Shutdown(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cs != nil {
		_ = b.cs.Close()
		b.cs = nil
	}
	return nil
}

func (b *bare) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	b.mu.Lock()
	cs := b.cs
	b.mu.Unlock()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: req.Name, Arguments: req.Arguments})
	if err != nil {
		return nil, err
	}
	content, err := json.Marshal(res.Content)
	if err != nil {
		return nil, err
	}
	return &ext.CallToolResult{Content: content, IsError: res.IsError}, nil
}

// main runs with the same GC target as agenthost-ext-mcp, so the baseline
// differs from our extension only in architecture.
func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ext.Serve(&bare{})
}
