package extmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// directP50 keeps the direct go-sdk p50 of each protocol path, so that
// the other paths of the same run report their ratio to it.
var directP50 sync.Map

// BenchmarkCall measures one echo call to the stdio notes server: directly
// with a go-sdk client, and through ext-mcp in process and over the gRPC
// carrier (descriptor passing, as the host runs it), on both protocol
// paths: pinned 2025-11-25 and "latest" (2026-07-28 with go-sdk servers).
// It reports p50 and p99 per call and the ratio of each p50 to the direct
// one of the same protocol.
func BenchmarkCall(b *testing.B) {
	needBins(b)
	for _, pv := range []string{"2025-11-25", "latest"} {
		b.Run("direct/"+pv, func(b *testing.B) {
			cmd := exec.Command(bins.notes)
			opts := &mcp.ClientSessionOptions{ProtocolVersion: pv}
			if pv == "latest" {
				opts.ProtocolVersion = ""
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
				&mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			args := json.RawMessage(`{"text":"hi"}`)
			p50 := measure(b, func() error {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: args})
				if err == nil && res.IsError {
					err = fmt.Errorf("error result")
				}
				return err
			})
			directP50.Store(pv, p50)
		})
		for _, carrier := range []string{"inprocess", "grpc-fd", "grpc"} {
			b.Run(carrier+"/"+pv, func(b *testing.B) {
				f := newFixture(b, carrier, fmt.Sprintf(`{"mcpServers": {"notes": {"command": %q, "protocolVersion": %q}}}`, bins.notes, pv), nil)
				f.activate("alice")
				tc := f.e.(ext.ToolCaller)
				req := &ext.CallToolRequest{User: "alice", Name: "notes/echo", Arguments: json.RawMessage(`{"text":"hi"}`)}
				p50 := measure(b, func() error {
					res, err := tc.CallTool(context.Background(), req)
					if err == nil && res.IsError {
						err = fmt.Errorf("error result %s", res.Text())
					}
					return err
				})
				if d, ok := directP50.Load(pv); ok {
					b.ReportMetric(float64(p50)/float64(d.(time.Duration)), "x-direct-p50")
				}
			})
		}
	}
}

// BenchmarkCallParallel measures throughput with 8 callers through the
// gRPC carrier, one user, one stdio connection.
func BenchmarkCallParallel(b *testing.B) {
	needBins(b)
	for _, pv := range []string{"2025-11-25", "latest"} {
		b.Run(pv, func(b *testing.B) {
			f := newFixture(b, "grpc-fd", fmt.Sprintf(`{"mcpServers": {"notes": {"command": %q, "protocolVersion": %q}}}`, bins.notes, pv), nil)
			f.activate("alice")
			tc := f.e.(ext.ToolCaller)
			req := &ext.CallToolRequest{User: "alice", Name: "notes/echo", Arguments: json.RawMessage(`{"text":"hi"}`)}
			b.SetParallelism(4) // 2 cores × 4 = 8 callers
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tc.CallTool(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}

// measure runs call b.N times after a warm-up and reports p50 and p99.
func measure(b *testing.B, call func() error) time.Duration {
	b.Helper()
	for range 200 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(d)
	p50, p99 := d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
	return p50
}

var _ = extmcp.DefaultProtocolVersion

// BenchmarkActivation activates a fresh user with N stdio servers (a
// token stored for each) over the gRPC carrier with passed descriptors,
// as the host runs ext-mcp, and retires them after. It reports the host
// round trips per activation (counted by the FakeHost: 2N+2) beside the
// count of the code before ConnectService carried the spec and the plan
// bound the credentials (N²+6N+2: 9 and 162, counted by
// TestActivationRoundTrips on the code before), and the time per
// activation (ns/op), which includes starting N server processes.
func BenchmarkActivation(b *testing.B) {
	needBins(b)
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			f := newFixture(b, "grpc-fd", stdioConfig(n), nil)
			ul := f.e.(ext.UserLifecycle)
			var trips int64
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				user := fmt.Sprintf("u%d", i)
				for s := range n {
					f.setSecret(user, extmcp.TokenSecret(fmt.Sprintf("s%d", s)), "tok-"+user)
				}
				before := f.h.RoundTrips()
				b.StartTimer()
				if err := ul.Activate(context.Background(), user); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				trips += f.h.RoundTrips() - before
				if err := ul.Retire(context.Background(), user, ""); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
			b.ReportMetric(float64(n*n+6*n+2), "round-trips-before/op")
		})
	}
}
