package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/host"
)

func TestMain(m *testing.M) { testbin.Main(m) }

const pkg = "github.com/agenthost/agenthost/"

// baselines keeps each baseline's p50 of this run, so later sub-benchmarks
// print their ratio to it.
var baselines sync.Map

// measure runs b.N sequential calls, then 8 callers for a second, and
// reports p50/p99 (µs) and calls/s; it returns the p50 and the calls/s.
func measure(b *testing.B, call func() error) (p50, perSecond float64) {
	b.Helper()
	for range 50 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50 = float64(lat[len(lat)/2].Nanoseconds()) / 1e3
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if call() == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(n.Load()), "calls/s-8callers")
	return p50, float64(n.Load())
}

func ratio(b *testing.B, key string, p50 float64) {
	if v, ok := baselines.Load(key); ok {
		b.ReportMetric(p50/v.(float64), "×"+key)
	}
}

// BenchmarkToolCall compares, on one stdio MCP server (examples/servers/
// notes, tool echo), in the same run and on both protocol paths:
//   - direct: a go-sdk client calling the server;
//   - barechain: the bare architecture chain, a go-plugin gRPC hop
//     (AutoMTLS) into an extension that makes a direct go-sdk stdio call;
//   - host: the Go API, host → ext-mcp (a real process) → the server's
//     process started by the host and passed to ext-mcp as descriptors.
//
// The target (DESIGN.md §7) is host ≤ 1.05× barechain at p50.
func BenchmarkToolCall(b *testing.B) {
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	bare := testbin.Build(b, pkg+"examples/bench/barechain")
	extMCP := testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp")
	args := json.RawMessage(`{"text":"hello"}`)
	for _, pv := range []string{"2025-11-25", "latest"} {
		sdkPV := pv
		if pv == "latest" {
			sdkPV = ""
		}
		b.Run("direct/"+pv, func(b *testing.B) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
				&mcp.CommandTransport{Command: exec.Command(notes), TerminateDuration: time.Second},
				&mcp.ClientSessionOptions{ProtocolVersion: sdkPV})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			p50, _ := measure(b, func() error {
				_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args})
				return err
			})
			baselines.Store("direct-"+pv, p50)
		})
		b.Run("barechain/"+pv, func(b *testing.B) {
			cmd := exec.Command(bare)
			cmd.Env = []string{"BARECHAIN_SERVER=" + notes, "BARECHAIN_PROTOCOL=" + sdkPV}
			plugins, err := ext.HostPlugins(nil)
			if err != nil {
				b.Fatal(err)
			}
			pc := plugin.NewClient(&plugin.ClientConfig{
				HandshakeConfig: ext.Handshake, Plugins: plugins, Cmd: cmd, AutoMTLS: true,
				AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
				Logger:           hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
			})
			defer pc.Kill()
			rpc, err := pc.Client()
			if err != nil {
				b.Fatal(err)
			}
			c, err := ext.Dispense(rpc)
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Configure(context.Background(), &ext.ConfigureRequest{Host: nopHost{}}); err != nil {
				b.Fatal(err)
			}
			defer c.Shutdown(context.Background())
			req := &ext.CallToolRequest{User: "alice", Name: "echo", Arguments: args}
			p50, _ := measure(b, func() error {
				_, err := c.CallTool(context.Background(), req)
				return err
			})
			baselines.Store("barechain-"+pv, p50)
			ratio(b, "direct-"+pv, p50)
		})
		b.Run("host/"+pv, func(b *testing.B) {
			dir := b.TempDir()
			cfg := fmt.Sprintf(`{"dataDir":%q,"secrets":{"backend":"memory"},"extensions":{"mcp":{"path":%q,
				"config":{"mcpServers":{"notes":{"command":%q,"protocolVersion":%q}}}}}}`,
				filepath.Join(dir, "data"), extMCP, notes, pv)
			c, err := host.ParseConfig([]byte(cfg), dir)
			if err != nil {
				b.Fatal(err)
			}
			h, err := host.New(context.Background(), c, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if _, err := h.Tools(context.Background(), "alice"); err != nil {
				b.Fatal(err)
			}
			p50, _ := measure(b, func() error {
				res, err := h.Call(context.Background(), "alice", "", "notes/echo", args)
				if err == nil && res.IsError {
					err = fmt.Errorf("%s", res.Text())
				}
				return err
			})
			ratio(b, "barechain-"+pv, p50)
			ratio(b, "direct-"+pv, p50)
		})
	}
}

