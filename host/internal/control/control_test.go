package control

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/settings"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newHost returns the shared in-memory host with one section ("x"/"s"
// takes a boolean "ok"), one tool per user ("x/<user>") whose call answers
// "hi" with the arguments as structured content.
func newHost(users ...string) *hosttest.Host {
	form, err := settings.Section{ID: "s", Title: "S", Scope: settings.ScopeUser,
		Form: settings.NewForm(settings.Toggle("ok", "OK"))}.MarshalForm()
	if err != nil {
		panic(err)
	}
	h := hosttest.New(&hosttest.Options{Sections: []api.Section{{Extension: "x", ID: "s", Title: "S", Scope: "user", Form: form}}})
	for _, u := range users {
		h.SetTools(u, api.Tool{Extension: "x", Tool: ext.Tool{Name: "x/" + u, Exposure: ext.ExposureDeferred,
			OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: json.RawMessage(`{"readOnlyHint":true}`)}})
	}
	h.SetCall(func(_ context.Context, _, _ string, args json.RawMessage) (*ext.CallToolResult, error) {
		return &ext.CallToolResult{Content: json.RawMessage(`[{"type":"text","text":"hi"}]`), StructuredContent: args}, nil
	})
	return h
}

// Both ends speak the same API: the host and the client are control.Hosts.
var (
	_ Host = (*hosttest.Host)(nil)
	_ Host = (*Client)(nil)
)

func TestRoundTripOverTheSocket(t *testing.T) {
	dir := t.TempDir()
	h := newHost("alice")
	s, err := Serve(dir, h, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
	// A second host on the same folder is refused.
	if _, err := Serve(dir, h, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Error("a second control socket on a live one was accepted")
	}
	ctx := context.Background()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools, err := c.Tools(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := h.Tools(ctx, "alice")
	if diff := cmp.Diff(want, tools); diff != "" {
		t.Errorf("tools across the socket (-want +got):\n%s", diff)
	}
	res, err := c.Call(ctx, "alice", "", "x/alice", json.RawMessage(`{"a":1}`))
	if err == nil {
		res, err = res.Fields()
	}
	if err != nil || string(res.StructuredContent) != `{"a":1}` || res.Text() != "hi" {
		t.Errorf("call = %+v, %v", res, err)
	}
	// Errors keep their sentinel and field errors across the socket.
	if _, err := c.Call(ctx, "alice", "", "nope", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("unknown tool: %v, want ErrNotFound", err)
	}
	err = c.SetSettings(ctx, "alice", "x", "s", json.RawMessage(`{"ok":"yes"}`))
	var fe settings.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Field != "ok" || !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("field errors across the socket: %v", err)
	}
	if err := c.SetSettings(ctx, "alice", "x", "s", json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.GetSettings(ctx, "alice", "x", "s"); err != nil || string(v.Values) != `{"ok":true}` {
		t.Errorf("settings = %v, %v", v, err)
	}
	if _, _, err := c.CreateToken(ctx, "alice", "n", false); !errors.Is(err, ext.ErrUnimplemented) {
		t.Errorf("tokens without a token store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SocketName)); !os.IsNotExist(err) {
		t.Error("Close left the socket file")
	}
	if _, err := Dial(ctx, dir); err == nil {
		t.Error("Dial succeeded with no host running")
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SocketName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Serve(dir, newHost(), nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("a stale socket file blocked the start: %v", err)
	}
	_ = s.Close()
}

// TestPipe reaches an in-process host through the same API over an
// in-memory connection, and leaves nothing running after Close.
func TestPipe(t *testing.T) {
	h := newHost("bob")
	c, s := Pipe(h, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	res, err := c.Call(ctx, "bob", "", "x/bob", json.RawMessage(`{"n":2}`))
	if err != nil || string(res.StructuredContent) != `{"n":2}` {
		t.Fatalf("call over the pipe = %+v, %v", res, err)
	}
	if _, err := c.Call(ctx, "bob", "", "x/alice", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("another user's tool over the pipe: %v, want ErrNotFound", err)
	}
	if s.Path() != "" {
		t.Errorf("a pipe has a socket path %q", s.Path())
	}
	c.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tools(ctx, "bob"); err == nil {
		t.Error("the client still works after the pipe closed")
	}
}

// owned is a host whose service processes are the pids in its set.
type owned struct {
	*hosttest.Host
	mu   sync.Mutex
	pids map[int]bool
}

func (o *owned) ServiceProcess(pid int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pids[pid]
}

// TestRefusesServiceProcesses (issue 10, item 3): a peer of the host's
// own uid that is one of its service processes (or started by one) is
// refused, so a server cannot mint tokens or read settings through the
// socket; any other process of that uid is served.
func TestRefusesServiceProcesses(t *testing.T) {
	dir := t.TempDir()
	h := &owned{Host: newHost("alice"), pids: map[int]bool{os.Getpid(): true}}
	s, err := Serve(dir, h, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	try := func() error {
		c, err := Dial(ctx, dir)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Tools(ctx, "alice")
		return err
	}
	if err := try(); err == nil {
		t.Fatal("a service process was served by the control socket")
	}
	h.mu.Lock()
	h.pids = nil
	h.mu.Unlock()
	if err := try(); err != nil {
		t.Fatalf("a process of the host's user that is no service process was refused: %v", err)
	}
}
