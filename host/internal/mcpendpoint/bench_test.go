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

// callers is the number of concurrent callers of the throughput figures.
const callers = 8

type stats struct {
	p50, p99 time.Duration
	perSec   float64
}

// noExtras is the part of mcpendpoint.Host beside tools of a host that
// has only tools.
type noExtras struct{}

func (noExtras) Task(context.Context, string, string, json.RawMessage, ext.Session) (json.RawMessage, error) {
	return nil, ext.ErrNotFound
}
func (noExtras) Prompts(context.Context, string) ([]api.Prompt, error) { return nil, nil }
func (noExtras) GetPrompt(context.Context, *api.PromptRequest) (json.RawMessage, error) {
	return nil, ext.ErrNotFound
}
func (noExtras) Resources(context.Context, string) ([]api.Resource, []api.ResourceTemplate, error) {
	return nil, nil, nil
}
func (noExtras) ReadResource(context.Context, *api.ResourceRequest) (json.RawMessage, error) {
	return nil, ext.ErrNotFound
}
func (noExtras) SubscribeResource(context.Context, string, string, bool) error {
	return ext.ErrNotFound
}
func (noExtras) Complete(context.Context, string, json.RawMessage, ext.Session) (json.RawMessage, error) {
	return json.RawMessage(`{"completion":{"values":[]}}`), nil
}
func (noExtras) Instructions(context.Context, string) ([]api.Instruction, error) { return nil, nil }
func (noExtras) SubscribeCatalog(string) (<-chan struct{}, func())               { return nil, func() {} }
func (noExtras) AttachSession(string, ext.Session) (func(), func())              { return func() {}, func() {} }
func (noExtras) SessionNotify(context.Context, string, string, json.RawMessage) error {
	return nil
}

// stdioHost is a host whose only tool, notes/echo, forwards to a stdio MCP
// server through a go-sdk client, converting the result the way ext-mcp
// does (content marshalled once, as go-sdk decoded it).
type stdioHost struct {
	noExtras
	cs *mcp.ClientSession
}

func (h *stdioHost) Tools(context.Context, string) ([]api.Tool, error) {
	return []api.Tool{{Tool: ext.Tool{Name: "notes/echo", Description: "Send the text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, Extension: "mcp"}}, nil
}

func (h *stdioHost) Subscribe(context.Context, string) (<-chan struct{}, func()) {
	return nil, func() {}
}

func (h *stdioHost) CallTool(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Arguments})
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
	noExtras
	tools []api.Tool
}

func (h *echoHost) Tools(context.Context, string) ([]api.Tool, error) { return h.tools, nil }

func (h *echoHost) Subscribe(context.Context, string) (<-chan struct{}, func()) {
	return nil, func() {}
}

var echoContent = json.RawMessage(`[{"type":"text","text":"hi"}]`)

func (h *echoHost) CallTool(context.Context, *api.CallRequest) (*ext.CallToolResult, error) {
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
// (stdio), three ways, interleaved in the same run:
//
//   - direct: a go-sdk client calls the stdio server itself;
//   - proxy: a go-sdk client calls a plain go-sdk Streamable HTTP server
//     whose tool calls the stdio server (the shape of a one-hop proxy such
//     as TBXark/mcp-proxy);
//   - endpoint: a go-sdk client calls this endpoint over HTTP, whose host
//     forwards to the stdio server the way ext-mcp does.
//
// All three share one stdio session. The paths take turns in chunks of 50
// sequential calls (b.N calls each, for p50 and p99) and then in rounds of
// 8 concurrent callers (for calls/s), so that a neighbour's load on this
// shared machine weighs on all three alike. Every path's figures are on
// one line, with the endpoint's ratios to the proxy (x-proxy-*).
// Run with -benchtime=3000x.
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

	// The one-hop proxy: go-sdk's defaults, the result passed through.
	s := mcp.NewServer(&mcp.Implementation{Name: "proxy"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return stdio.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
		})
	proxySrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	defer proxySrv.Close()
	proxy := httpClient(b, tr, proxySrv.URL, "")
	defer proxy.Close()

	ep, err := mcpendpoint.New(&stdioHost{cs: stdio}, benchVerifier{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	epSrv := httptest.NewServer(ep)
	defer epSrv.Close()
	endpoint := httpClient(b, tr, epSrv.URL, "tok-alice")
	defer endpoint.Close()

	paths := []struct {
		name string
		call func(context.Context) error
	}{
		{"direct", callOK(stdio, "echo", args)},
		{"proxy", callOK(proxy, "echo", args)},
		{"endpoint", callOK(endpoint, "notes__echo", args)},
	}
	ctx := context.Background()
	for _, p := range paths {
		for range 200 {
			if err := p.call(ctx); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}

	const chunk = 50
	lat := make([][]time.Duration, len(paths))
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		for i, p := range paths {
			for range min(chunk, b.N-done) {
				start := time.Now()
				if err := p.call(ctx); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}
	}
	b.StopTimer()

	// Throughput: rounds of 8 callers per path, taking turns.
	const rounds = 6
	per := max(b.N, 1200) / rounds / callers
	elapsed := make([]time.Duration, len(paths))
	for range rounds {
		for i, p := range paths {
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := p.call(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed[i] += time.Since(start)
			close(errs)
			for err := range errs {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}

	st := make([]stats, len(paths))
	for i, p := range paths {
		slices.Sort(lat[i])
		st[i] = stats{
			p50:    lat[i][len(lat[i])/2],
			p99:    lat[i][min(len(lat[i])-1, len(lat[i])*99/100)],
			perSec: float64(rounds*per*callers) / elapsed[i].Seconds(),
		}
		b.ReportMetric(float64(st[i].p50.Nanoseconds())/1e3, p.name+"-p50-µs")
		b.ReportMetric(float64(st[i].p99.Nanoseconds())/1e3, p.name+"-p99-µs")
		b.ReportMetric(st[i].perSec, p.name+"-calls/s")
	}
	b.ReportMetric(float64(st[2].p50)/float64(st[1].p50), "x-proxy-p50")
	b.ReportMetric(st[2].perSec/st[1].perSec, "x-proxy-calls/s")
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
