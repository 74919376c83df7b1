package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// latencies records per-call durations and reports p50 and p99 beside the
// default ns/op, so each carrier prints its figure next to the baseline
// (the plain function call) in the same run.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	q := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkToolCall compares one tool call round trip through the Go API:
// a plain function call on the extension value (the floor), the in-process
// carrier, and the gRPC carrier to an extension process.
func BenchmarkToolCall(b *testing.B) {
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hello"}`)
	b.Run("plain-function", func(b *testing.B) {
		e := &testExt{}
		_ = e.Configure(ctx, &ext.ConfigureRequest{Host: nopHost{}})
		req := &ext.CallToolRequest{User: "alice", Name: "t/echo", Arguments: args}
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := e.CallTool(ctx, req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		lat.report(b)
	})
	run := func(b *testing.B, h *host.Host) {
		if _, err := h.Call(ctx, "alice", "", "t/echo", args); err != nil {
			b.Fatal(err)
		}
		lat := make(latencies, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := h.Call(ctx, "alice", "", "t/echo", args); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		lat.report(b)
	}
	b.Run("inprocess-carrier", func(b *testing.B) {
		h, err := host.New(ctx, &host.Config{DataDir: b.TempDir()}, &host.Options{
			Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		run(b, h)
	})
	b.Run("grpc-carrier", func(b *testing.B) {
		h, err := host.New(ctx, testConfig(b.TempDir(), nil), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		run(b, h)
	})
}

// BenchmarkColdStart measures an extension's launch to its first tool call
// result, with and without AutoMTLS (certificate generation dominates).
func BenchmarkColdStart(b *testing.B) {
	for _, mtls := range []bool{true, false} {
		name := "automtls"
		if !mtls {
			name = "no-mtls"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			lat := make(latencies, 0, b.N)
			for range b.N {
				dir := b.TempDir()
				start := time.Now()
				h, err := host.New(ctx, testConfig(dir, nil), &host.Options{DisableAutoMTLS: !mtls})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := h.Call(ctx, "alice", "", "t/echo", nil); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				_ = h.Close()
				b.StartTimer()
			}
			lat.report(b)
		})
	}
}

// nopHost is the minimum ext.Host for calling the extension value directly.
type nopHost struct{ ext.Host }

func (nopHost) SetSystemTools(context.Context, []ext.Tool) error { return nil }

// BenchmarkServiceRoundTrip measures a small line's round trip from inside
// an extension process to a per-user echo process: passed descriptors, the
// gRPC byte stream, and the same process spawned by the extension itself
// (the floor). The round trips run inside the extension; each sub-benchmark
// reports their p50 and p99.
func BenchmarkServiceRoundTrip(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts *host.Options
		self bool
	}{
		{"fd-passing", nil, false},
		{"grpc-stream", &host.Options{DisableFDPassing: true}, false},
		{"self-spawned-floor", nil, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, err := host.New(ctx, testConfig(b.TempDir(), nil), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			// Warm up: start the process.
			if _, err := h.Call(ctx, "alice", "", "t/svcbench", json.RawMessage(fmt.Sprintf(`{"n":10,"self":%v}`, c.self))); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			res, err := h.Call(ctx, "alice", "", "t/svcbench", json.RawMessage(fmt.Sprintf(`{"n":%d,"self":%v}`, b.N, c.self)))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if res, err = res.Fields(); err != nil {
				b.Fatal(err)
			}
			var q map[string]float64
			if err := json.Unmarshal(res.StructuredContent, &q); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(q["p50"], "p50-µs")
			b.ReportMetric(q["p99"], "p99-µs")
		})
	}
}

// BenchmarkAuditOverhead prints the per-call cost of the audit log: the
// same in-process tool call through the host with the audit log off (the
// baseline) and on, in one run.
func BenchmarkAuditOverhead(b *testing.B) {
	ctx := context.Background()
	args := json.RawMessage(`{"text":"hello"}`)
	for _, c := range []struct {
		name string
		off  bool
	}{{"audit-off", true}, {"audit-on", false}} {
		b.Run(c.name, func(b *testing.B) {
			h, err := host.New(ctx, &host.Config{DataDir: b.TempDir(), Audit: host.AuditConfig{Off: c.off}}, &host.Options{
				Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if _, err := h.Call(ctx, "alice", "", "t/echo", args); err != nil {
				b.Fatal(err)
			}
			lat := make(latencies, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := h.Call(ctx, "alice", "", "t/echo", args); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			lat.report(b)
			b.ReportMetric(float64(h.AuditStats().Dropped), "dropped")
		})
	}
}
