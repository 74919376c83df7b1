package ext_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

func TestMain(m *testing.M) {
	switch os.Getenv("EXT_TEST_MODE") {
	case "echo":
		// A service process: echo stdin to stdout, line by line.
		_, _ = io.Copy(os.Stdout, os.Stdin)
		os.Exit(0)
	case "canary":
		fmt.Println(os.Getenv("CANARY"))
		os.Exit(0)
	case "fatal":
		// A service process that fails: a line on stderr (with an escape
		// sequence), status 3.
		fmt.Fprintln(os.Stderr, "starting up")
		fmt.Fprintln(os.Stderr, "fatal: cannot open database \x1b[31mred")
		os.Exit(3)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

// testExt is a small extension that exercises every capability.
type testExt struct {
	mu        sync.Mutex
	host      ext.Host
	cancelled chan string
	heard     []string
	conf      ext.ConfigureRequest // the last Configure, Host cleared
	snap      *ext.UserSnapshot    // the last Activate's snapshot
}

var (
	_ ext.Extension        = (*testExt)(nil)
	_ ext.ToolCaller       = (*testExt)(nil)
	_ ext.UserLifecycle    = (*testExt)(nil)
	_ ext.ServiceProvider  = (*testExt)(nil)
	_ ext.StatusReporter   = (*testExt)(nil)
	_ ext.PromptProvider   = (*testExt)(nil)
	_ ext.ResourceProvider = (*testExt)(nil)
	_ ext.Completer        = (*testExt)(nil)
	_ ext.TaskHandler      = (*testExt)(nil)
	_ ext.SessionListener  = (*testExt)(nil)
	_ ext.Authorizer       = (*testExt)(nil)
)

func newTestExt() *testExt { return &testExt{cancelled: make(chan string, 64)} }

func (e *testExt) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{
		Name: "test", Version: "v0",
		Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers, ext.CapabilityServices, ext.CapabilityStatus,
			ext.CapabilityPrompts, ext.CapabilityResources, ext.CapabilityCompletions, ext.CapabilityTasks, ext.CapabilitySessions, ext.CapabilityAuth},
		Settings: []ext.SettingsSection{{ID: "prefs", Title: "Prefs", Scope: "user",
			Form: json.RawMessage(`{"v":1,"root":{"type":"form","children":[{"type":"text","name":"greeting"}]}}`)}},
	}, nil
}

func (e *testExt) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	e.mu.Lock()
	e.host = req.Host
	e.conf = *req
	e.conf.Host = nil
	e.mu.Unlock()
	return req.Host.SetSystemTools(ctx, []ext.Tool{
		{Name: "test/echo", Description: "echo", InputSchema: json.RawMessage(`{"type":"object"}`), Replay: ext.ReplaySafe},
		{Name: "test/block", Description: "blocks until cancelled", Exposure: ext.ExposureDeferred},
		{Name: "test/fail", Description: "fails"},
		{Name: "test/secret", Description: "reads a secret"},
	})
}

func (e *testExt) Shutdown(context.Context) error { return nil }

func (e *testExt) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	switch req.Name {
	case "test/echo":
		return &ext.CallToolResult{Content: json.RawMessage(`[{"type":"text","text":"echo"}]`), StructuredContent: req.Arguments}, nil
	case "test/block":
		<-ctx.Done()
		e.cancelled <- req.User
		return nil, ctx.Err()
	case "test/fail":
		return ext.ErrorResult("failed for %s", req.User), nil
	case "test/elicit":
		return nil, fmt.Errorf("wrapped: %w", &ext.RPCError{Code: ext.CodeURLElicitationRequired, Message: "open a link, " + req.User,
			Data: json.RawMessage(`{"elicitations":[{"mode":"url","elicitationId":"e-` + req.User + `","url":"https://example.com/` + req.User + `","message":"m"}]}`)})
	case "test/session":
		return sessionTool(ctx, req)
	case "test/params":
		return ext.TextResult(fmt.Sprintf("params=%s args=%s token=%s meta=%s task=%s", req.Params, req.Arguments, req.ProgressToken, req.Meta, req.Task)), nil
	case "test/scope":
		b, _ := json.Marshal(req.Scope)
		return ext.TextResult(string(b)), nil
	case "test/secret":
		e.mu.Lock()
		h := e.host
		e.mu.Unlock()
		v, err := h.UserStore(req.User).Secrets().Get(ctx, "token")
		if err != nil {
			return nil, err
		}
		return ext.TextResult(v), nil
	}
	return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
}

