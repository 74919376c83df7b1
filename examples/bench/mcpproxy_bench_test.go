package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpProxyModule is TBXark/mcp-proxy, the fastest public MCP proxy we
// measured (issue 20): Go, mark3labs/mcp-go, one process. Its module path
// is lowercase.
const (
	mcpProxyModule  = "github.com/tbxark/mcp-proxy"
	mcpProxyVersion = "v0.43.2"
)

// buildMCPProxy builds TBXark/mcp-proxy from its public source: from the
// checkout BENCH_MCP_PROXY_SRC names when set (its own go.mod, GOWORK
// off), else mcpProxyModule@mcpProxyVersion through the Go module proxy.
// It returns "" and why when neither builds (the proxy's module is not on
// every module proxy: proxy.golang.org answers 403 for it on some
// networks).
func buildMCPProxy(b *testing.B) (string, string) {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "mcp-proxy")
	var cmd *exec.Cmd
	if src := os.Getenv("BENCH_MCP_PROXY_SRC"); src != "" {
		cmd = exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	} else {
		cmd = exec.Command("go", "install", mcpProxyModule+"@"+mcpProxyVersion)
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOBIN="+dir)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("%v: %v: %s (set BENCH_MCP_PROXY_SRC to a checkout of https://github.com/TBXark/mcp-proxy)",
			cmd.Args, err, strings.TrimSpace(string(out)))
	}
	return bin, ""
}

// startMCPProxy runs TBXark/mcp-proxy as it is deployed — its JSON config,
// one stdio server (notes), the streamable-http server type, no logging,
// no auth tokens — until the benchmark ends, and connects a go-sdk client
// to the server's route, pinned to 2025-11-25 like every client here.
func startMCPProxy(b *testing.B, bin, notes string) *mcp.ClientSession {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // the proxy takes only an address
	cfg := fmt.Sprintf(`{"mcpProxy":{"baseURL":"http://%s","addr":%q,"name":"mcp-proxy","version":"1.0.0","type":"streamable-http",
		"options":{"logEnabled":false}},"mcpServers":{"notes":{"command":%q}}}`, addr, addr, notes)
	cfgPath := filepath.Join(b.TempDir(), "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgPath)
	errOut, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	// It logs (to stderr) the route once the stdio server's tools are added,
	// and listens from the start.
	sc := bufio.NewScanner(errOut)
	var logged []string
	for sc.Scan() {
		logged = append(logged, sc.Text())
		if strings.Contains(sc.Text(), "Handling requests at /notes/") {
			break
		}
	}
	if !strings.Contains(strings.Join(logged, "\n"), "Handling requests at") {
		b.Fatalf("mcp-proxy did not start:\n%s", strings.Join(logged, "\n"))
	}
	go func() { // keep draining its log
		for sc.Scan() {
		}
	}()
	// It logs the route just before it adds the route to its mux: until
	// then the route answers 404, so the first connection may be refused
	// (it was, in one run of five).
	var cs *mcp.ClientSession
	for deadline := time.Now().Add(5 * time.Second); ; {
		cs, err = mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/notes/"},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusNotFound)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}
