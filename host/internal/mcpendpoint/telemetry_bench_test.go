package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// BenchmarkCallTelemetry measures the per-call cost of metrics and traces:
// the same echo call through this endpoint (a session, 2025-11-25, the
// agent's traceparent in _meta) with telemetry off, on (the /metrics
// histogram, and a span per call exported over OTLP/HTTP to an in-test
// collector that discards it) and metrics only (no export), to an in-process host (the endpoint's own
// cost: the worst case) and to the example notes server over stdio (a
// real call). The paths take turns in chunks of 50 calls in the same run;
// each path's p50 is reported, with the ratios on/off.
// Run with -benchtime=2000x.
func BenchmarkCallTelemetry(b *testing.B) {
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
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	tel, err := telemetry.New(context.Background(), telemetry.Config{Metrics: true, OTLPEndpoint: collector.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	metricsOnly, err := telemetry.New(context.Background(), telemetry.Config{Metrics: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = metricsOnly.Shutdown(context.Background()) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	echo := &echoHost{tools: []api.Tool{{Tool: ext.Tool{Name: "notes/echo", InputSchema: json.RawMessage(`{"type":"object"}`)}, Extension: "mcp"}}}
	client := func(h mcpendpoint.Host, t *telemetry.T) *mcp.ClientSession {
		ep, err := mcpendpoint.New(h, benchVerifier{}, &mcpendpoint.Options{Telemetry: t})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ep.Close() })
		srv := httptest.NewServer(ep)
		b.Cleanup(srv.Close)
		cs := httpClient(b, tr, srv.URL, "tok-alice")
		b.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	args := json.RawMessage(`{"text":"hi"}`)
	meta := mcp.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	call := func(cs *mcp.ClientSession) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__echo", Arguments: args, Meta: meta})
			return err
		}
	}
	paths := []struct {
		name string
		call func(context.Context) error
	}{
		{"echo-off", call(client(echo, nil))},
		{"echo-on", call(client(echo, tel))},
		{"stdio-off", call(client(&stdioHost{cs: stdio}, nil))},
		{"stdio-on", call(client(&stdioHost{cs: stdio}, tel))},
		{"echo-metrics", call(client(echo, metricsOnly))},
		{"stdio-metrics", call(client(&stdioHost{cs: stdio}, metricsOnly))},
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
	p50 := make([]time.Duration, len(paths))
	for i, p := range paths {
		slices.Sort(lat[i])
		p50[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(float64(p50[i].Nanoseconds())/1e3, p.name+"-p50-µs")
	}
	b.ReportMetric(float64(p50[1])/float64(p50[0]), "x-echo-on/off-p50")
	b.ReportMetric(float64(p50[3])/float64(p50[2]), "x-stdio-on/off-p50")
	b.ReportMetric(float64(p50[4])/float64(p50[0]), "x-echo-metrics/off-p50")
	b.ReportMetric(float64(p50[5])/float64(p50[2]), "x-stdio-metrics/off-p50")
}