func (e *testExt) Activate(ctx context.Context, user string) error {
	e.mu.Lock()
	e.snap = ext.ActivationSnapshot(ctx)
	h := e.host
	e.mu.Unlock()
	return h.SetUserTools(ctx, user, []ext.Tool{{Name: "test/mine", Description: "for " + user}})
}

func (e *testExt) Retire(context.Context, string, string) error { return nil }
func (e *testExt) ReconcileAll(context.Context) error           { return nil }

func (e *testExt) StartService(_ context.Context, name, user string) (*ext.ProcessSpec, error) {
	switch name {
	case "echo":
		return &ext.ProcessSpec{Command: os.Args[0], Env: []string{"EXT_TEST_MODE=echo"}}, nil
	case "canary":
		return &ext.ProcessSpec{Command: os.Args[0], Env: []string{"EXT_TEST_MODE=canary", "CANARY=canary-" + user}}, nil
	case "full":
		return nil, fmt.Errorf("starting %s for %s: every slot is taken: %w", name, user, ext.ErrBusy)
	}
	return nil, nil
}

func (e *testExt) Status(_ context.Context, user string) ([]ext.StatusEntry, error) {
	return []ext.StatusEntry{{User: user, Name: "s", State: "connected", Tools: 1, NextRetry: time.UnixMilli(1700000000000)}}, nil
}

// BeginAuth answers for resource "r" with a URL made of the request's
// fields, so that a test sees every field cross the carrier.
func (e *testExt) BeginAuth(_ context.Context, req *ext.BeginAuthRequest) (*ext.BeginAuthResult, error) {
	if req.Name != "r" {
		return nil, ext.Errorf(ext.ErrNotFound, "resource %q", req.Name)
	}
	return &ext.BeginAuthResult{
		URL:   "https://as.example/authorize?" + url.Values{"u": {req.User}, "r": {req.RedirectURL}, "m": {req.ClientMetadataURL}}.Encode(),
		State: "st-" + req.User, Expires: time.UnixMilli(1700000000000),
	}, nil
}

// CompleteAuth knows the states BeginAuth made.
func (e *testExt) CompleteAuth(_ context.Context, req *ext.CompleteAuthRequest) (*ext.CompleteAuthResult, error) {
	if req.State != "st-"+req.User {
		return nil, ext.Errorf(ext.ErrInvalidArgument, "no sign-in is waiting for this answer")
	}
	return &ext.CompleteAuthResult{Message: req.User + " " + req.Name + " " + req.Query}, nil
}

func TestConformance(t *testing.T) {
	exttest.Run(t, func() ext.Extension { return newTestExt() }, nil)
}

func configured(t *testing.T, carrier string, fd bool) (ext.Extension, *testExt, *exttest.FakeHost) {
	t.Helper()
	impl := newTestExt()
	var e ext.Extension = impl
	switch carrier {
	case "grpc":
		e = exttest.Connect(t, impl, &exttest.ConnectOptions{FDPassing: fd})
	case "grpc-socket":
		e = exttest.Connect(t, impl, &exttest.ConnectOptions{FDPassing: fd, CallChannel: true})
	}
	h := exttest.NewFakeHost(t)
	h.Services = impl
	ctx := context.Background()
	if err := e.Configure(ctx, &ext.ConfigureRequest{Name: "test", Config: json.RawMessage(`{}`), Host: h}); err != nil {
		t.Fatal(err)
	}
	return e, impl, h
}

