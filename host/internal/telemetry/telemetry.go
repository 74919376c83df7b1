// Package telemetry is the host's metrics and traces with OpenTelemetry:
// the MCP semantic conventions on a span and the mcp.server.operation.duration
// histogram for each tool call on /mcp, trace context taken from and put
// back into the call's params._meta (traceparent, tracestate), the
// Prometheus text of the host's metrics for /metrics, and OTLP/HTTP export
// of traces and metrics when the operator configures an endpoint.
//
// Off by default: a nil *T is valid and does nothing (StartCall hands
// back its arguments, at the cost of a nil check). A *T is safe for
// concurrent use; its owner calls Shutdown once, which flushes the
// exporters.
package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

// Config is the operator's telemetry block.
type Config struct {
	// Metrics serves the Prometheus text of the host's metrics at
	// /metrics (operator token).
	Metrics bool
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector
	// ("http://collector:4318"): traces go to /v1/traces and metrics to
	// /v1/metrics. Empty: OTEL_EXPORTER_OTLP_ENDPOINT when set, else no
	// export.
	OTLPEndpoint string
	// MaxSeries caps the distinct server and tool label values (default
	// [DefaultMaxSeries]); the others are counted as "other".
	MaxSeries int
	// Version is the host's, for the resource.
	Version string
}

// DefaultMaxSeries is the default cap on distinct tool label values.
const DefaultMaxSeries = 200

// Gauges are the host's current counts, read at each collection.
type Gauges struct {
	Sessions, ActiveUsers, Processes int
	// Servers counts the servers of the users the extensions report on
	// (their status), by extension and state: "quarantined",
	// "needs_sign_in" and the others an extension reports.
	Servers map[ServerState]int
	// PinsBlocked counts the tools held back by a pin since the host
	// started (README "Tool pinning"): a counter.
	PinsBlocked int64
	// RateLimited counts the calls refused by a rate limit since the
	// start, by the limit's kind ("user_rate", "tool_concurrency", ...;
	// never a user).
	RateLimited map[string]int64
	// AuditQueued is the audit records waiting for the writer;
	// AuditDropped those dropped with its queue full (a counter).
	AuditQueued  int
	AuditDropped int64
	// ApprovalsWaiting is the calls waiting for a person's approval.
	ApprovalsWaiting int
	// InFlight is the calls running now by kind ("tool", "prompt",
	// "resource": a fixed set).
	InFlight map[string]int64
}

// ServerState is an extension and one of its status states.
type ServerState struct{ Extension, State string }

// T is the host's telemetry; nil is off.
type T struct {
	tracer   trace.Tracer
	tracing  bool
	dur      metric.Float64Histogram
	policy   metric.Int64Counter // the tool policy's decisions
	reloads  metric.Int64Counter // the operator's file reloaded, by outcome
	tools    *Capper
	servers  *Capper
	states   *Capper  // extension and state of the servers gauge
	sets     sync.Map // setKey → its record option (attribute set): bounded by the cappers
	prom     http.Handler
	shutdown []func(context.Context) error
}

