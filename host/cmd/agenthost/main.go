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
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/agenthost/agenthost/ext/termsafe"
)

// gcPercent is the GC target unless GOGC is set: go-sdk's JSON decoder (on
// the MCP endpoint) allocates a 32 KiB buffer per message, so with Go's
// default (100) the collector takes a large share of every call; at 400
// calls get markedly cheaper for a heap that stays small (measured in
// examples/bench BenchmarkEndpointCall).
const gcPercent = 400

// procs is how many CPUs the host runs Go code on unless GOMAXPROCS is
// set: half the ones Go would use (at least one). Go's default assumes a
// process has the machine to itself; the host shares it with its
// extensions and their servers, which do most of a call's work, while a
// call costs the host a few hand-offs (the HTTP request, the call channel,
// the answer). With a CPU per core, each hand-off woke an idle CPU's
// thread that found nothing to do and slept again: on 2 CPUs a tool call
// over /mcp cost the host ~20-30% more CPU than on one (examples/bench
// BenchmarkEndpointCall, CPU per call; BENCH_HOST_GOMAXPROCS runs the host
// with another figure). A host that needs more sets GOMAXPROCS.
func procs() int { return max(1, runtime.GOMAXPROCS(0)/2) }

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs())
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
	fmt.Fprintln(termsafe.NewWriter(stderr), "agenthost:", errorText(err))
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// errorText is err's message for the terminal. An error's text may carry a
// server's or a user's words: escaped whole, it cannot forge a line. The
// lines of a linesError, and of errors.Join's errors, are the CLI's own:
// each joined error is escaped on its own line.
func errorText(err error) string {
	if le, ok := err.(*linesError); ok {
		return le.msg
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var raw, parts []string
		for _, e := range j.Unwrap() {
			raw, parts = append(raw, e.Error()), append(parts, errorText(e))
		}
		if len(raw) > 1 && strings.Join(raw, "\n") == err.Error() {
			return strings.Join(parts, "\n")
		}
	}
	return esc(err.Error())
}
