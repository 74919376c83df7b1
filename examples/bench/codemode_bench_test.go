package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// BenchmarkCodeMode measures code mode (ext-codemode) against its
// baselines in the same run, on the real binaries over /mcp, with the
// notes server twice: "notes" direct, "cm" the same tools as codemode
// (its server opened to code):
//   - direct: notes__echo called straight over /mcp (the baseline);
//   - script-0: code__run returning 1 (a script's cold start: a new VM);
//   - script-20: code__run making 20 inner calls of cm/echo, one after
//     the other; per-inner-call-µs is (script-20 − script-0)/20, and
//     ×direct its ratio to the direct call (target ≤ 1.1);
//   - direct-during-hostile: the direct call while another session runs
//     endless and allocating scripts (×direct: against the quiet p50);
//   - description: code__run's description bytes against the tools/list
//     entries of the same tools listed directly (the context saved).
func BenchmarkCodeMode(b *testing.B) {
	agenthost := testbin.Build(b, pkg+"host/cmd/agenthost")
	extMCP := testbin.Build(b, pkg+"ext-mcp/cmd/agenthost-ext-mcp")
	codemode := testbin.Build(b, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	notes := testbin.Build(b, pkg+"examples/servers/notes")
	dir := b.TempDir()
	cfg := fmt.Sprintf(`{"listen":"127.0.0.1:0","dataDir":%q,"secrets":{"backend":"memory"},"audit":{"off":true},
		"extensions":{"mcp":{"path":%q,"config":{"mcpServers":{"notes":{"command":%q},"cm":{"command":%q,"tools":{"*":"codemode"}}}}},
		"code":{"path":%q,"config":{"openServers":["cm"],"maxCalls":100,"cpuSeconds":2}}}}`,
		filepath.Join(dir, "data"), extMCP, notes, notes, codemode)
	s := serveConfig(b, agenthost, cfg)
	cs := s.connect(b)
	ctx := context.Background()

	var desc int
	var direct int
	var count int
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			b.Fatal(err)
		}
		if tool.Name == "code__run" {
			desc = len(tool.Description)
		}
		if strings.HasPrefix(tool.Name, "notes__") {
			j, _ := json.Marshal(tool)
			direct += len(j)
			count++
		}
	}
	if desc == 0 {
		b.Fatal("no code__run listed")
	}
	script := func(code string) func() error {
		return func() error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code__run", Arguments: map[string]any{"code": code}})
			if err != nil {
				return err
			}
			if res.IsError {
				return fmt.Errorf("code__run: %v", res.Content)
			}
			return nil
		}
	}
	var p50s = map[string]float64{}
	b.Run("direct", func(b *testing.B) {
		p50s["direct"], _ = measure(b, toolCall(cs, "notes__echo"))
	})
	b.Run("script-0", func(b *testing.B) {
		p50s["script-0"], _ = measure(b, script(`return 1`))
	})
	b.Run("script-20", func(b *testing.B) {
		p50s["script-20"], _ = measure(b, script(`for (let i = 0; i < 20; i++) await tools.cm.echo({text: "hi"}); return 1`))
		if d, z := p50s["direct"], p50s["script-0"]; d > 0 && z > 0 {
			per := (p50s["script-20"] - z) / 20
			b.ReportMetric(per, "per-inner-call-µs")
			b.ReportMetric(per/d, "×direct")
		}
	})
	b.Run("direct-during-hostile", func(b *testing.B) {
		// Another session of the user runs endless loops (each to its CPU
		// budget) and allocating scripts all along; the direct call's p50
		// beside the quiet one above.
		hostile := s.connect(b)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				code := "for (;;) {}"
				if i%2 == 1 {
					code = "const a = []; for (;;) a.push('x'.repeat(10000) + a.length);"
				}
				_, _ = hostile.CallTool(ctx, &mcp.CallToolParams{Name: "code__run", Arguments: map[string]any{"code": code}})
			}
		}()
		p, _ := measure(b, toolCall(cs, "notes__echo"))
		close(stop)
		_ = hostile.Close() // ends the script in flight
		<-done
		if d := p50s["direct"]; d > 0 {
			b.ReportMetric(p/d, "×direct")
		}
	})
	b.Run("description", func(b *testing.B) {
		for range b.N {
		}
		b.ReportMetric(float64(desc), "code-run-description-bytes")
		b.ReportMetric(float64(direct), "direct-listing-bytes")
		b.ReportMetric(float64(count), "tools")
		b.ReportMetric(float64(desc)/float64(direct), "×direct")
	})
}
