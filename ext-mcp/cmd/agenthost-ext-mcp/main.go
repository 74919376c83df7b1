// Command agenthost-ext-mcp is the MCP extension process: the host starts
// it and talks to it over go-plugin gRPC.
package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// gcPercent is the GC target unless GOGC is set: go-sdk's JSON decoder
// allocates a 32 KiB buffer per message, so with Go's default (100) the
// collector takes a large share of every call; at 400 the live heap of
// this process stays small and calls get markedly cheaper (measured in
// examples/bench BenchmarkEndpointCall).
const gcPercent = 400

// repeatWindowEnv names the variable (a Go duration such as "30s") of the
// window of collapsed quarantine warnings.
const repeatWindowEnv = "AGENTHOST_MCP_REPEAT_WINDOW"

// procs is how many CPUs this process runs Go code on unless GOMAXPROCS
// is set: a quarter of the ones Go would use (at least one). ext-mcp is a
// relay: a call costs it a fraction of what it costs the host and the
// server, and most of that went into the scheduler waking an idle CPU's
// thread at each hand-off, which found nothing to do and slept again
// (futex, nanosleep, epoll per hand-off). With one CPU on a 2-CPU machine
// a tool call cost it ~15% less CPU (examples/bench, CPU per call).
func procs() int { return max(1, runtime.GOMAXPROCS(0)/4) }

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs())
	}
	opts := &extmcp.Options{Telemetry: true}
	// The operator's env for the extension may shorten or lengthen the
	// window in which repeated quarantine warnings collapse into one line
	// with a count (default 1 min).
	if w, err := time.ParseDuration(os.Getenv(repeatWindowEnv)); err == nil && w > 0 {
		opts.Catalog = &catalog.Options{RepeatWindow: w}
	}
	ext.Serve(extmcp.New(opts))
}
