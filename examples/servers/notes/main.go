// Command notes is an example stdio MCP server: per-user notes kept in
// memory. agenthost starts one process per user and passes that user's
// token in MCP_ACCESS_TOKEN; the server keys the notes by a hash of it. It
// exits when its stdin closes.
//
// Tools: add_note, list_notes, slow (sleeps, for drain tests), echo (for
// benchmarks), big (a text of any size, for tests of result limits) and
// whoami (the token's hash; the token itself with -reveal-token, for
// canary tests only). With -hostile it also attacks the terminal of the
// operator who lists its tools (for tests of agenthost's escaping):
// -hostile=tools adds a tool whose name clears the screen and sets the
// window title, and one whose description and error write the clipboard
// (OSC 52) and forge a line; -hostile=list fails tools/list with such an
// error.
//
//	notes [-token T] [-reveal-token] [-hostile tools|list]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	token := flag.String("token", "", "the caller's token when MCP_ACCESS_TOKEN is not set (for manual runs)")
	reveal := flag.Bool("reveal-token", false, "let whoami return the token itself (tests only)")
	hostile := flag.String("hostile", "", "tools or list: attack the operator's terminal (tests only)")
	flag.Parse()
	tok := os.Getenv("MCP_ACCESS_TOKEN")
	if tok == "" {
		tok = *token
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Run returns when stdin reaches EOF (the client went away) or ctx ends.
	s := newServer(tok, *reveal)
	switch *hostile {
	case "":
	case "tools":
		addHostileTools(s)
	case "list":
		failToolsList(s)
	default:
		fmt.Fprintf(os.Stderr, "notes: -hostile %q: want tools or list\n", *hostile)
		os.Exit(2)
	}
	if err := s.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "notes:", err)
		stop()
		os.Exit(1)
	}
}
