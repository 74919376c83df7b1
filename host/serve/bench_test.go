package serve_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/serve"
)

// benchStack is a host with the greeter extension (in process: the
// host's own cost is the whole call, the worst case for any overhead)
// served on a loopback port, and a go-sdk client session per user
// (2025-11-25, the stateful path).
type benchStack struct {
	s  *serve.Server
	tr *http.Transport
}

func newBenchStack(b *testing.B, cfg *host.Config) *benchStack {
	b.Helper()
	cfg.DataDir = filepath.Join(b.TempDir(), "data")
	cfg.Secrets.Backend = "memory"
	h, err := host.New(context.Background(), cfg, &host.Options{Extensions: map[string]host.InProcess{"greet": {Extension: greeter{}}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		<-done
	})
	return &benchStack{s: s, tr: tr}
}

func (st *benchStack) session(b *testing.B, user string) *mcp.ClientSession {
	b.Helper()
	ctx := context.Background()
	tok, err := st.s.CreateToken(ctx, user, "bench")
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: st.s.URL() + "/mcp", HTTPClient: &http.Client{Transport: bearer(st.tr, tok)}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

func hello(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet__hello", Arguments: map[string]any{"name": "bench"}})
	if err == nil && res.IsError {
		err = errors.New("the call failed")
	}
	return err
}

// path is one way of making the same call; turns runs the paths in turns
// of 50 calls each (so the machine's drift hits them alike) and reports
// each path's p50 in µs.
type path struct {
	name   string
	call   func(context.Context) error
	before func() // called before each of the path's turns (nil: none)
	after  func()
}

func turns(b *testing.B, paths []path) []time.Duration {
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
			if p.before != nil {
				p.before()
			}
			for range min(chunk, b.N-done) {
				start := time.Now()
				if err := p.call(ctx); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
				lat[i] = append(lat[i], time.Since(start))
			}
			if p.after != nil {
				p.after()
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
	return p50
}

// BenchmarkCallAuditMetrics measures the per-call cost of the audit log
// and metrics on /mcp: the same tools/call through `serve` to an
// in-process tool with both off (the baseline), the audit log only,
// metrics only (/metrics; no trace export), and both, in turns in one
// run; it reports each p50 and the ratios to the baseline (issue 21's
// target: both ≤ 1.05 at p50). Run with -benchtime=2000x.
func BenchmarkCallAuditMetrics(b *testing.B) {
	var paths []path
	for _, c := range []struct {
		name           string
		audit, metrics bool
	}{{"off", false, false}, {"audit", true, false}, {"metrics", false, true}, {"both", true, true}} {
		st := newBenchStack(b, &host.Config{Audit: host.AuditConfig{Off: !c.audit}, Telemetry: host.TelemetryConfig{Metrics: c.metrics}})
		cs := st.session(b, "alice")
		paths = append(paths, path{name: c.name, call: func(ctx context.Context) error { return hello(ctx, cs) }})
	}
	p50 := turns(b, paths)
	for i, name := range []string{"audit", "metrics", "both"} {
		b.ReportMetric(float64(p50[i+1])/float64(p50[0]), "x-"+name+"/off-p50")
	}
}

// BenchmarkRateLimitIsolation measures what rate limits cost a user and
// what another user's loop costs them: bob's same tools/call on /mcp
// (in-process tool, the worst case) on a host without limits (the
// baseline), on a host with limits (a user, a server and a tool limit
// that all apply to him, never reached), and on that host while alice
// loops flat out over her own limit (one client, every call refused),
// in turns in one run. It reports each p50, the ratios (issue 21's
// target: bob with alice looping within 1.10 of bob alone on the same
// host), and alice's refusals per second during her loop.
// Run with -benchtime=2000x.
func BenchmarkRateLimitIsolation(b *testing.B) {
	plain := newBenchStack(b, &host.Config{})
	limited := newBenchStack(b, &host.Config{Limits: host.LimitsConfig{
		Set: host.LimitSet{
			User:    &host.Limit{PerMinute: 60},
			Servers: map[string]host.Limit{"*": {PerMinute: 60, Concurrent: 16}},
			Tools:   map[string]host.Limit{"greet/*": {PerMinute: 60, Concurrent: 8}},
		},
		Overrides: map[string]host.LimitSet{"bob": {
			User:    &host.Limit{PerMinute: 1e9},
			Servers: map[string]host.Limit{"*": {PerMinute: 1e9, Concurrent: 16}},
			Tools:   map[string]host.Limit{"greet/*": {PerMinute: 1e9, Concurrent: 8}},
		}},
	}})
	bobPlain, bob, alice := plain.session(b, "bob"), limited.session(b, "bob"), limited.session(b, "alice")
	// alice's loop: started before each turn of that path, stopped after.
	var (
		stop     chan struct{}
		wg       sync.WaitGroup
		refused  atomic.Int64
		loopTime time.Duration
		started  time.Time
	)
	loop := func() {
		stop = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := hello(ctx, alice)
				var re *jsonrpc.Error
				if errors.As(err, &re) && re.Code == -32029 {
					refused.Add(1)
				} else if err != nil {
					b.Errorf("alice: %v", err)
					return
				}
			}
		}()
		// Wait until her loop is refused, so that the turn measures bob
		// beside it.
		for n := refused.Load(); refused.Load() == n; {
			time.Sleep(time.Millisecond)
		}
		started = time.Now()
	}
	unloop := func() {
		loopTime += time.Since(started)
		close(stop)
		wg.Wait()
	}
	// Drain alice's 60 first, outside the measure.
	for range 61 {
		_ = hello(context.Background(), alice)
	}
	p50 := turns(b, []path{
		{name: "no-limits", call: func(ctx context.Context) error { return hello(ctx, bobPlain) }},
		{name: "limits", call: func(ctx context.Context) error { return hello(ctx, bob) }},
		{name: "limits-alice-looping", call: func(ctx context.Context) error { return hello(ctx, bob) }, before: loop, after: unloop},
	})
	b.ReportMetric(float64(p50[1])/float64(p50[0]), "x-limits/no-limits-p50")
	b.ReportMetric(float64(p50[2])/float64(p50[1]), "x-looping/alone-p50")
	if loopTime > 0 {
		b.ReportMetric(float64(refused.Load())/loopTime.Seconds(), "alice-refused/s")
	}
}
