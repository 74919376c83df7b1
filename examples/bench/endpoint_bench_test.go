package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// BenchmarkEndpointCall compares one tool call over MCP Streamable HTTP,
// in the same run, against the same stdio server (examples/servers/notes,
// tool echo):
//   - direct: a go-sdk client calling the stdio server (no HTTP; the floor);
//   - one-hop-proxy: a plain go-sdk Streamable HTTP server in its own
//     process (examples/bench/oneproxy) whose tools call the stdio server
//     with go-sdk's defaults (the shape of mcp-proxy);
//   - agenthost: the real `agenthost serve` binary with the ext-mcp binary:
//     HTTP → host → gRPC → ext-mcp → the stdio server (descriptors passed).
//
// The target (DESIGN.md §7) is agenthost ahead of the one-hop proxy at p50
// and in throughput, despite the extra hop.
func BenchmarkEndpointCall(b *testing.B) {
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	agenthost := testbin.Build(b, pkg+"host/cmd/agenthost")
	extMCP := testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp")
	args := map[string]any{"text": "hello"}
	connectHTTP := func(b *testing.B, url string, hc *http.Client) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	call := func(cs *mcp.ClientSession, name string) func() error {
		return func() error {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
			if err == nil && res.IsError {
				err = fmt.Errorf("error result")
			}
			return err
		}
	}
	b.Run("direct", func(b *testing.B) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
			&mcp.CommandTransport{Command: exec.Command(notes), TerminateDuration: time.Second}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		baselines.Store("endpoint-direct", measure(b, call(cs, "echo")))
	})
	for _, gogc := range []string{"100", "400"} {
		// The proxy runs as its own process, as mcp-proxy does; once with
		// Go's default GC target and once with the one our processes use.
		b.Run("one-hop-proxy/GOGC="+gogc, func(b *testing.B) {
			proxy := exec.Command(testbin.Build(b, pkg+"examples/bench/oneproxy"), "-server", notes)
			proxy.Env = append(os.Environ(), "GOGC="+gogc)
			out, _ := proxy.StdoutPipe()
			if err := proxy.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				_ = proxy.Process.Signal(syscall.SIGTERM)
				_ = proxy.Wait()
			}()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "listening on ") {
				b.Fatalf("oneproxy said %q: %v", line, err)
			}
			cs := connectHTTP(b, strings.TrimSpace(strings.TrimPrefix(line, "listening on ")), http.DefaultClient)
			defer cs.Close()
			p50 := measure(b, call(cs, "echo"))
			baselines.Store("proxy-gogc"+gogc, p50)
			ratio(b, "endpoint-direct", p50)
		})
	}
	b.Run("agenthost", func(b *testing.B) {
		dir := b.TempDir()
		cfg := fmt.Sprintf(`{"listen":"127.0.0.1:0","dataDir":%q,"secrets":{"backend":"memory"},
			"extensions":{"mcp":{"path":%q,"config":{"mcpServers":{"notes":{"command":%q}}}}}}`,
			filepath.Join(dir, "data"), extMCP, notes)
		cfgPath := filepath.Join(dir, "agenthost.json")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			b.Fatal(err)
		}
		serveArgs := []string{"--config", cfgPath, "--log-level", "error", "serve"}
		if p := os.Getenv("BENCH_HOST_CPUPROFILE"); p != "" {
			serveArgs = append(serveArgs, "--cpuprofile", p)
		}
		serve := exec.Command(agenthost, serveArgs...)
		out, _ := serve.StdoutPipe()
		if err := serve.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() {
			_ = serve.Process.Signal(syscall.SIGTERM)
			_ = serve.Wait()
		}()
		line, err := bufio.NewReader(out).ReadString('\n')
		i := strings.Index(line, " at ")
		if err != nil || i < 0 {
			b.Fatalf("serve said %q: %v", line, err)
		}
		url := strings.Fields(line[i+4:])[0]
		tok, err := exec.Command(agenthost, "--config", cfgPath, "token", "create", "--user", "alice", "--name", "bench").Output()
		if err != nil {
			b.Fatal(err)
		}
		hc := &http.Client{Transport: bearerRT{strings.TrimSpace(string(tok))}}
		cs := connectHTTP(b, url+"/mcp", hc)
		defer cs.Close()
		p50 := measure(b, call(cs, "notes__echo"))
		ratio(b, "proxy-gogc100", p50)
		ratio(b, "proxy-gogc400", p50)
		ratio(b, "endpoint-direct", p50)
	})
}