// New starts the telemetry cfg asks for; nil (and no error) when it asks
// for none. gauges, when set, is called at each collection of the host's
// gauges, with the collection's context.
func New(ctx context.Context, cfg Config, gauges func(context.Context) Gauges) (*T, error) {
	endpoint := cfg.OTLPEndpoint
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if !cfg.Metrics && endpoint == "" {
		return nil, nil
	}
	max := cfg.MaxSeries
	if max <= 0 {
		max = DefaultMaxSeries
	}
	t := &T{tools: NewCapper(max), servers: NewCapper(max), states: NewCapper(max), tracer: noop.NewTracerProvider().Tracer("")}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("agenthost"), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	var readers []sdkmetric.Option
	if cfg.Metrics {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.prom = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if endpoint != "" {
		base := strings.TrimSuffix(endpoint, "/")
		te, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(base+"/v1/traces"))
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter for %q: %w", base, err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(te), sdktrace.WithResource(res))
		t.tracer, t.tracing = tp.Tracer("github.com/agenthost/agenthost/host"), true
		t.shutdown = append(t.shutdown, tp.Shutdown)
		me, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics"))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("OTLP metric exporter for %q: %w", base, err), t.Shutdown(ctx))
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me)))
	}
	mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	m := mp.Meter("github.com/agenthost/agenthost/host")
	t.dur, err = m.Float64Histogram("mcp.server.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("The duration of MCP requests on /mcp, as the host served them."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("duration histogram: %w", err), t.Shutdown(ctx))
	}
	t.policy, err = m.Int64Counter("agenthost.policy.decisions", metric.WithDescription(
		"The tool policy's decisions on calls: denied, pending (refused, waiting for approval on the settings page), approved and declined (through the client's elicitation), once and window (approved on the settings page)."))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("policy counter: %w", err), t.Shutdown(ctx))
	}
	if t.reloads, err = m.Int64Counter("agenthost.reloads", metric.WithDescription(
		"Reloads of the operator's file (agenthost reload, SIGHUP) by outcome: ok or refused.")); err != nil {
		return nil, errors.Join(fmt.Errorf("reload counter: %w", err), t.Shutdown(ctx))
	}
	if gauges != nil {
		sess, _ := m.Int64ObservableGauge("agenthost.mcp.sessions", metric.WithDescription("Open sessions on /mcp."))
		users, _ := m.Int64ObservableGauge("agenthost.users.active", metric.WithDescription("Users with extensions' per-user state open."))
		procs, _ := m.Int64ObservableGauge("agenthost.service.processes", metric.WithDescription("Per-user service processes running."))
		servers, _ := m.Int64ObservableGauge("agenthost.servers", metric.WithDescription(
			"Servers of the active users by extension and state (quarantined, needs_sign_in, connected, ...)."))
		limited, _ := m.Int64ObservableCounter("agenthost.calls.rate_limited", metric.WithDescription(
			"Tool calls refused by a rate limit, by the limit's kind (user_rate, server_concurrency, tool_rate, ...)."))
		pinsBlocked, _ := m.Int64ObservableCounter("agenthost.pins.blocked", metric.WithDescription(
			"Tools held back by a pin (a changed or new definition under pin block), once per user, tool and definition."))
		auditQueued, _ := m.Int64ObservableGauge("agenthost.audit.queue", metric.WithDescription(
			"Audit records waiting in the writer's queue."))
		auditDropped, _ := m.Int64ObservableCounter("agenthost.audit.dropped", metric.WithDescription(
			"Audit records dropped because the writer's queue was full."))
		approvals, _ := m.Int64ObservableGauge("agenthost.approvals.waiting", metric.WithDescription(
			"Calls waiting for a person's approval."))
		inflight, _ := m.Int64ObservableGauge("agenthost.calls.in_flight", metric.WithDescription(
			"Calls running now, by kind: tool, prompt or resource."))
		if _, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
			g := gauges(ctx)
			o.ObserveInt64(auditQueued, int64(g.AuditQueued))
			o.ObserveInt64(auditDropped, g.AuditDropped)
			o.ObserveInt64(approvals, int64(g.ApprovalsWaiting))
			for kind, n := range g.InFlight {
				o.ObserveInt64(inflight, n, metric.WithAttributes(attribute.String("agenthost.kind", kind)))
			}
			o.ObserveInt64(pinsBlocked, g.PinsBlocked)
			for kind, n := range g.RateLimited {
				o.ObserveInt64(limited, n, metric.WithAttributes(attribute.String("agenthost.limit", kind)))
			}
			o.ObserveInt64(sess, int64(g.Sessions))
			o.ObserveInt64(users, int64(g.ActiveUsers))
			o.ObserveInt64(procs, int64(g.Processes))
			byLabel := map[ServerState]int{}
			for k, n := range g.Servers {
				byLabel[ServerState{t.states.Value(k.Extension), t.states.Value(k.State)}] += n
			}
			for k, n := range byLabel {
				o.ObserveInt64(servers, int64(n), metric.WithAttributes(
					attribute.String("agenthost.extension", k.Extension), attribute.String("agenthost.state", k.State)))
			}
			return nil
		}, sess, users, procs, servers, pinsBlocked, limited, auditQueued, auditDropped, approvals, inflight); err != nil {
			return nil, errors.Join(fmt.Errorf("gauges: %w", err), t.Shutdown(ctx))
		}
	}
	return t, nil
}

