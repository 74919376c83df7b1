package e2e_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a small OTLP/HTTP collector: it keeps the spans posted
// to /v1/traces (protobuf) and accepts and drops the metrics.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	if r.URL.Path != "/v1/traces" {
		return // metrics: an empty response is success
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			o.spans = append(o.spans, ss.GetSpans()...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// child returns the received span whose parent is the span parent (hex),
// nil when none came yet.
func (o *otlpReceiver) child(parent string) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if hex.EncodeToString(s.GetParentSpanId()) == parent {
			return s
		}
	}
	return nil
}

// named returns the received span named name, nil when none came yet.
func (o *otlpReceiver) named(name string) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// TestMetricsAndTracesEndToEnd (issue 21): with telemetry on, a call
// through /mcp whose _meta carries the agent's traceparent is exported to
// an OTLP collector as a server span of that trace with the MCP semantic
// conventions, ext-mcp exports its client span (the host's child), the
// MCP server gets ext-mcp's span as parent in its own _meta (one trace
// from the agent to the server), and /metrics (operator
// token only) shows the call in mcp.server.operation.duration with its
// server and tool, and no user id.
func TestMetricsAndTracesEndToEnd(t *testing.T) {
	b := build(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close) // after the host stops (cleanups run last first)
	e := newEnv(t, b, nil, map[string]any{"telemetry": map[string]any{"metrics": true, "otlpEndpoint": collector.URL},
		"extensions": map[string]any{"mcp": map[string]any{"path": b.extMCP,
			"config": map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
			// ext-mcp exports its client spans where the operator says.
			"env": map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_BSP_SCHEDULE_DELAY": "50"}}}})
	e.serveEnv = []string{"OTEL_BSP_SCHEDULE_DELAY=50"} // export spans soon after they end
	e.startServe()
	userTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	opTok := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))

	const agentTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	// A stateless call (2026-07-28, go-sdk's choice) and one in a session.
	for i, version := range []string{"", "2025-11-25"} {
		agentSpan := fmt.Sprintf("00f067aa0ba902b%d", i)
		c, err := connectWith(t, e.url, userTok, nil, version)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes__trace", Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"}})
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("%q: notes__trace: %v %v", version, err, res)
		}
		// What the MCP server saw: the agent's trace, ext-mcp's span.
		seen := strings.Split(text(res), "-")
		if len(seen) != 4 || seen[1] != agentTrace || seen[2] == agentSpan {
			t.Fatalf("%q: the MCP server saw traceparent %q; want trace %s with ext-mcp's span as parent", version, text(res), agentTrace)
		}
		var sp *tracepb.Span
		eventually(t, "the collector receives the host's span", func() bool {
			sp = recv.child(agentSpan)
			return sp != nil
		})
		if got := hex.EncodeToString(sp.GetTraceId()); got != agentTrace {
			t.Errorf("%q: span trace id %s, want the agent's %s", version, got, agentTrace)
		}
		// ext-mcp's client span: the host's child, the server's parent.
		var cl *tracepb.Span
		eventually(t, "the collector receives ext-mcp's span", func() bool {
			cl = recv.child(hex.EncodeToString(sp.GetSpanId()))
			return cl != nil
		})
		if got := hex.EncodeToString(cl.GetSpanId()); got != seen[2] || cl.GetKind() != tracepb.Span_SPAN_KIND_CLIENT ||
			cl.GetName() != "tools/call trace" || hex.EncodeToString(cl.GetTraceId()) != agentTrace {
			t.Errorf("%q: ext-mcp's span %q (%v) id %s, but the MCP server's parent is %s", version, cl.GetName(), cl.GetKind(), got, seen[2])
		}
		if sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER || sp.GetName() != "tools/call notes/trace" {
			t.Errorf("%q: span %q of kind %v, want tools/call notes/trace, server", version, sp.GetName(), sp.GetKind())
		}
		for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "notes/trace"} {
			if got := spanAttr(sp, k); got != want {
				t.Errorf("%q: span attribute %s = %q, want %q", version, k, got, want)
			}
		}
		if got := spanAttr(sp, "mcp.protocol.version"); got == "" || (version != "" && got != version) {
			t.Errorf("%q: span's mcp.protocol.version %q", version, got)
		}
		if (spanAttr(sp, "mcp.session.id") != "") != (version != "") {
			t.Errorf("%q: span's mcp.session.id %q (only sessions have one)", version, spanAttr(sp, "mcp.session.id"))
		}
		if version != "" {
			// A session's other requests get spans too.
			c.names(t)
			eventually(t, "the collector receives a tools/list span", func() bool {
				sp := recv.named("tools/list")
				return sp != nil && spanAttr(sp, "mcp.method.name") == "tools/list" && spanAttr(sp, "mcp.session.id") != ""
			})
		}
	}

	// /metrics: the operator's only.
	if code, _ := e.api("GET", "/metrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: HTTP %d, want 401", code)
	}
	if code, _ := e.api("GET", "/metrics", userTok, ""); code != http.StatusForbidden {
		t.Errorf("/metrics with a user's token: HTTP %d, want 403", code)
	}
	families, body := scrapeMetrics(t, e, opTok)
	fam := families["mcp_server_operation_duration_seconds"]
	if fam == nil || fam.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("/metrics lacks the histogram mcp_server_operation_duration_seconds:\n%s", body)
	}
	var count uint64
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["agenthost_server"] == "notes" && l["gen_ai_tool_name"] == "notes/trace" && l["mcp_method_name"] == "tools/call" && l["error_type"] == "" {
			count += m.GetHistogram().GetSampleCount()
		}
	}
	if count != 2 {
		t.Errorf("the histogram counts %d calls of notes/trace, want 2:\n%s", count, body)
	}
	if !strings.Contains(body, `mcp_server_operation_duration_seconds_count{mcp_method_name="tools/list"}`) {
		t.Errorf("the histogram lacks the session's tools/list:\n%s", body)
	}
	if families["agenthost_mcp_sessions"] == nil {
		t.Errorf("/metrics lacks agenthost_mcp_sessions:\n%s", body)
	}
	// alice's notes server, connected, in the servers gauge by state.
	connected := 0.0
	for _, m := range families["agenthost_servers"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["agenthost_extension"] == "mcp" && l["agenthost_state"] == "connected" {
			connected += m.GetGauge().GetValue()
		}
	}
	if connected != 1 {
		t.Errorf("agenthost_servers{extension=mcp,state=connected} = %v, want 1:\n%s", connected, body)
	}
}

// scrapeMetrics reads /metrics with tok and parses it as Prometheus text
// (the families and the page); it fails the test when the page names
// alice (no user ids in labels).
func scrapeMetrics(t *testing.T, e *env, tok string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	code, body := e.api("GET", "/metrics", tok, "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d %s", code, body)
	}
	if strings.Contains(body, "alice") {
		t.Error("/metrics names a user")
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, body)
	}
	return fams, body
}
