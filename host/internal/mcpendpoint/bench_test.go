package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// The measurement: 200 warm-up calls, b.N sequential calls for p50 and
// p99, then max(b.N, 800) calls from 8 concurrent callers for throughput
// (the timer covers the sequential phase only). Run with
// -benchtime=3000x for figures comparable to LIBRARIES.md.
const callers = 8

type stats struct {
	p50, p99 time.Duration
	perSec   float64
}

func measure(b *testing.B, call func(context.Context) error) stats {
	b.Helper()
	ctx := context.Background()
	for range 200 {
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := call(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	st := stats{p50: lat[len(lat)/2], p99: lat[min(len(lat)-1, len(lat)*99/100)]}

	per := max(b.N, 800) / callers
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if err := call(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	st.perSec = float64(per*callers) / time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(st.p99.Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(st.perSec, "calls/s")
	return st
}

// stdioHost is a host whose only tool, notes/echo, forwards to a stdio MCP
// server through a go-sdk client, converting the result the way ext-mcp
// does (content marshalled once, as go-sdk decoded it).
type stdioHost struct {
	api.Host
	cs *mcp.ClientSession
}

func (h *stdioHost) Tools(context.Context, string) ([]api.Tool, error) {
	return []api.Tool{{Tool: ext.Tool{Name: "notes/echo", Description: "Send the text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, Extension: "mcp"}}, nil
}

func (h *stdioHost) Subscribe(string) (<-chan struct{}, func()) { return nil, func() {} }

func (h *stdioHost) Call(ctx context.Context, _, _, _ string, args json.RawMessage) (*ext.CallToolResult, error) {
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: args})
	if err != nil {
		return nil, err
	}
	out := &ext.CallToolResult{IsError: res.IsError}
	if out.Content, err = json.Marshal(res.Content); err != nil {
		return nil, err
	}
	return out, nil
}

// echoHost answers every call in process: the endpoint's own cost.
type echoHost struct {
	api.Host
	tools []api.Tool
}

func (h *echoHost) Tools(context.Context, string) ([]api.Tool, error) { return h.tools, nil }

func (h *echoHost) Subscribe(string) (<-chan struct{}, func()) { return nil, func() {} }

var echoContent = json.RawMessage(`[{"type":"text","text":"hi"}]`)

func (h *echoHost) Call(context.Context, string, string, string, json.RawMessage) (*ext.CallToolResult, error) {
	return &ext.CallToolResult{Content: echoContent}, nil
}

// benchVerifier accepts "tok-<user>" for user.
type benchVerifier struct{}

func (benchVerifier) Verify(_ context.Context, tok string) (mcpendpoint.Principal, error) {
	if len(tok) < 5 || tok[:4] != "tok-" {
		return mcpendpoint.Principal{}, fmt.Errorf("unknown token")
	}
	return mcpendpoint.Principal{User: tok[4:], TokenID: tok}, nil
}

// httpClient connects a go-sdk client (pinned 2025-11-25) to url.
func httpClient(b *testing.B, tr *http.Transport, url, token string) *mcp.ClientSession {
	b.Helper()
	var rt http.RoundTripper = tr
	if token != "" {
		rt = &bearerRT{base: tr, token: token}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func callOK(cs *mcp.ClientSession, name string, args json.RawMessage) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: error result", name)
		}
		return err
	}
}

// BenchmarkEndpointCall measures one echo call to the example notes server
// (stdio), three ways in the same run:
//
//   - direct-stdio: a go-sdk client calls the server itself;
//   - one-hop-proxy: a go-sdk client calls a plain go-sdk Streamable HTTP
//     server whose tool calls the stdio server (the shape of a proxy such
//     as TBXark/mcp-proxy);
//   - endpoint: a go-sdk client calls this endpoint over HTTP, whose host
//     forwards to the stdio server.
//
// All three share one stdio session. endpoint also reports its ratio to
// the proxy (x-proxy-p50, x-proxy-calls/s).
func BenchmarkEndpointCall(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "notes")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/agenthost/agenthost/examples/servers/notes").CombinedOutput(); err != nil {
		b.Fatalf("building the notes server: %v\n%s", err, out)
	}
	stdio, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.CommandTransport{Command: exec.Command(bin), TerminateDuration: 2 * time.Second},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	defer stdio.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	args := json.RawMessage(`{"text":"hi"}`)

	b.Run("direct-stdio", func(b *testing.B) {
		measure(b, callOK(stdio, "echo", args))
	})

	var proxy stats
	b.Run("one-hop-proxy", func(b *testing.B) {
		s := mcp.NewServer(&mcp.Implementation{Name: "proxy"}, nil)
		s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return stdio.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
			})
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
		defer srv.Close()
		cs := httpClient(b, tr, srv.URL, "")
		defer cs.Close()
		proxy = measure(b, callOK(cs, "echo", args))
	})

	b.Run("endpoint", func(b *testing.B) {
		ep, err := mcpendpoint.New(&stdioHost{cs: stdio}, benchVerifier{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer ep.Close()
		srv := httptest.NewServer(ep)
		defer srv.Close()
		cs := httpClient(b, tr, srv.URL, "tok-alice")
		defer cs.Close()
		st := measure(b, callOK(cs, "notes__echo", args))
		if proxy.p50 > 0 {
			b.ReportMetric(float64(st.p50)/float64(proxy.p50), "x-proxy-p50")
			b.ReportMetric(st.perSec/proxy.perSec, "x-proxy-calls/s")
		}
	})
}

// BenchmarkSessions opens 100 sessions (100 users) and makes b.N calls
// spread over them, all sessions calling at once, against this endpoint
// with an in-process echo host and against a plain go-sdk server with the
// same echo tool. It reports throughput, p50 and p99 per call, and the
// heap in use per open session (both ends of the sessions live in this
// process, so compare heap-KiB/session with plain-sdk's). Run with
// -benchtime=100000x for 100 × 1,000 calls.
func BenchmarkSessions(b *testing.B) {
	const sessions = 100
	tools := []api.Tool{}
	for i := range 20 {
		tools = append(tools, api.Tool{Tool: ext.Tool{Name: fmt.Sprintf("srv%d/echo", i), Description: "Echo.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}})
	}
	plain := mcp.NewServer(&mcp.Implementation{Name: "plain"}, nil)
	for _, t := range tools {
		plain.AddTool(&mcp.Tool{Name: mcpName(t.Name), InputSchema: t.InputSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil
			})
	}
	for _, kind := range []string{"plain-sdk", "endpoint"} {
		b.Run(kind, func(b *testing.B) {
			var h http.Handler
			var ep *mcpendpoint.Endpoint
			if kind == "endpoint" {
				var err error
				if ep, err = mcpendpoint.New(&echoHost{tools: tools}, benchVerifier{}, nil); err != nil {
					b.Fatal(err)
				}
				defer ep.Close()
				h = ep
			} else {
				h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return plain }, nil)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 2 * sessions}
			defer tr.CloseIdleConnections()

			before := heapInUse()
			css := make([]*mcp.ClientSession, sessions)
			for i := range css {
				css[i] = httpClient(b, tr, srv.URL, fmt.Sprintf("tok-user%03d", i))
			}
			defer func() {
				for _, cs := range css {
					cs.Close()
				}
			}()
			if ep != nil && ep.Sessions() != sessions {
				b.Fatalf("Sessions() = %d, want %d", ep.Sessions(), sessions)
			}
			opened := heapInUse()

			per := max(1, b.N/sessions)
			lats := make([][]time.Duration, sessions)
			var wg sync.WaitGroup
			errs := make(chan error, sessions)
			b.ResetTimer()
			start := time.Now()
			for i, cs := range css {
				wg.Add(1)
				go func() {
					defer wg.Done()
					call := callOK(cs, "srv7__echo", json.RawMessage(`{"text":"hi"}`))
					lat := make([]time.Duration, 0, per)
					for range per {
						t0 := time.Now()
						if err := call(context.Background()); err != nil {
							errs <- err
							return
						}
						lat = append(lat, time.Since(t0))
					}
					lats[i] = lat
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			all := slices.Concat(lats...)
			slices.Sort(all)
			after := heapInUse()
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(all[min(len(all)-1, len(all)*99/100)].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(int64(opened)-int64(before))/sessions/1024, "heap-KiB/session")
			b.ReportMetric(float64(after)/(1<<20), "heap-MiB")
		})
	}
}

// mcpName is the endpoint's default mapping of a plain server/tool name.
func mcpName(name string) string {
	for i := range len(name) {
		if name[i] == '/' {
			return name[:i] + "__" + name[i+1:]
		}
	}
	return name
}

// heapInUse is the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
