// Command bearer is an example Streamable HTTP MCP server that requires
// `Authorization: Bearer <token>` (401 otherwise). Its whoami tool says
// which token a request carried, by hash (the token itself with
// -reveal-token, for canary tests only); echo is for benchmarks, big (a
// text of any size) for tests of result limits.
//
//	bearer [-addr 127.0.0.1:8090] [-tokens a,b] [-api-key K] [-stateless] [-reveal-token] [-describe FILE]
//
// Tokens come from -tokens or, when it is empty, from BEARER_TOKENS
// (comma-separated). With neither, any non-empty token is accepted. With
// -api-key (or BEARER_API_KEY) a request must also carry the header
// X-API-Key: K, as servers that take a key beside the token do. With
// -describe FILE the echo tool's description is FILE's text, followed as
// it changes (the sessions hear tools/list_changed): a rug pull, for
// tests of tool pinning.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/examples/servers/internal/describe"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on; the endpoint is /mcp")
	tokens := flag.String("tokens", "", "comma-separated accepted tokens (default: $BEARER_TOKENS; none: any token)")
	apiKey := flag.String("api-key", "", "a key every request must carry in X-API-Key (default: $BEARER_API_KEY; none: no key)")
	stateless := flag.Bool("stateless", false, "serve the stateless protocol (2026-07-28) instead of sessions")
	reveal := flag.Bool("reveal-token", false, "let whoami return the token itself (tests only)")
	describeFile := flag.String("describe", "", "a file whose text is echo's description, followed as it changes (tests only)")
	flag.Parse()
	list := *tokens
	if list == "" {
		list = os.Getenv("BEARER_TOKENS")
	}
	o := options{reveal: *reveal, stateless: *stateless, apiKey: *apiKey}
	if o.apiKey == "" {
		o.apiKey = os.Getenv("BEARER_API_KEY")
	}
	for _, t := range strings.Split(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.tokens = append(o.tokens, t)
		}
	}
	if err := run(*addr, o, *describeFile); err != nil {
		fmt.Fprintln(os.Stderr, "bearer:", err)
		os.Exit(1)
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully.
// With describeFile set, echo's description follows that file.
func run(addr string, o options, describeFile string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s := newServer(o)
	if describeFile != "" {
		follow, err := describe.Follow(ctx, describeFile, func(text string) { addEcho(s, text) })
		if err != nil {
			return fmt.Errorf("-describe: %w", err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop() // runs first: the follower ends, then is waited for
		wg.Go(follow)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", handlerFor(s, o))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "bearer: serving http://%s/mcp\n", ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
