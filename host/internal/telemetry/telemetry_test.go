package telemetry_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/host/internal/telemetry"
)

func TestCapper(t *testing.T) {
	c := telemetry.NewCapper(2)
	for i, want := range []string{"a", "b", telemetry.Other, "a", "b", telemetry.Other} {
		v := []string{"a", "b", "c", "a", "b", "d"}[i]
		if got := c.Value(v); got != want {
			t.Errorf("Value(%q) = %q, want %q", v, got, want)
		}
	}
}

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestExtractMeta(t *testing.T) {
	ctx := telemetry.ExtractMeta(context.Background(), json.RawMessage(`{"other":1,"traceparent":"`+parent+`","tracestate":"k=v"}`))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() || sc.TraceState().Get("k") != "v" {
		t.Fatalf("span context %+v", sc)
	}
	for _, m := range []string{``, `null`, `{"other":1}`, `{"traceparent":"nonsense"}`, `{"traceparent":7}`, `[1]`} {
		if sc := trace.SpanContextFromContext(telemetry.ExtractMeta(context.Background(), json.RawMessage(m))); sc.IsValid() {
			t.Errorf("meta %s: span context %v, want none", m, sc)
		}
	}
}

func TestInjectMeta(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("1111111111111111")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
	for _, in := range []string{``, `null`, `{"keep":"x","traceparent":"` + parent + `","tracestate":"old=1"}`} {
		out, err := telemetry.InjectMeta(ctx, json.RawMessage(in))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if m["traceparent"] != want || m["tracestate"] != nil || (strings.Contains(in, "keep") && m["keep"] != "x") {
			t.Errorf("InjectMeta(%s) = %s", in, out)
		}
	}
	// No span: meta unchanged when it has no trace context, which is
	// removed when it has.
	if out, _ := telemetry.InjectMeta(context.Background(), json.RawMessage(`{"a":1}`)); string(out) != `{"a":1}` {
		t.Errorf("no span: %s", out)
	}
	if out, _ := telemetry.InjectMeta(context.Background(), json.RawMessage(`{"traceparent":"`+parent+`"}`)); out != nil {
		t.Errorf("no span, stale traceparent: %s", out)
	}
	if _, err := telemetry.InjectMeta(ctx, json.RawMessage(`[1]`)); err == nil {
		t.Error("an array _meta: no error")
	}
}

func TestNilIsOff(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Config{}, nil)
	if err != nil || tel != nil {
		t.Fatalf("New(off) = %v, %v", tel, err)
	}
	meta := json.RawMessage(`{"traceparent":"` + parent + `"}`)
	ctx, out, sp := tel.StartCall(context.Background(), telemetry.Call{Tool: "s/t"}, meta)
	if string(out) != string(meta) || sp != nil || ctx != context.Background() || tel.Handler() != nil {
		t.Fatal("a nil T changed something")
	}
	sp.End("x")
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestHistogramLabelsCapped: past MaxSeries distinct tools (and servers),
// calls are counted under "other" in the Prometheus text; no series per
// further tool appears.
func TestHistogramLabelsCapped(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Config{Metrics: true, MaxSeries: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	for _, tool := range []string{"a/x", "a/y", "b/z", "c/w", "a/x"} {
		_, _, sp := tel.StartCall(context.Background(), telemetry.Call{Tool: tool}, nil)
		sp.End("")
	}
	_, _, sp := tel.StartCall(context.Background(), telemetry.Call{Tool: "a/x"}, nil)
	sp.End("tool_error")
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`mcp_server_operation_duration_seconds_count{agenthost_server="a",gen_ai_tool_name="a/x",mcp_method_name="tools/call"} 2`,
		`mcp_server_operation_duration_seconds_count{agenthost_server="a",gen_ai_tool_name="a/y",mcp_method_name="tools/call"} 1`,
		`mcp_server_operation_duration_seconds_count{agenthost_server="b",gen_ai_tool_name="other",mcp_method_name="tools/call"} 1`,
		`mcp_server_operation_duration_seconds_count{agenthost_server="other",gen_ai_tool_name="other",mcp_method_name="tools/call"} 1`,
		`mcp_server_operation_duration_seconds_count{agenthost_server="a",error_type="tool_error",gen_ai_tool_name="a/x",mcp_method_name="tools/call"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	for _, no := range []string{"b/z", "c/w", `"c"`} {
		if strings.Contains(body, no) {
			t.Errorf("/metrics names %s past the cap", no)
		}
	}
}
