// Command agenthost-ext-mcp is the MCP extension process: the host starts
// it and talks to it over go-plugin gRPC.
package main

import (
	"os"
	"runtime/debug"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// gcPercent is the GC target unless GOGC is set: go-sdk's JSON decoder
// allocates a 32 KiB buffer per message, so with Go's default (100) the
// collector takes a large share of every call; at 400 the live heap of
// this process stays small and calls get markedly cheaper (measured in
// examples/bench BenchmarkEndpointCall).
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ext.Serve(extmcp.New(nil))
}
