package extmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// telemetry is ext-mcp's OpenTelemetry (issue 21): a client span per
// tools/call it makes to a server, child of the trace context in the
// call's _meta (the host's span) and passed on in the _meta the server
// gets, and the mcp.client.operation.duration histogram by server
// (capped) and error.type; exported over OTLP/HTTP. nil is off. Safe for
// concurrent use.
type telemetry struct {
	tracer   trace.Tracer
	dur      metric.Float64Histogram
	mu       sync.Mutex
	servers  map[string]bool // label values kept, at most maxServerLabels
	shutdown []func(context.Context) error
}

// maxServerLabels caps the distinct server label values; the others are
// "other".
const maxServerLabels = 200

// newTelemetry starts the exporters when the process's environment names
// an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, as the operator sets it
// in the extension's env); nil otherwise.
func newTelemetry(ctx context.Context) (*telemetry, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	res := resource.NewSchemaless(attribute.String("service.name", "agenthost-ext-mcp"))
	te, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(te), sdktrace.WithResource(res))
	t := &telemetry{tracer: tp.Tracer("github.com/agenthost/agenthost/ext-mcp"), servers: map[string]bool{},
		shutdown: []func(context.Context) error{tp.Shutdown}}
	me, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("OTLP metric exporter: %w", err), t.close(ctx))
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me)), sdkmetric.WithResource(res))
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.dur, err = mp.Meter("github.com/agenthost/agenthost/ext-mcp").Float64Histogram("mcp.client.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("The duration of the MCP requests ext-mcp sent to servers."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("duration histogram: %w", err), t.close(ctx))
	}
	return t, nil
}

// close flushes and stops the exporters.
func (t *telemetry) close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

func (t *telemetry) serverLabel(server string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.servers[server] {
		return server
	}
	if len(t.servers) >= maxServerLabels {
		return "other"
	}
	t.servers[server] = true
	return server
}

// startCall starts the client span of a call of tool on server: req comes
// back as a copy whose _meta carries the span's trace context; end
// records the call (errType "" for success).
func (t *telemetry) startCall(ctx context.Context, server string, req *ext.CallToolRequest) (context.Context, *ext.CallToolRequest, func(errType string)) {
	if t == nil {
		return ctx, req, func(string) {}
	}
	start := time.Now()
	ctx = extractMeta(ctx, req.Meta)
	ctx, span := t.tracer.Start(ctx, "tools/call "+req.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", req.Name),
			attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("agenthost.server", server)))
	if m, err := injectMeta(ctx, req.Meta); err == nil {
		r := *req
		r.Meta = m
		req = &r
	}
	label := t.serverLabel(server)
	return ctx, req, func(errType string) {
		attrs := []attribute.KeyValue{attribute.String("mcp.method.name", "tools/call"), attribute.String("agenthost.server", label)}
		if errType != "" {
			attrs = append(attrs, attribute.String("error.type", errType))
			span.SetAttributes(attribute.String("error.type", errType))
			span.SetStatus(codes.Error, errType)
		}
		span.End()
		t.dur.Record(context.Background(), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
	}
}

var propagator = propagation.TraceContext{}

// extractMeta is ctx with the remote span context of _meta's traceparent
// and tracestate (ctx as it is when there is none); the host reads it
// the same way (both through ext/mcpwire).
func extractMeta(ctx context.Context, meta json.RawMessage) context.Context {
	tp, ts := mcpwire.TraceContext(meta)
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": ts})
}

// injectMeta is the _meta object meta with traceparent and tracestate
// set to ctx's span context, its other fields kept; meta as it is when
// ctx has none.
func injectMeta(ctx context.Context, meta json.RawMessage) (json.RawMessage, error) {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	if c["traceparent"] == "" {
		return meta, nil
	}
	return mcpwire.WithTraceContext(meta, c["traceparent"], c["tracestate"])
}

// callErrorType is the error.type of a call's outcome.
func callErrorType(res *ext.CallToolResult, err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case err != nil:
		return "_OTHER"
	case res != nil && res.IsError:
		return "tool_error"
	}
	return ""
}
