// Command agenthost runs the agenthost host and talks to it.
//
// Exit status: 0 on success, 1 on a failed operation, 2 on bad usage.
// Errors go to stderr.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// gcPercent is the GC target unless GOGC is set: go-sdk's JSON decoder (on
// the MCP endpoint) allocates a 32 KiB buffer per message, so with Go's
// default (100) the collector takes a large share of every call; at 400
// calls get markedly cheaper for a heap that stays small (measured in
// examples/bench BenchmarkEndpointCall).
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot(os.Stdin, os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err and maps it to the exit status.
func exitCode(err error, stderr *os.File) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "agenthost:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}
