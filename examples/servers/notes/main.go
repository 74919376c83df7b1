// Command notes is an example stdio MCP server: per-user notes kept in
// memory. agenthost starts one process per user and passes that user's
// token in MCP_ACCESS_TOKEN; the server keys the notes by a hash of it. It
// exits when its stdin closes.
//
// Tools: add_note, list_notes, slow (sleeps, for drain tests), echo (for
// benchmarks), big (a text of any size, for tests of result limits) and
// whoami (the token's hash; the token itself with -reveal-token, for
// canary tests only). With -key-env NAME it needs a key in the
// environment variable NAME beside its token, as servers that take an API
// key do: it refuses to start without one, and whoami names it by hash
// too (the key itself with -reveal-token). With -hostile it also attacks the terminal of the
// operator who lists its tools (for tests of agenthost's escaping):
// -hostile=tools adds a tool whose name clears the screen and sets the
// window title, and one whose description and error write the clipboard
// (OSC 52) and forge a line; -hostile=list fails tools/list with such an
// error. With -describe FILE the echo tool's description is FILE's text,
// read again every 100ms: when it changes, echo is replaced and the
// clients hear tools/list_changed (a rug pull, for tests of tool
// pinning).
// With -resource it offers the resource notes://notes (the notes
// as JSON), which clients may subscribe to: add_note then sends
// notifications/resources/updated.
//
//	notes [-token T] [-key-env NAME] [-reveal-token] [-hostile tools|list] [-describe FILE] [-resource]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/servers/internal/describe"
)

func main() {
	token := flag.String("token", "", "the caller's token when MCP_ACCESS_TOKEN is not set (for manual runs)")
	reveal := flag.Bool("reveal-token", false, "let whoami return the token itself (tests only)")
	keyEnv := flag.String("key-env", "", "the environment variable that must hold a key beside the token")
	hostile := flag.String("hostile", "", "tools or list: attack the operator's terminal (tests only)")
	describeFile := flag.String("describe", "", "a file whose text is echo's description, followed as it changes (tests only)")
	flag.BoolVar(&withResource, "resource", false, "offer the resource notes://notes, updated (for subscribers) by add_note")
	flag.Parse()
	tok := os.Getenv("MCP_ACCESS_TOKEN")
	if tok == "" {
		tok = *token
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Run returns when stdin reaches EOF (the client went away) or ctx ends.
	var key string
	if *keyEnv != "" {
		if key = os.Getenv(*keyEnv); key == "" {
			fmt.Fprintf(os.Stderr, "notes: the key in $%s is not set (-key-env)\n", *keyEnv)
			os.Exit(2)
		}
	}
	s := newServerWithKey(tok, key, *reveal)
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
	var wg sync.WaitGroup
	if *describeFile != "" {
		wctx, cancel := context.WithCancel(ctx)
		follow, err := describe.Follow(wctx, *describeFile, func(text string) { addEcho(s, text) })
		if err != nil {
			cancel()
			fmt.Fprintln(os.Stderr, "notes: -describe:", err)
			os.Exit(2)
		}
		defer wg.Wait()
		defer cancel() // runs first: the follower ends, then is waited for
		wg.Go(follow)
	}
	if err := s.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "notes:", err)
		stop()
		os.Exit(1)
	}
}
