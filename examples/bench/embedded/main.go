// Command embedded is agenthost as an embedder may build it: the host, its
// HTTP surfaces and the MCP extension in one process (ext-mcp as an
// in-process extension, host.Options.Extensions), for BenchmarkEndpointCall
// to tell what the process hop to ext-mcp costs a call against the same
// host with ext-mcp over go-plugin. It serves one operator's stdio server
// (notes) to user alice.
//
//	embedded -server /path/to/stdio-server
//
// It prints "listening on URL TOKEN" once it serves. Go's runtime settings
// are agenthost's (GOGC 400 and half the CPUs unless set).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/serve"
)

func main() {
	server := flag.String("server", "", "the stdio MCP server to serve")
	flag.Parse()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)/2))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *server); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, server string) error {
	dir, err := os.MkdirTemp("", "agenthost-embedded-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": server}}})
	if err != nil {
		return err
	}
	h, err := host.New(ctx, &host.Config{DataDir: dir, Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"mcp": {Extension: extmcp.New(nil), Config: cfg}}})
	if err != nil {
		return err
	}
	defer h.Close()
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	token, err := s.CreateToken(ctx, "alice", "bench")
	if err != nil {
		return err
	}
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s %s\n", s.URL(), token)
	return s.Serve(ctx, ln)
}