func mustJSON(t *testing.T, r *ext.CallToolResult) string {
	t.Helper()
	b, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConfigureRequestCrosses checks that every field of a
// ConfigureRequest but the Host reaches the extension as sent, on every
// carrier.
func TestConfigureRequestCrosses(t *testing.T) {
	want := ext.ConfigureRequest{
		Name: "test", Config: json.RawMessage(`{"k":[1,"ü"]}`), BaseDir: "/etc/agenthost",
		PublicURL: "https://agents.example.com", ListenAddr: "127.0.0.1:7777",
	}
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			impl := newTestExt()
			var e ext.Extension = impl
			if carrier != "inprocess" {
				e = exttest.Connect(t, impl, &exttest.ConnectOptions{CallChannel: carrier == "grpc-socket"})
			}
			req := want
			req.Host = exttest.NewFakeHost(t)
			if err := e.Configure(context.Background(), &req); err != nil {
				t.Fatal(err)
			}
			impl.mu.Lock()
			got := impl.conf
			impl.mu.Unlock()
			if !reflect.DeepEqual(want, got) {
				t.Errorf("ConfigureRequest arrived as\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestActivateSnapshotCrosses: the user's settings and secrets a host
// hands Activate arrive whole on every carrier, and an Activate without
// them (an older host) arrives without a snapshot.
func TestActivateSnapshotCrosses(t *testing.T) {
	want := &ext.UserSnapshot{
		Settings: map[string]json.RawMessage{"prefs": json.RawMessage(`{"greeting":"hé"}`), "empty": json.RawMessage(`{}`)},
		Secrets:  map[string]string{"token": "s3cret", "oauth:x": `{"a":1}`},
	}
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			impl := newTestExt()
			var e ext.Extension = impl
			if carrier != "inprocess" {
				e = exttest.Connect(t, impl, &exttest.ConnectOptions{CallChannel: carrier == "grpc-socket"})
			}
			if err := e.Configure(context.Background(), &ext.ConfigureRequest{Host: exttest.NewFakeHost(t)}); err != nil {
				t.Fatal(err)
			}
			ul := e.(ext.UserLifecycle)
			if err := ul.Activate(ext.WithUserSnapshot(context.Background(), want), "alice"); err != nil {
				t.Fatal(err)
			}
			impl.mu.Lock()
			got := impl.snap
			impl.mu.Unlock()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the snapshot arrived as %+v, want %+v", got, want)
			}
			if v, err := got.Secret("missing"); !errors.Is(err, ext.ErrNotFound) || v != "" {
				t.Errorf("a missing secret read %q, %v; want ErrNotFound", v, err)
			}
			if err := ul.Activate(context.Background(), "alice"); err != nil {
				t.Fatal(err)
			}
			impl.mu.Lock()
			got = impl.snap
			impl.mu.Unlock()
			if got != nil {
				t.Errorf("an Activate without a snapshot arrived with %+v", got)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, _, h := configured(t, carrier, false)
			ctx := context.Background()
			tc := e.(ext.ToolCaller)
			args := json.RawMessage(`{"a":[1,2,{"b":"ü"}]}`)
			res, err := tc.CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/echo", Arguments: args})
			if err != nil {
				t.Fatal(err)
			}
			f, err := res.Fields()
			if err != nil || !bytes.Equal(f.StructuredContent, args) || res.Text() != "echo" || f.IsError {
				t.Errorf("echo result = %s (%v); want the arguments back byte for byte", mustJSON(t, res), err)
			}
			res, err = tc.CallTool(ctx, &ext.CallToolRequest{User: "bob", Name: "test/fail"})
			if err != nil {
				t.Fatal(err)
			}
			if f, _ := res.Fields(); !f.IsError || res.Text() != "failed for bob" {
				t.Errorf("fail result = %s; want an IsError result", mustJSON(t, res))
			}
			// A call that fails with a JSON-RPC error: it arrives whole.
			_, err = tc.CallTool(ctx, &ext.CallToolRequest{User: "bob", Name: "test/elicit"})
			var re *ext.RPCError
			if !errors.As(err, &re) || re.Code != ext.CodeURLElicitationRequired || re.Message != "open a link, bob" ||
				string(re.Data) != `{"elicitations":[{"mode":"url","elicitationId":"e-bob","url":"https://example.com/bob","message":"m"}]}` {
				t.Errorf("elicit error = %#v; want the tool's RPCError whole", err)
			}
			_, err = tc.CallTool(ctx, &ext.CallToolRequest{Name: "nope"})
			if !errors.Is(err, ext.ErrNotFound) || !strings.Contains(err.Error(), `tool "nope"`) {
				t.Errorf("unknown tool error = %v; want ErrNotFound naming the tool", err)
			}
			// A secret read through the host's services, per user.
			_ = h.UserStore("alice").Secrets().Set(ctx, "token", "alice-canary")
			res, err = tc.CallTool(ctx, &ext.CallToolRequest{User: "alice", Name: "test/secret"})
			if err != nil || res.Text() != "alice-canary" {
				t.Errorf("secret of alice = %+v, %v", res, err)
			}
			_, err = tc.CallTool(ctx, &ext.CallToolRequest{User: "bob", Name: "test/secret"})
			if !errors.Is(err, ext.ErrNotFound) {
				t.Errorf("secret of bob = %v; want ErrNotFound across the wire", err)
			}
			if err := e.(ext.UserLifecycle).Activate(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
			if got := h.UserTools("alice"); len(got) != 1 || got[0].Description != "for alice" {
				t.Errorf("alice's tools = %+v", got)
			}
			sys := h.SystemTools()
			if len(sys) != 4 || sys[1].Exposure != ext.ExposureDeferred || sys[0].Replay != ext.ReplaySafe {
				t.Errorf("system tools = %+v", sys)
			}
			st, err := e.(ext.StatusReporter).Status(ctx, "alice")
			if err != nil || len(st) != 1 || st[0].NextRetry.UnixMilli() != 1700000000000 || st[0].Tools != 1 {
				t.Errorf("status = %+v, %v", st, err)
			}
		})
	}
}

// TestAuthCrosses checks the "auth" capability on every carrier: each
// field of both requests and results arrives as sent, and the sentinels
// survive.
func TestAuthCrosses(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, _, _ := configured(t, carrier, false)
			a := e.(ext.Authorizer)
			ctx := context.Background()
			res, err := a.BeginAuth(ctx, &ext.BeginAuthRequest{User: ext.OperatorUser, Name: "r",
				RedirectURL: "https://h.example/oauth/callback", ClientMetadataURL: "https://h.example/oauth/client-metadata.json"})
			if err != nil {
				t.Fatal(err)
			}
			want := &ext.BeginAuthResult{URL: "https://as.example/authorize?m=https%3A%2F%2Fh.example%2Foauth%2Fclient-metadata.json&r=https%3A%2F%2Fh.example%2Foauth%2Fcallback&u=%40operator",
				State: "st-@operator", Expires: time.UnixMilli(1700000000000)}
			if res.URL != want.URL || res.State != want.State || !res.Expires.Equal(want.Expires) {
				t.Errorf("BeginAuth = %+v, want %+v", res, want)
			}
			if _, err := a.BeginAuth(ctx, &ext.BeginAuthRequest{User: "alice", Name: "nope"}); !errors.Is(err, ext.ErrNotFound) {
				t.Errorf("BeginAuth of an unknown resource: %v, want ErrNotFound", err)
			}
			done, err := a.CompleteAuth(ctx, &ext.CompleteAuthRequest{User: "alice", Name: "r", State: "st-alice", Query: "code=c&state=st-alice&iss=x"})
			if err != nil || done.Message != "alice r code=c&state=st-alice&iss=x" {
				t.Errorf("CompleteAuth = %+v, %v", done, err)
			}
			if _, err := a.CompleteAuth(ctx, &ext.CompleteAuthRequest{User: "alice", State: "other"}); !errors.Is(err, ext.ErrInvalidArgument) {
				t.Errorf("CompleteAuth of an unknown state: %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestSignInURL(t *testing.T) {
	for in, want := range map[[3]string]string{
		{"https://h.example", "mcp", "notion"}:        "https://h.example/settings/connect/mcp/notion",
		{"https://h.example/base/", "mcp", "u_a b/c"}: "https://h.example/base/settings/connect/mcp/u_a%20b%2Fc",
	} {
		if got := ext.SignInURL(in[0], in[1], in[2]); got != want {
			t.Errorf("SignInURL%q = %q, want %q", in, got, want)
		}
	}
}

func TestCancellationCrossesTheWire(t *testing.T) {
	for _, carrier := range exttest.Carriers {
		t.Run(carrier, func(t *testing.T) {
			e, impl, _ := configured(t, carrier, false)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := e.(ext.ToolCaller).CallTool(ctx, &ext.CallToolRequest{User: "carol", Name: "test/block"})
				errc <- err
			}()
			time.Sleep(100 * time.Millisecond)
			cancel()
			select {
			case u := <-impl.cancelled:
				if u != "carol" {
					t.Errorf("cancelled handler ran for %q", u)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the handler inside the extension was not cancelled")
			}
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("call error = %v; want context.Canceled", err)
			}
		})
	}
}

func TestServices(t *testing.T) {
	cases := map[string]struct {
		carrier string
		fd      bool
	}{
		"inprocess":   {"inprocess", false},
		"grpc stream": {"grpc", false},
		"grpc fd":     {"grpc", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, impl, h := configured(t, tc.carrier, tc.fd)
			ctx := context.Background()
			host := ext.Host(h)
			if tc.carrier == "grpc" {
				host = hostOf(impl)
			}
			// 10 MiB each way through an echo process.
			conn, err := host.ConnectService(ctx, "echo", "alice")
			if err != nil {
				t.Fatal(err)
			}
			payload := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
			payload = append(payload, '\n')
			var got bytes.Buffer
			done := make(chan error, 1)
			go func() {
				_, err := io.CopyN(&got, conn.Stdout(), int64(len(payload)))
				done <- err
			}()
			if _, err := conn.Stdin().Write(payload); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), payload) {
				t.Errorf("echoed %d bytes, want %d identical", got.Len(), len(payload))
			}
			if conn.PID() == 0 {
				t.Error("PID = 0")
			}
			if err := conn.Release(); err != nil {
				t.Fatal(err)
			}
			// Per-user environment.
			for _, u := range []string{"alice", "bob"} {
				c, err := host.ConnectService(ctx, "canary", u)
				if err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(c.Stdout()).ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(line) != "canary-"+u {
					t.Errorf("user %s's process saw %q", u, line)
				}
				_ = c.Release()
			}
			if _, err := host.ConnectService(ctx, "none", "alice"); !errors.Is(err, ext.ErrNotFound) {
				t.Errorf("unknown service: %v, want ErrNotFound", err)
			}
			if _, err := host.ConnectService(ctx, "full", "alice"); !errors.Is(err, ext.ErrBusy) || !strings.Contains(err.Error(), "full for alice") {
				t.Errorf("no slot: %v, want ErrBusy naming the service", err)
			}
			// The extension hands the spec itself: the process runs it, and
			// StartService is not asked (it knows no service "own").
			c, err := host.ConnectServiceSpec(ctx, "own", "carol", &ext.ProcessSpec{Command: os.Args[0],
				Env: []string{"EXT_TEST_MODE=canary", "CANARY=spec-carol"}, OneSession: true})
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c.Stdout()).ReadString('\n')
			if err != nil || strings.TrimSpace(line) != "spec-carol" {
				t.Errorf("the process of a handed spec said %q, %v", line, err)
			}
			_ = c.Release()
			if _, err := host.ConnectServiceSpec(ctx, "own", "carol", nil); !errors.Is(err, ext.ErrInvalidArgument) {
				t.Errorf("nil spec: %v, want ErrInvalidArgument", err)
			}
			// How a process ended crosses the carrier: its status and the
			// last lines of its stderr, the escape sequence escaped.
			c, err = host.ConnectServiceSpec(ctx, "fatal", "carol", &ext.ProcessSpec{Command: os.Args[0],
				Env: []string{"EXT_TEST_MODE=fatal"}, OneSession: true})
			if err != nil {
				t.Fatal(err)
			}
			ex, ok := c.(ext.ServiceExiter)
			if !ok {
				t.Fatalf("%T does not tell how its process ended", c)
			}
			e, err := ex.Exit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"starting up", `fatal: cannot open database \u001b[31mred`}
			if e.Status() != "exit status 3" || !slices.Equal(e.Stderr, want) {
				t.Errorf("exit = %s %q, want exit status 3 %q", e.Status(), e.Stderr, want)
			}
			_ = c.Release()
			// A command that cannot start says so.
			if _, err := host.ConnectServiceSpec(ctx, "none", "carol", &ext.ProcessSpec{Command: "/nonexistent/server"}); !errors.Is(err, ext.ErrCannotStart) {
				t.Errorf("missing command: %v, want ErrCannotStart", err)
			}
		})
	}
}

func hostOf(e *testExt) ext.Host {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.host
}

// TestMark: a marked error keeps its message (no sentinel text on a line
// of its own, as errors.Join would add) and matches both.
func TestMark(t *testing.T) {
	base := fmt.Errorf("secret %q: %w", "token:x", os.ErrNotExist)
	err := ext.Mark(base, ext.ErrNotFound)
	if err.Error() != base.Error() || !errors.Is(err, ext.ErrNotFound) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Mark = %q; want %q matching both", err, base)
	}
	if ext.Mark(nil, ext.ErrNotFound) != nil {
		t.Error("Mark(nil) is not nil")
	}
}
