package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
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
// tool echo), all paths running at once and measured in turns (see
// interleave), so that the shared machine's load weighs on each alike:
//   - direct: a go-sdk client calling the stdio server (no HTTP; the floor);
//   - proxy-gosdk: a plain go-sdk Streamable HTTP server in its own process
//     (examples/bench/oneproxy) whose tools call the stdio server with
//     go-sdk's defaults, with Go's default GC target and (-gogc400) with
//     ours (the proxy's own: its server runs with Go's default in both,
//     as every server here does);
//   - proxy-mcpgo: the same shape on mark3labs/mcp-go
//     (examples/bench/mcpgoproxy), as the popular proxies are built;
//   - agenthost: the real `agenthost serve` binary with the ext-mcp binary:
//     HTTP → host → call channel → ext-mcp → the stdio server (descriptors
//     passed); agenthost-2026: the same host to an unpinned client, which
//     speaks the stateless 2026-07-28 revision;
//   - agenthost-embedded: the same host with ext-mcp in its own process
//     (examples/bench/embedded, an embedder's build: host.Options.Extensions),
//     to tell what the process hop to ext-mcp costs;
//   - mcp-proxy: TBXark/mcp-proxy, the fastest public proxy (issue 20),
//     built from its source (see buildMCPProxy; skipped, loudly, when it
//     cannot be built), run from its JSON config as it is deployed.
//
// The targets (issue 11): agenthost's p50 ≤ 0.9× and its throughput ≥ 1.2×
// the fastest one-hop proxy of the same run, reported as
// "×p50-fastest-proxy" and "×calls/s-best-proxy". Run with
// -benchtime=3000x.
//
// BENCH_HOST_GOMAXPROCS sets GOMAXPROCS for `agenthost serve` (by
// default the host runs on half the CPUs; see its main).
//
// Every other client is pinned to 2025-11-25: an unpinned go-sdk client
// would speak 2026-07-28 to agenthost (and 2025-11-25 to the proxies,
// which refuse it).
func BenchmarkEndpointCall(b *testing.B) {
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	agenthost := testbin.Build(b, pkg+"host/cmd/agenthost")
	extMCP := testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp")
	oneproxy := testbin.Build(b, pkg+"examples/bench/oneproxy")
	mcpgoproxy := testbin.Build(b, pkg+"examples/bench/mcpgoproxy")
	embedded := testbin.Build(b, pkg+"examples/bench/embedded")
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.CommandTransport{Command: exec.Command(notes), TerminateDuration: time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = direct.Close() })
	host := serveHost(b, agenthost, extMCP, notes)
	sides := []side{
		{"direct", toolCall(direct, "echo")},
		// The proxies run as their own processes, as mcp-proxy does; the
		// go-sdk one once with Go's default GC target and once with ours.
		{"proxy-gosdk", toolCall(startProxy(b, oneproxy, notes, "GOGC=100"), "echo")},
		{"proxy-gosdk-gogc400", toolCall(startProxy(b, oneproxy, notes, "GOGC=400"), "echo")},
		{"proxy-mcpgo", toolCall(startProxy(b, mcpgoproxy, notes, mcpgoArgs()...), "echo")},
		{"agenthost", toolCall(host.connect(b), "notes__echo")},
		// What an unpinned go-sdk client gets: the stateless revision,
		// whose plain calls take the endpoint's fast path too (4 runs on
		// the 2-core VM: p50 1.11–1.16× the stateful one's, 0.75–1.00× its
		// calls/s; through go-sdk's stateless handler before, 1.50–1.63×
		// and 0.56–0.60×).
		{"agenthost-2026", toolCall(host.connectVersion(b, ""), "notes__echo")},
		{"agenthost-embedded", toolCall(startEmbedded(b, embedded, notes), "notes__echo")},
	}
	// The fastest public proxy (issue 20), built from its source.
	if bin, why := buildMCPProxy(b); why != "" {
		b.Logf("SKIPPING THE TBXark/mcp-proxy BASELINE: it could not be built: %s", why)
	} else {
		sides = append(sides, side{"mcp-proxy", toolCall(startMCPProxy(b, bin, notes), "echo")})
	}
	res := map[string]figures{}
	for i, f := range interleave(b, sides) {
		res[sides[i].name] = f
	}
	ours, stateless := res["agenthost"], res["agenthost-2026"]
	best := figures{p50: math.Inf(1)}
	lean := math.Inf(1)
	for _, name := range []string{"proxy-gosdk", "proxy-gosdk-gogc400", "proxy-mcpgo", "mcp-proxy"} {
		if f, ok := res[name]; ok {
			best.p50, best.perSec = min(best.p50, f.p50), max(best.perSec, f.perSec)
			if f.cpu > 0 {
				lean = min(lean, f.cpu)
			}
		}
	}
	b.ReportMetric(ours.p50/best.p50, "×p50-fastest-proxy")
	b.ReportMetric(ours.perSec/best.perSec, "×calls/s-best-proxy")
	if !math.IsInf(lean, 1) {
		b.ReportMetric(ours.cpu/lean, "×cpu/call-leanest-proxy")
	}
	b.ReportMetric(stateless.p50/ours.p50, "2026-×p50-stateful")
	b.ReportMetric(stateless.perSec/ours.perSec, "2026-×calls/s-stateful")
	b.Logf("agenthost p50 %.0f µs, %.0f calls/s; fastest proxy p50 %.0f µs, best proxy %.0f calls/s → ×%.2f p50, ×%.2f calls/s (targets ≤ 0.9, ≥ 1.2); direct stdio p50 %.0f µs; stateless 2026-07-28 p50 %.0f µs, %.0f calls/s → ×%.2f p50, ×%.2f calls/s of the stateful",
		ours.p50, ours.perSec, best.p50, best.perSec, ours.p50/best.p50, ours.perSec/best.perSec, res["direct"].p50,
		stateless.p50, stateless.perSec, stateless.p50/ours.p50, stateless.perSec/ours.perSec)
	if mp, ok := res["mcp-proxy"]; ok {
		// Issue 20's targets against it: p50 ≤ 0.9×, throughput ≥ 1.1×, on
		// both revisions.
		b.ReportMetric(ours.p50/mp.p50, "×p50-mcp-proxy")
		b.ReportMetric(ours.perSec/mp.perSec, "×calls/s-mcp-proxy")
		b.ReportMetric(stateless.p50/mp.p50, "2026-×p50-mcp-proxy")
		b.ReportMetric(stateless.perSec/mp.perSec, "2026-×calls/s-mcp-proxy")
		emb := res["agenthost-embedded"]
		b.ReportMetric(emb.p50/mp.p50, "embedded-×p50-mcp-proxy")
		b.ReportMetric(emb.perSec/mp.perSec, "embedded-×calls/s-mcp-proxy")
		// One line: the testing package keeps a benchmark's first ten log
		// lines only (eight sides' CPU, the figures above, this).
		b.Logf("TBXark/mcp-proxy p50 %.0f µs, %.0f calls/s; agenthost pinned 2025-11-25 ×%.2f p50, ×%.2f calls/s; unpinned (2026-07-28) ×%.2f p50, ×%.2f calls/s (targets ≤ 0.9, ≥ 1.1); with ext-mcp in process ×%.2f p50, ×%.2f calls/s",
			mp.p50, mp.perSec, ours.p50/mp.p50, ours.perSec/mp.perSec, stateless.p50/mp.p50, stateless.perSec/mp.perSec,
			emb.p50/mp.p50, emb.perSec/mp.perSec)
	}
}