// nopHost is the least ext.Host for the bare chain, which uses none.
type nopHost struct{ ext.Host }

// BenchmarkActivation1000Users activates 1,000 users × 3 remote Streamable
// HTTP servers through the host and ext-mcp (in process) against three real
// go-sdk HTTP servers, and reports the time per user, the heap per
// user-connection, and the heap left after retiring everyone (the baseline
// is the heap before activating).
func BenchmarkActivation1000Users(b *testing.B) {
	const users, servers = 1000, 3
	var urls []string
	for i := range servers {
		s := mcp.NewServer(&mcp.Implementation{Name: fmt.Sprintf("s%d", i)}, nil)
		s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
		ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
		defer ts.Close()
		urls = append(urls, ts.URL)
	}
	for range b.N {
		decl := map[string]any{}
		for i, u := range urls {
			decl[fmt.Sprintf("s%d", i)] = map[string]any{"url": u}
		}
		mcpCfg, _ := json.Marshal(map[string]any{"mcpServers": decl})
		x := extmcp.New(&extmcp.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		h, err := host.New(context.Background(), &host.Config{DataDir: b.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
			&host.Options{Extensions: map[string]host.InProcess{"mcp": {Extension: x, Config: mcpCfg}}})
		if err != nil {
			b.Fatal(err)
		}
		before := heap()
		goroutinesBefore := runtime.NumGoroutine()
		// Two rounds: activate everyone, retire everyone. The heap after the
		// second round equals the first's when nothing grows: what stays is
		// the keep-alive pool (bounded by MaxIdleConnsPerHost, 256 per
		// server, expiring after 90 s idle) and the test servers' side of it.
		var elapsed time.Duration
		var during, after [2]uint64
		for round := range 2 {
			start := time.Now()
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			for u := range users {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					tools, err := h.Tools(context.Background(), fmt.Sprintf("user%d", u))
					if err != nil || len(tools) != servers {
						b.Errorf("user%d: %d tools, %v", u, len(tools), err)
					}
				}()
			}
			wg.Wait()
			if round == 0 {
				elapsed = time.Since(start)
			}
			during[round] = heap()
			for u := range users {
				if err := h.Deactivate(context.Background(), fmt.Sprintf("user%d", u)); err != nil {
					b.Fatal(err)
				}
			}
			// Connections close in the background (go-sdk sends a DELETE
			// per session): let the goroutines settle before reading.
			deadline := time.Now().Add(15 * time.Second)
			last := -1
			for time.Now().Before(deadline) {
				n := runtime.NumGoroutine()
				if n == last {
					break
				}
				last = n
				time.Sleep(500 * time.Millisecond)
			}
			after[round] = heap()
		}
		b.ReportMetric(float64(elapsed.Milliseconds()), "ms-activate-all")
		b.ReportMetric(float64(elapsed.Microseconds())/users, "µs/user")
		b.ReportMetric(float64(during[0]-before)/(users*servers)/1024, "KiB/user-conn")
		b.ReportMetric(float64(before)/1024/1024, "MiB-heap-before")
		b.ReportMetric(float64(after[0])/1024/1024, "MiB-after-retire-1")
		b.ReportMetric(float64(after[1])/1024/1024, "MiB-after-retire-2")
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutinesBefore), "goroutines-left")
		_ = h.Close()
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