// Reloaded counts a reload of the operator's file that ended with
// outcome ("ok" or "refused"). A nil T counts nothing.
func (t *T) Reloaded(ctx context.Context, outcome string) {
	if t == nil {
		return
	}
	t.reloads.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// Handler serves the Prometheus text of the host's metrics; nil when
// metrics are off.
func (t *T) Handler() http.Handler {
	if t == nil {
		return nil
	}
	return t.prom
}

// Shutdown flushes and stops the exporters.
func (t *T) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// PolicyDecision counts one decision of the host's tool policy on a call
// (a bounded set of words: denied, pending, approved, declined, once,
// window; no user, no tool).
func (t *T) PolicyDecision(decision string) {
	if t == nil {
		return
	}
	t.policy.Add(context.Background(), 1, metric.WithAttributes(attribute.String("agenthost.decision", decision)))
}

// Call is what the endpoint knows of a request: a tool call, or (Method
// set, Tool empty) another MCP request.
type Call struct {
	// Method is the MCP method ("" means tools/call).
	Method string
	// Tool is the host's name of the tool, "server/tool".
	Tool string
	// Session is the Mcp-Session-Id ("" for stateless requests); Protocol
	// the session's protocol version.
	Session, Protocol string
	// Trace is the request's _meta to take the caller's trace context
	// from when it is not the meta StartCall gets (a stateless request's,
	// which is not passed on); nil: that meta.
	Trace json.RawMessage
}

// Span is one call in flight; End it once.
type Span struct {
	t      *T
	span   trace.Span
	start  time.Time
	method string
	server string
	tool   string
}

// StartCall starts the span and the timing of c: ctx and meta (the
// call's _meta without its progress token, raw) come back carrying the
// call's span as parent (meta's traceparent and tracestate replaced, when
// traces are exported). On a nil T, it hands back ctx and meta.
func (t *T) StartCall(ctx context.Context, c Call, meta json.RawMessage) (context.Context, json.RawMessage, *Span) {
	if t == nil {
		return ctx, meta, nil
	}
	method := c.Method
	if method == "" {
		method = "tools/call"
	}
	sp := &Span{t: t, start: time.Now(), method: method}
	if c.Tool != "" {
		server := c.Tool
		if i := strings.IndexByte(c.Tool, '/'); i >= 0 {
			server = c.Tool[:i]
		}
		sp.server, sp.tool = t.servers.Value(server), t.tools.Value(c.Tool)
	}
	if !t.tracing {
		return ctx, meta, sp
	}
	if c.Trace != nil {
		ctx = ExtractMeta(ctx, c.Trace)
	} else {
		ctx = ExtractMeta(ctx, meta)
	}
	attrs := []attribute.KeyValue{
		attribute.String("mcp.method.name", method),
		attribute.String("mcp.protocol.version", c.Protocol),
	}
	name := method
	if c.Tool != "" {
		attrs = append(attrs, attribute.String("gen_ai.tool.name", c.Tool), attribute.String("gen_ai.operation.name", "execute_tool"))
		name += " " + c.Tool
	}
	if c.Session != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", c.Session))
	}
	ctx, sp.span = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	if out, err := InjectMeta(ctx, meta); err == nil {
		meta = out
	}
	return ctx, meta, sp
}

// End records the call: errType is "" for success, else its error.type
// ("tool_error" for an error result, or the kind of failure).
func (s *Span) End(errType string) {
	if s == nil {
		return
	}
	s.t.dur.Record(context.Background(), time.Since(s.start).Seconds(), s.t.set(setKey{s.method, s.server, s.tool, errType}))
	if s.span != nil {
		if errType != "" {
			s.span.SetAttributes(attribute.String("error.type", errType))
			s.span.SetStatus(codes.Error, errType)
		}
		s.span.End()
	}
}

// setKey is the labels of one histogram series.
type setKey struct{ method, server, tool, errType string }

// set returns the record option of a series (its attribute set), made
// once: no allocation per call.
func (t *T) set(k setKey) metric.RecordOption {
	if v, ok := t.sets.Load(k); ok {
		return v.(metric.RecordOption)
	}
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", k.method)}
	if k.tool != "" {
		attrs = append(attrs, attribute.String("agenthost.server", k.server), attribute.String("gen_ai.tool.name", k.tool))
	}
	if k.errType != "" {
		attrs = append(attrs, attribute.String("error.type", k.errType))
	}
	v, _ := t.sets.LoadOrStore(k, metric.RecordOption(metric.WithAttributeSet(attribute.NewSet(attrs...))))
	return v.(metric.RecordOption)
}

// ParamsMeta is the _meta of a request's params when it may hold trace
// context (nil otherwise), for [Call.Trace].
func ParamsMeta(params json.RawMessage) json.RawMessage {
	if !bytes.Contains(params, []byte(`"traceparent"`)) {
		return nil
	}
	var p struct {
		Meta json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil
	}
	return p.Meta
}

var propagator = propagation.TraceContext{}

// ExtractMeta returns ctx with the remote span context of meta's
// traceparent and tracestate (W3C Trace Context in params._meta, as the
// MCP semantic conventions put it, read by ext/mcpwire); ctx as it is when
// meta has none.
func ExtractMeta(ctx context.Context, meta json.RawMessage) context.Context {
	tp, ts := mcpwire.TraceContext(meta)
	if tp == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp, "tracestate": ts})
}

// InjectMeta returns the _meta object meta with traceparent and
// tracestate set to ctx's span context (removed when ctx has none valid),
// its other fields kept; meta as it is when there is nothing to change.
func InjectMeta(ctx context.Context, meta json.RawMessage) (json.RawMessage, error) {
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return mcpwire.WithTraceContext(meta, c["traceparent"], c["tracestate"])
}

// Other is the label value of the values past a Capper's cap.
const Other = "other"

// Capper bounds a label's distinct values: the first max it sees are
// kept, the later ones become [Other]. Safe for concurrent use.
type Capper struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

// NewCapper returns a Capper of max values.
func NewCapper(max int) *Capper { return &Capper{max: max, seen: map[string]struct{}{}} }

// Value is v when it is one of the kept values (or there is room for it),
// else [Other].
func (c *Capper) Value(v string) string {
	c.mu.RLock()
	_, ok := c.seen[v]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return Other
	}
	c.seen[v] = struct{}{}
	return v
}
