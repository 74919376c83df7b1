package ext_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// callerHost is a fake host with [ext.CallerTools]: handle "h1" is the one
// call in flight; it records what reached it.
type callerHost struct {
	*exttest.FakeHost
	mu        sync.Mutex
	record    bool // keep the requests in got
	got       []ext.CallerCallRequest
	cancelled chan string // the tools whose call saw its context end
}

func (h *callerHost) ListCallerTools(_ context.Context, caller string) ([]ext.Tool, error) {
	return []ext.Tool{{Name: "t/echo"}}, nil
}

func (h *callerHost) CallCallerTool(ctx context.Context, req *ext.CallerCallRequest) (*ext.CallToolResult, error) {
	h.mu.Lock()
	if h.record {
		h.got = append(h.got, *req)
	}
	h.mu.Unlock()
	if req.Caller != "h1" {
		return nil, ext.Errorf(ext.ErrNotFound, "no call in flight for caller handle %q", req.Caller)
	}
	switch req.Name {
	case "t/echo":
		return ext.RawResult([]byte(`{"content":[{"type":"text","text":` + string(mustQuote(string(req.Arguments))) + `}]}`))
	case "t/fail":
		return &ext.CallToolResult{Raw: json.RawMessage(`{"content":[{"type":"text","text":"it broke"}],"isError":true}`), IsError: true}, nil
	case "t/slow":
		<-ctx.Done()
		h.cancelled <- req.Name
		return nil, ctx.Err()
	}
	return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
}

func mustQuote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// relayer has one tool, test/relay, that calls the tool its arguments name
// as its caller, within waitMs when given.
type relayer struct {
	mu   sync.Mutex
	host ext.Host
}

func (e *relayer) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "test", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityCallerTools}}, nil
}

func (e *relayer) Configure(_ context.Context, req *ext.ConfigureRequest) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.host = req.Host
	return nil
}

func (e *relayer) Shutdown(context.Context) error { return nil }

func (e *relayer) caller() ext.CallerTools {
	e.mu.Lock()
	defer e.mu.Unlock()
	ct, _ := e.host.(ext.CallerTools)
	return ct
}

func (e *relayer) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	var a struct {
		Name   string          `json:"name"`
		Args   json.RawMessage `json:"args"`
		WaitMs int             `json:"waitMs"`
		Times  int             `json:"times"`
	}
	if err := json.Unmarshal(req.Arguments, &a); err != nil {
		return nil, err
	}
	if a.WaitMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(a.WaitMs)*time.Millisecond)
		defer cancel()
	}
	ct := e.caller()
	for range a.Times - 1 {
		if _, err := ct.CallCallerTool(ctx, &ext.CallerCallRequest{Caller: req.Caller, Name: a.Name, Arguments: a.Args}); err != nil {
			return nil, err
		}
	}
	return ct.CallCallerTool(ctx, &ext.CallerCallRequest{Caller: req.Caller, Name: a.Name, Arguments: a.Args})
}

// BenchmarkCallerCall: a caller call from the extension process as a frame
// of the outer call on the socket call channel (ours), beside the same call
// as a gRPC call on go-plugin's connection (the baseline, here
// without the TLS the host adds over it), in the same run: each outer call makes 20 inner calls.
func BenchmarkCallerCall(b *testing.B) {
	for _, mode := range []string{"grpc", "frames"} {
		b.Run(mode, func(b *testing.B) {
			impl := &relayer{}
			e := exttest.Connect(b, impl, &exttest.ConnectOptions{CallChannel: true})
			h := &callerHost{FakeHost: exttest.NewFakeHost(b), cancelled: make(chan string, 4)}
			ctx := context.Background()
			if err := e.Configure(ctx, &ext.ConfigureRequest{Name: "test", Config: json.RawMessage(`{}`), Host: h}); err != nil {
				b.Fatal(err)
			}
			ext.SetCallerFrames(impl.caller(), mode == "frames")
			h.record = false
			args := json.RawMessage(`{"name":"t/echo","args":{"text":"hi"},"times":20}`)
			b.ResetTimer()
			for range b.N {
				if _, err := e.CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/relay", Caller: "h1", Arguments: args}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/20, "µs/inner-call")
		})
	}
}

// TestCallerToolsCross: on every carrier an extension's CallCallerTool
// reaches the host with the caller's handle, the tool's name and its
// arguments byte for byte, and brings back the raw result, isError and the
// sentinels; an inner call whose context ends is cancelled on the host's
// side while the outer call goes on; a handle whose call has returned is
// dead. Over the wire these calls travel as frames of the outer call on the
// call channel, not as gRPC calls.
func TestCallerToolsCross(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			impl := &relayer{}
			var e ext.Extension = impl
			if carrier != "inprocess" {
				e = exttest.Connect(t, impl, &exttest.ConnectOptions{CallChannel: carrier == "grpc-socket"})
			}
			h := &callerHost{FakeHost: exttest.NewFakeHost(t), cancelled: make(chan string, 4), record: true}
			ctx := context.Background()
			if err := e.Configure(ctx, &ext.ConfigureRequest{Name: "test", Config: json.RawMessage(`{}`), Host: h}); err != nil {
				t.Fatal(err)
			}
			unary := ext.UnaryCallerCalls()
			relay := func(args string) (*ext.CallToolResult, error) {
				return e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/relay", Caller: "h1", Arguments: json.RawMessage(args)})
			}
			res, err := relay(`{"name":"t/echo","args":{"text": "hi",  "n":[1,2]}}`)
			if err != nil || res.Text() != `{"text": "hi",  "n":[1,2]}` || res.IsError {
				t.Errorf("t/echo as the caller = %v, %v", res, err)
			}
			h.mu.Lock()
			if len(h.got) != 1 || h.got[0].Caller != "h1" || h.got[0].Name != "t/echo" {
				t.Errorf("the host got %+v", h.got)
			}
			h.mu.Unlock()
			if res, err := relay(`{"name":"t/fail","args":{}}`); err != nil || !res.IsError || res.Text() != "it broke" {
				t.Errorf("t/fail as the caller = %v, %v; want isError", res, err)
			}
			if _, err := relay(`{"name":"t/none","args":{}}`); !errors.Is(err, ext.ErrNotFound) {
				t.Errorf("t/none as the caller: %v, want ErrNotFound", err)
			}
			if _, err := relay(`{"name":"t/slow","args":{},"waitMs":50}`); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("t/slow within 50 ms: %v, want DeadlineExceeded", err)
			}
			select {
			case <-h.cancelled:
			case <-time.After(10 * time.Second):
				t.Error("the host's side of the cancelled inner call never saw its context end")
			}
			if carrier != "inprocess" {
				if n := ext.UnaryCallerCalls() - unary; n != 0 {
					t.Errorf("%d caller calls went as gRPC calls, want all on the call channel", n)
				}
			}
		})
	}
}
