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
	"syscall"
)

func main() {
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
