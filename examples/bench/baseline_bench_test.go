package bench_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// buildRef builds the agenthost and ext-mcp binaries of git ref (a branch,
// tag or commit of this repository) from `git archive`, or skips when
// there is no git or no such ref.
func buildRef(b *testing.B, ref string) (agenthost, extMCP string) {
	b.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Skipf("SKIPPING THE BEFORE/AFTER BENCHMARK: no git checkout to take the baseline %q from: %v", ref, err)
	}
	dir := b.TempDir()
	archive := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", ref)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	untar.Stdin = pipe
	var stderr strings.Builder
	archive.Stderr = &stderr
	if err := untar.Start(); err != nil {
		b.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		b.Skipf("SKIPPING THE BEFORE/AFTER BENCHMARK: git archive %s: %v %s", ref, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		b.Fatal(err)
	}
	build := func(p string) string {
		out := filepath.Join(dir, "bin", filepath.Base(p))
		cmd := exec.Command("go", "build", "-o", out, pkg+p)
		cmd.Dir = dir // its own go.work
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("building %s of %s: %v\n%s", p, ref, err, o)
		}
		return out
	}
	return build("host/cmd/agenthost"), build("ext-mcp/cmd/agenthost-ext-mcp")
}

// defaultBaseline is the last commit before the endpoint served more than
// tools and bounded its sessions (issues 9 and 10): the "before" of the
// before/after benchmarks when $BENCH_BASELINE names no other ref.
const defaultBaseline = "8b1137c"

func baselineRef() string { return cmp.Or(os.Getenv("BENCH_BASELINE"), defaultBaseline) }

