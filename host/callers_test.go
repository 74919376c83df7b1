package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// relayExt has one tool, c/relay, that calls the tool its arguments name
// as its caller ([ext.CallerTools]), and keeps the last handle it saw.
type relayExt struct {
	// noCaller leaves CapabilityCallerTools out of its descriptor.
	noCaller bool
	mu       sync.Mutex
	host     ext.Host
	handle   string
}

func (e *relayExt) Describe(context.Context) (*ext.Descriptor, error) {
	caps := []ext.Capability{ext.CapabilityTools, ext.CapabilityCallerTools}
	if e.noCaller {
		caps = caps[:1]
	}
	return &ext.Descriptor{Name: "c", Version: "v1", Capabilities: caps}, nil
}

func (e *relayExt) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	e.mu.Lock()
	e.host = req.Host
	e.mu.Unlock()
	return req.Host.SetSystemTools(ctx, []ext.Tool{{Name: "c/relay"}})
}

func (e *relayExt) Shutdown(context.Context) error { return nil }

func (e *relayExt) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	var a struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal(req.Arguments, &a); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.handle = req.Caller
	ct := e.host.(ext.CallerTools)
	e.mu.Unlock()
	if a.Name == "" {
		tools, err := ct.ListCallerTools(ctx, req.Caller)
		if err != nil {
			return nil, err
		}
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		return ext.TextResult(strings.Join(names, ",")), nil
	}
	return ct.CallCallerTool(ctx, &ext.CallerCallRequest{Caller: req.Caller, Name: a.Name, Arguments: a.Args})
}

// TestCallerTools: an extension calls tools as the caller of its
// in-flight call, with no grant: the caller's tools within its scope
// (codemode ones too), never its own (no recursion), never outside the
// scope, and the handle is dead once the call returned.
func TestCallerTools(t *testing.T) {
	ctx := context.Background()
	re := &relayExt{}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}, "c": {Extension: re}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	call := func(scope *ext.Scope, args string) (string, error) {
		res, err := h.CallTool(ctx, &host.CallRequest{User: "alice", Name: "c/relay", Arguments: json.RawMessage(args), Scope: scope})
		if err != nil {
			return "", err
		}
		b, _ := res.JSON()
		return string(b), nil
	}
	out, err := call(nil, `{}`)
	if err != nil || !strings.Contains(out, "t/echo") || !strings.Contains(out, "t/svcbench") || strings.Contains(out, "c/relay") {
		t.Errorf("list as the caller = %s, %v; want t's tools (codemode t/svcbench too), not c/relay", out, err)
	}
	if out, err := call(nil, `{"name":"t/echo","args":{"x":"hi"}}`); err != nil || !strings.Contains(out, "hi") {
		t.Errorf("t/echo as the caller = %s, %v", out, err)
	}
	if _, err := call(nil, `{"name":"c/relay","args":{}}`); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("calling its own tool as the caller: %v, want ErrPermission", err)
	}
	scope := &ext.Scope{Servers: []string{"t", "c"}, Tools: []string{"t/greet", "c/*"}}
	if _, err := call(scope, `{"name":"t/echo","args":{}}`); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("t/echo outside the caller's scope: %v, want ErrNotFound", err)
	}
	if out, err := call(scope, `{}`); err != nil || strings.Contains(out, "t/echo") || !strings.Contains(out, "t/greet") {
		t.Errorf("list within the scope = %s, %v", out, err)
	}
	re.mu.Lock()
	handle := re.handle
	ct := re.host.(ext.CallerTools)
	re.mu.Unlock()
	if handle == "" {
		t.Fatal("the call carried no caller handle")
	}
	if _, err := ct.CallCallerTool(ctx, &ext.CallerCallRequest{Caller: handle, Name: "t/echo"}); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("a handle after its call returned: %v, want ErrNotFound", err)
	}
}

// watchExt records the tools the host tells it ([ext.UserToolsWatcher]).
type watchExt struct {
	relayExt
	got chan []string
}

func (e *watchExt) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "c", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUserTools, ext.CapabilityCallerTools}}, nil
}

func (e *watchExt) UserToolsChanged(_ context.Context, user string, tools []ext.Tool) error {
	names := []string{user}
	for _, t := range tools {
		names = append(names, t.Name)
	}
	e.got <- names
	return nil
}

// TestUserToolsWatcher: an extension with the usertools capability hears
// a user's tools (the others', every exposure, never its own) when the
// user is activated (before the activation ends: its tool is there at
// the first list), and again when they change.
func TestUserToolsWatcher(t *testing.T) {
	ctx := context.Background()
	we := &watchExt{got: make(chan []string, 16)}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}, "c": {Extension: we}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := h.Tools(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case names := <-we.got:
		got = strings.Join(names, ",")
	default:
		t.Fatal("the watcher was not told alice's tools before her activation ended")
	}
	if !strings.HasPrefix(got, "alice,") || !strings.Contains(got, "t/mine_alice") || !strings.Contains(got, "t/svcbench") || strings.Contains(got, "c/relay") {
		t.Errorf("told %s; want alice's tools of t (codemode ones too), not c's own", got)
	}
}

// TestCallerToolsTelemetry: a call made as a caller is in the host's
// histogram of tool calls, as /mcp's calls are.
func TestCallerToolsTelemetry(t *testing.T) {
	ctx := context.Background()
	tel, err := telemetry.New(ctx, telemetry.Config{Metrics: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(ctx) })
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}, "c": {Extension: &relayExt{}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetTelemetry(tel)
	if _, err := h.CallTool(ctx, &host.CallRequest{User: "alice", Name: "c/relay", Arguments: json.RawMessage(`{"name":"t/echo","args":{}}`)}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `gen_ai_tool_name="t/echo"`) {
		t.Errorf("no series of the inner call t/echo in:\n%s", rec.Body.String())
	}
}

// TestCallerHandleOnlyWithTheCapability: an extension that does not list
// CapabilityCallerTools gets no caller handle with its calls (the host
// registers none on its hot path), and a handle it makes up is refused.
func TestCallerHandleOnlyWithTheCapability(t *testing.T) {
	ctx := context.Background()
	re := &relayExt{noCaller: true}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: &testExt{}}, "c": {Extension: re}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	_, err = h.CallTool(ctx, &host.CallRequest{User: "alice", Name: "c/relay", Arguments: json.RawMessage(`{}`)})
	re.mu.Lock()
	handle := re.handle
	re.mu.Unlock()
	if handle != "" || !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("a call to an extension without callertools: handle %q, listing as the caller: %v; want no handle, not found", handle, err)
	}
}
