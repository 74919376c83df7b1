package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsQueueDepths (issue 21, "queue depths"): with the real
// binaries, /metrics parsed with the Prometheus text parser carries the
// audit writer's queue and dropped records, the approvals waiting (1
// while alice's destructive call waits) and the calls in flight by kind
// (1 tool call while notes/slow runs), with bounded labels and no user.
func TestMetricsQueueDepths(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"telemetry": map[string]any{"metrics": true}, "policy": map[string]any{"approveDestructive": true}})
	e.startServe()
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	c, err := connectWith(t, e.url, tok, nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	// A destructive call without elicitation waits for approval.
	if res, err := c.call(t, "notes__clear_notes", map[string]any{}); err != nil || !res.IsError {
		t.Fatalf("clear_notes without elicitation: %v %v; want a refusal waiting for approval", res, err)
	}
	// A slow call in flight while /metrics is scraped.
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__slow", Arguments: map[string]any{"duration": "1m"}})
		done <- err
	}()
	scrape := func() map[string]*dto.MetricFamily {
		fams, _ := scrapeMetrics(t, e, op)
		return fams
	}
	value := func(f *dto.MetricFamily, label, want string) (float64, bool) {
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				if label != "" && p.GetName() == label && p.GetValue() == want {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
				}
			}
			if label == "" {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	var fams map[string]*dto.MetricFamily
	eventually(t, "/metrics shows the slow call in flight", func() bool {
		fams = scrape()
		n, ok := value(fams["agenthost_calls_in_flight"], "agenthost_kind", "tool")
		return ok && n == 1
	})
	for _, kind := range []string{"prompt", "resource"} {
		if n, ok := value(fams["agenthost_calls_in_flight"], "agenthost_kind", kind); !ok || n != 0 {
			t.Errorf("agenthost_calls_in_flight{kind=%s} = %v (present %v), want 0", kind, n, ok)
		}
	}
	if n, ok := value(fams["agenthost_approvals_waiting"], "", ""); !ok || n != 1 {
		t.Errorf("agenthost_approvals_waiting = %v (present %v), want 1", n, ok)
	}
	if _, ok := value(fams["agenthost_audit_queue"], "", ""); !ok {
		t.Error("/metrics lacks agenthost_audit_queue")
	}
	if n, ok := value(fams["agenthost_audit_dropped_total"], "", ""); !ok || n != 0 {
		t.Errorf("agenthost_audit_dropped_total = %v (present %v), want 0", n, ok)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled slow call did not end")
	}
}
