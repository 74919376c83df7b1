package extmcp

import (
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestTraceMeta: the trace context of a call's _meta is read, and the
// span's replaces it in the _meta the server gets, the other fields kept.
func TestTraceMeta(t *testing.T) {
	in := json.RawMessage(`{"keep":1,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=b"}`)
	sc := trace.SpanContextFromContext(extractMeta(context.Background(), in))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("extracted %v", sc)
	}
	sid, _ := trace.SpanIDFromHex("1111111111111111")
	ctx := trace.ContextWithSpanContext(context.Background(), sc.WithSpanID(sid).WithRemote(false))
	out, err := injectMeta(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01" || m["keep"] != 1.0 || m["tracestate"] != "a=b" {
		t.Errorf("injected %s", out)
	}
	if out, _ := injectMeta(context.Background(), json.RawMessage(`{"keep":1}`)); string(out) != `{"keep":1}` {
		t.Errorf("no span: %s", out)
	}
}