// startProxy runs a one-hop proxy binary in front of the stdio server
// notes until the benchmark ends (envOrFlags: "-flag"s for it, else
// environment), and connects a go-sdk client to it, pinned to 2025-11-25
// like every client here.
func startProxy(b *testing.B, bin, notes string, envOrFlags ...string) *mcp.ClientSession {
	b.Helper()
	args := []string{"-server", notes}
	var env []string
	for _, a := range envOrFlags {
		if strings.HasPrefix(a, "-") {
			args = append(args, a)
		} else {
			env = append(env, a)
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	f := startListening(b, cmd, 1)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: f[0]},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// startEmbedded runs examples/bench/embedded (the host with ext-mcp in
// process) in front of the stdio server notes until the benchmark ends,
// and connects a go-sdk client of its user, pinned to 2025-11-25.
func startEmbedded(b *testing.B, bin, notes string) *mcp.ClientSession {
	b.Helper()
	f := startListening(b, exec.Command(bin, "-server", notes), 2)
	return served{url: f[0], token: f[1]}.connect(b)
}

// startListening starts cmd, stopped (SIGTERM) when the benchmark ends,
// and returns the n fields after "listening on " of the first line it
// prints, as the baselines here print them.
func startListening(b *testing.B, cmd *exec.Cmd, n int) []string {
	b.Helper()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(strings.TrimPrefix(line, "listening on "))
	if err != nil || !strings.HasPrefix(line, "listening on ") || len(f) != n {
		b.Fatalf("%s said %q: %v", filepath.Base(cmd.Path), line, err)
	}
	return f
}

// mcpgoArgs are the mcp-go proxy's flags: -stateless when
// BENCH_MCPGO_STATELESS=1, to tell what TBXark/mcp-proxy's stateless mode
// is worth.
func mcpgoArgs() []string {
	if os.Getenv("BENCH_MCPGO_STATELESS") == "1" {
		return []string{"-stateless"}
	}
	return nil
}

// hostProfiles numbers the hosts' CPU profiles (BENCH_HOST_CPUPROFILE).
var hostProfiles atomic.Int64

// served is a running `agenthost serve`.
type served struct {
	url, token string // its base URL, and a token of user alice
	pid        int
}

// serveHost runs `agenthost serve` (the binary agenthost with the ext-mcp
// binary extMCP) with notes as an operator's stdio server, until the
// benchmark ends; more are further top-level config fields (JSON,
// `"name":value`).
func serveHost(b *testing.B, agenthost, extMCP, notes string, more ...string) served {
	b.Helper()
	dir := b.TempDir()
	cfg := fmt.Sprintf(`{"listen":"127.0.0.1:0","dataDir":%q,"secrets":{"backend":"memory"},
		"extensions":{"mcp":{"path":%q,"config":{"mcpServers":{"notes":{"command":%q}}}}}%s}`,
		filepath.Join(dir, "data"), extMCP, notes, strings.Join(append([]string{""}, more...), ","))
	return serveConfig(b, agenthost, cfg)
}

// serveConfig runs `agenthost serve` with the config cfg (JSON) until the
// benchmark ends, and makes a token of user alice.
func serveConfig(b *testing.B, agenthost, cfg string) served {
	b.Helper()
	cfgPath := filepath.Join(b.TempDir(), "agenthost.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	serveArgs := []string{"--config", cfgPath, "--log-level", "error", "serve"}
	if p := os.Getenv("BENCH_HOST_CPUPROFILE"); p != "" {
		// One file per host of the run: PATH.1, PATH.2, … in start order.
		serveArgs = append(serveArgs, "--cpuprofile", fmt.Sprintf("%s.%d", p, hostProfiles.Add(1)))
	}
	serve := exec.Command(agenthost, serveArgs...)
	if v := os.Getenv("BENCH_HOST_GOMAXPROCS"); v != "" {
		serve.Env = append(os.Environ(), "GOMAXPROCS="+v)
	}
	out, _ := serve.StdoutPipe()
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	i := strings.Index(line, " at ")
	if err != nil || i < 0 {
		b.Fatalf("serve said %q: %v", line, err)
	}
	tok, err := exec.Command(agenthost, "--config", cfgPath, "token", "create", "--user", "alice", "--name", "bench").Output()
	if err != nil {
		b.Fatal(err)
	}
	return served{url: strings.Fields(line[i+4:])[0], token: strings.TrimSpace(string(tok)), pid: serve.Process.Pid}
}

// connect opens a go-sdk client session of the host's user on its /mcp,
// pinned to 2025-11-25; it ends with the benchmark.
func (s served) connect(b *testing.B) *mcp.ClientSession { return s.connectVersion(b, "2025-11-25") }

// connectVersion is connect pinned to version ("": go-sdk's choice, the
// stateless 2026-07-28).
func (s served) connectVersion(b *testing.B, version string) *mcp.ClientSession {
	b.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: bearerRT{s.token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}
