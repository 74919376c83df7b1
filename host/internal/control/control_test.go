package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeHost answers from memory; only what the tests touch does anything.
type fakeHost struct {
	api.Host
	values map[string]json.RawMessage
}

func (f *fakeHost) Tools(_ context.Context, user string) ([]api.Tool, error) {
	if user == "" {
		return nil, fmt.Errorf("no user: %w", ext.ErrInvalidArgument)
	}
	return []api.Tool{{Extension: "x", Tool: ext.Tool{Name: "x/" + user, Exposure: ext.ExposureDeferred, InputSchema: json.RawMessage(`{"type":"object"}`)}}}, nil
}

func (f *fakeHost) Call(_ context.Context, user, _, name string, args json.RawMessage) (*ext.CallToolResult, error) {
	if name != "x/"+user {
		return nil, fmt.Errorf("tool %q: %w", name, ext.ErrNotFound)
	}
	return &ext.CallToolResult{Content: json.RawMessage(`[{"type":"text","text":"hi"}]`), StructuredContent: args}, nil
}

func (f *fakeHost) SetSettings(_ context.Context, user, e, s string, v json.RawMessage) error {
	if string(v) == `{"bad":1}` {
		return errors.Join(settings.FieldErrors{{Field: "bad", Msg: "unknown field"}}, ext.ErrInvalidArgument)
	}
	f.values[user+e+s] = v
	return nil
}

func (f *fakeHost) GetSettings(_ context.Context, user, e, s string) (*api.SettingsValues, error) {
	return &api.SettingsValues{Values: f.values[user+e+s]}, nil
}

func TestRoundTripOverTheSocket(t *testing.T) {
	dir := t.TempDir()
	h := &fakeHost{values: map[string]json.RawMessage{}}
	s, err := Serve(dir, h, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
	// A second host on the same folder is refused.
	if _, err := Serve(dir, h, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Error("a second control socket on a live one was accepted")
	}
	ctx := context.Background()
	c, err := Dial(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools, err := c.Tools(ctx, "alice")
	if err != nil || len(tools) != 1 || tools[0].Name != "x/alice" || tools[0].Exposure != ext.ExposureDeferred || tools[0].Extension != "x" {
		t.Fatalf("tools = %+v, %v", tools, err)
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
	err = c.SetSettings(ctx, "alice", "x", "s", json.RawMessage(`{"bad":1}`))
	var fe settings.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Field != "bad" || !errors.Is(err, ext.ErrInvalidArgument) {
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
	s, err := Serve(dir, &fakeHost{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("a stale socket file blocked the start: %v", err)
	}
	_ = s.Close()
}