// BenchmarkEndpointBeforeAfter compares the plain tools/call of /mcp on the
// real path (agenthost serve → ext-mcp → the notes stdio server, tool
// echo) of this tree's binaries ("after") and of a baseline's ("before":
// the git ref in $BENCH_BASELINE, default [defaultBaseline], built in this run), both
// running at once. The two take turns in chunks of 50 sequential calls (b.N
// each, for p50 and p99) and in rounds of 8 concurrent callers (for
// calls/s), so that the machine's other load weighs on both alike. It
// reports each side's figures and after/before ratios; the target is a
// p50 ratio ≤ 1.03. Run with -benchtime=3000x.
func BenchmarkEndpointBeforeAfter(b *testing.B) {
	ref := baselineRef()
	// BENCH_VERSION=latest: both clients unpinned (the stateless
	// 2026-07-28); by default pinned to 2025-11-25.
	version := "2025-11-25"
	if os.Getenv("BENCH_VERSION") == "latest" {
		version = ""
	}
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	beforeHost, beforeExt := buildRef(b, ref)
	sides := []struct {
		name string
		cs   *mcp.ClientSession
	}{
		{"before", serveHost(b, beforeHost, beforeExt, notes).connectVersion(b, version)},
		{"after", serveHost(b, testbin.Build(b, pkg+"host/cmd/agenthost"), testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp"), notes).connectVersion(b, version)},
	}
	res := interleave(b, []side{
		{"before", toolCall(sides[0].cs, "notes__echo")},
		{"after", toolCall(sides[1].cs, "notes__echo")},
	})
	p50, perSec := []float64{res[0].p50, res[1].p50}, []float64{res[0].perSec, res[1].perSec}
	b.ReportMetric(p50[1]/p50[0], "after/before-p50")
	b.ReportMetric(perSec[1]/perSec[0], "after/before-calls/s")
	b.Logf("baseline %s: p50 %.0f µs → %.0f µs (×%.3f), %.0f → %.0f calls/s (×%.3f)",
		ref, p50[0], p50[1], p50[1]/p50[0], perSec[0], perSec[1], perSec[1]/perSec[0])
}

// side is one path a comparison measures: a name and one call.
type side struct {
	name string
	call func() error
}

// figures are a side's measured p50 (µs), throughput (calls/s with 8
// callers) and the CPU time its processes (this one's descendants, not
// the clients) spent per call with 8 callers (µs; 0 where /proc cannot
// tell).
type figures struct{ p50, perSec, cpu float64 }

// toolCall calls tool name with {"text":"hello"} on cs; an error result is
// an error.
func toolCall(cs *mcp.ClientSession, name string) func() error {
	args := map[string]any{"text": "hello"}
	return func() error {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err == nil && res.IsError {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
}

// interleave measures every side in one run, taking turns so that the
// machine's other load weighs on all alike: after 200 warm-up calls each,
// chunks of 50 sequential calls per side (b.N calls each, for p50 and p99),
// then 6 rounds in which each side in turn serves 8 concurrent callers
// (for calls/s, and the CPU time the side's processes spent per call in
// those rounds). It reports each side's figures under its name.
func interleave(b *testing.B, sides []side) []figures {
	b.Helper()
	for _, s := range sides {
		for range 200 {
			if err := s.call(); err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
		}
	}
	const chunk = 50
	lat := make([][]time.Duration, len(sides))
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		for i, s := range sides {
			for range min(chunk, b.N-done) {
				start := time.Now()
				if err := s.call(); err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}
	}
	b.StopTimer()

	const rounds, callers = 6, 8
	per := max(b.N, 1200) / rounds / callers
	elapsed := make([]time.Duration, len(sides))
	cpu := make([]cpuSnapshot, len(sides))
	for i := range cpu {
		cpu[i] = cpuSnapshot{}
	}
	for range rounds {
		for i, s := range sides {
			before := takeCPU()
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			start := time.Now()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := s.call(); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed[i] += time.Since(start)
			cpu[i].add(before, takeCPU())
			close(errs)
			for err := range errs {
				b.Fatalf("%s: %v", s.name, err)
			}
		}
	}
	out := make([]figures, len(sides))
	for i, s := range sides {
		slices.Sort(lat[i])
		out[i] = figures{
			p50:    float64(lat[i][len(lat[i])/2].Nanoseconds()) / 1e3,
			perSec: float64(rounds*per*callers) / elapsed[i].Seconds(),
		}
		b.ReportMetric(out[i].p50, s.name+"-p50-µs")
		b.ReportMetric(float64(lat[i][min(len(lat[i])-1, len(lat[i])*99/100)].Nanoseconds())/1e3, s.name+"-p99-µs")
		b.ReportMetric(out[i].perSec, s.name+"-calls/s")
		calls := float64(rounds * per * callers)
		var total float64
		var parts []string
		for _, exe := range slices.Sorted(maps.Keys(cpu[i])) {
			us := float64(cpu[i][exe]) / 1e3 / calls
			if exe != "client" {
				total += us
			}
			if us >= 1 {
				parts = append(parts, fmt.Sprintf("%s %.0f", exe, us))
			}
		}
		out[i].cpu = total
		if total > 0 {
			b.ReportMetric(total, s.name+"-cpu-µs/call")
			b.Logf("%s: CPU per call with %d callers (µs): %s", s.name, callers, strings.Join(parts, ", "))
		}
	}
	return out
}

// rssKiB is a process's resident set (Linux).
func rssKiB(b *testing.B, pid int) float64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Skipf("SKIPPING: no /proc/%d/status to read the host's memory from: %v", pid, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib float64
			if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kib); err == nil {
				return kib
			}
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// BenchmarkSessionFlood repeats the session-flood attack on the real
// `agenthost serve` of the baseline ($BENCH_BASELINE, default [defaultBaseline]) and of
// this tree: one token sends 3,000 initialize requests and nothing else.
// It reports each host's resident memory growth (KiB in all, and per
// initialize), and for this tree's the growth over 9,000 more after 3,000
// more (its sessions are capped: memory grows only up to the garbage
// collector's target, then stays). Run with -benchtime=1x.
func BenchmarkSessionFlood(b *testing.B) {
	const initializes = 3000
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	beforeHost, beforeExt := buildRef(b, baselineRef())
	hosts := []struct {
		name string
		s    served
	}{
		{"before", serveHost(b, beforeHost, beforeExt, notes)},
		{"after", serveHost(b, testbin.Build(b, pkg+"host/cmd/agenthost"), testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp"), notes)},
	}
	const body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for range b.N {
		for _, h := range hosts {
			// One session first: the user's tools are loaded, the host warm.
			initialize := func() {
				req, _ := http.NewRequest(http.MethodPost, h.s.url+"/mcp", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+h.s.token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: initialize: HTTP %d", h.name, resp.StatusCode)
				}
			}
			initialize()
			time.Sleep(time.Second)
			before := rssKiB(b, h.s.pid)
			for range initializes {
				initialize()
			}
			time.Sleep(time.Second)
			grown := rssKiB(b, h.s.pid) - before
			b.ReportMetric(grown, h.name+"-RSS-growth-KiB")
			b.ReportMetric(grown/initializes, h.name+"-KiB/initialize")
			b.Logf("%s: %d initializes by one token: resident memory grew %.0f KiB (%.1f KiB each)", h.name, initializes, grown, grown/initializes)
			if h.name == "after" {
				// Bounded: once the collector's target is reached, more
				// initializes add (next to) nothing. 3,000 to get there, then
				// 9,000 measured.
				for range initializes {
					initialize()
				}
				time.Sleep(time.Second)
				at := rssKiB(b, h.s.pid)
				for range 3 * initializes {
					initialize()
				}
				time.Sleep(time.Second)
				more := rssKiB(b, h.s.pid) - at
				b.ReportMetric(more, "after-RSS-growth-last-9000-KiB")
				b.Logf("after: %d more initializes (%d in all): resident memory grew %.0f KiB", 3*initializes, 5*initializes, more)
			}
		}
	}
}
