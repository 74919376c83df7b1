// Command oneproxy is the benchmark baseline for DESIGN.md §7's MCP
// endpoint target: the shape of a one-hop proxy such as mcp-proxy, as its
// own process. A plain go-sdk Streamable HTTP server whose tools forward
// to one stdio MCP server through a go-sdk client with go-sdk's defaults.
//
//	oneproxy -addr 127.0.0.1:0 -server /path/to/stdio-server
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
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	server := flag.String("server", "", "the stdio MCP server to proxy")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *server); err != nil {
		fmt.Fprintln(os.Stderr, "oneproxy:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, server string) error {
	cmd := exec.Command(server)
	cmd.Env = serverEnv()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "oneproxy"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		return err
	}
	defer up.Close()
	s := mcp.NewServer(&mcp.Implementation{Name: "oneproxy"}, nil)
	for tool, err := range up.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		name := tool.Name
		s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return up.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
		})
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil),
		ReadHeaderTimeout: 10 * time.Second}
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

// serverEnv is the proxy's environment without GOGC: the GC target the
// benchmark gives a proxy is the proxy's own, and its server runs with
// Go's default, as the host starts its servers (with an environment of
// their own). Inherited, GOGC=400 made the proxy's server (examples/
// servers/notes) cheaper than the same server behind agenthost.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") {
			env = append(env, kv)
		}
	}
	return env
}
