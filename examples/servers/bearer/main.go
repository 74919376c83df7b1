// Command bearer is an example Streamable HTTP MCP server that requires
// `Authorization: Bearer <token>` (401 otherwise). Its whoami tool says
// which token a request carried, by hash (the token itself with
// -reveal-token, for canary tests only); echo is for benchmarks, big (a
// text of any size) for tests of result limits.
//
//	bearer [-addr 127.0.0.1:8090] [-tokens a,b] [-api-key K] [-stateless] [-reveal-token]
//
// Tokens come from -tokens or, when it is empty, from BEARER_TOKENS
// (comma-separated). With neither, any non-empty token is accepted. With
// -api-key (or BEARER_API_KEY) a request must also carry the header
// X-API-Key: K, as servers that take a key beside the token do.
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
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on; the endpoint is /mcp")
	tokens := flag.String("tokens", "", "comma-separated accepted tokens (default: $BEARER_TOKENS; none: any token)")
	apiKey := flag.String("api-key", "", "a key every request must carry in X-API-Key (default: $BEARER_API_KEY; none: no key)")
	stateless := flag.Bool("stateless", false, "serve the stateless protocol (2026-07-28) instead of sessions")
	reveal := flag.Bool("reveal-token", false, "let whoami return the token itself (tests only)")
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
	if err := run(*addr, o); err != nil {
		fmt.Fprintln(os.Stderr, "bearer:", err)
		os.Exit(1)
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully.
func run(addr string, o options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", newHandler(o))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
