// Command mcpgoproxy is the second one-hop proxy baseline of the endpoint
// benchmark (issue 11): the shape of the popular proxies built on
// mark3labs/mcp-go (such as TBXark/mcp-proxy), as its own process: an
// mcp-go Streamable HTTP server whose tools forward to one stdio MCP
// server through an mcp-go stdio client, with mcp-go's defaults.
//
//	mcpgoproxy -addr 127.0.0.1:0 -server /path/to/stdio-server [-stateless]
//
// -stateless serves with mcp-go's WithStateLess(true), as TBXark/mcp-proxy
// does (no session is kept between requests).
//
// It prints "listening on http://ADDR/mcp" once it serves.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	stdio := flag.String("server", "", "the stdio MCP server to proxy")
	stateless := flag.Bool("stateless", false, "serve without sessions (mcp-go's WithStateLess)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *stdio, *stateless); err != nil {
		fmt.Fprintln(os.Stderr, "mcpgoproxy:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, stdio string, stateless bool) error {
	up, err := client.NewStdioMCPClient(stdio, nil)
	if err != nil {
		return err
	}
	defer up.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "mcpgoproxy", Version: "v0"}
	if _, err := up.Initialize(ctx, init); err != nil {
		return fmt.Errorf("initializing the stdio server: %w", err)
	}
	tools, err := up.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return err
	}
	s := server.NewMCPServer("mcpgoproxy", "v0", server.WithToolCapabilities(false))
	for _, tool := range tools.Tools {
		name := tool.Name
		s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fwd := mcp.CallToolRequest{}
			fwd.Params.Name = name
			fwd.Params.Arguments = req.Params.Arguments
			return up.CallTool(ctx, fwd)
		})
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: server.NewStreamableHTTPServer(s, server.WithStateLess(stateless)), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
