package host_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
)

// seeExt is an in-process extension whose one tool records the request it
// was handed.
type seeExt struct{ seen chan ext.CallToolRequest }

func (e *seeExt) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "see", Version: "v1", Capabilities: []ext.Capability{ext.CapabilityTools}}, nil
}

func (e *seeExt) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	return req.Host.SetSystemTools(ctx, []ext.Tool{{Name: "see/it"}})
}

func (e *seeExt) Shutdown(context.Context) error { return nil }

func (e *seeExt) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	e.seen <- *req
	return ext.TextResult("seen"), nil
}

// TestCallRequestToTheExtension: the host hands an extension the caller's
// request (one type, host.CallRequest is ext.CallToolRequest) without
// what is the host's own (the audit log's credential and session), and
// without the task, and the params asking for it, when the extension
// has no tasks; the caller's request is left as it was.
func TestCallRequestToTheExtension(t *testing.T) {
	ctx := context.Background()
	see := &seeExt{seen: make(chan ext.CallToolRequest, 1)}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"see": {Extension: see}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	params := json.RawMessage(`{"name":"see__it","arguments":{"a":1},"_meta":{"progressToken":1},"task":{"ttl":5}}`)
	req := &host.CallRequest{User: "alice", Name: "see/it", Params: params, Arguments: json.RawMessage(`{"a":1}`),
		ProgressToken: json.RawMessage(`1`), Meta: json.RawMessage(`{"progressToken":1}`), Task: json.RawMessage(`{"ttl":5}`),
		Credential: "token:t1", SessionID: "s-1"}
	if _, err := h.CallTool(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := <-see.seen
	if got.Credential != "" || got.SessionID != "" {
		t.Errorf("the extension saw credential %q session %q", got.Credential, got.SessionID)
	}
	if got.Task != nil || got.Params != nil {
		t.Errorf("an extension without tasks saw task %s params %s", got.Task, got.Params)
	}
	if string(got.Arguments) != `{"a":1}` || string(got.ProgressToken) != "1" || string(got.Meta) != `{"progressToken":1}` {
		t.Errorf("the extension saw arguments %s token %s meta %s", got.Arguments, got.ProgressToken, got.Meta)
	}
	if req.Credential != "token:t1" || req.SessionID != "s-1" || string(req.Params) != string(params) || req.Task == nil {
		t.Errorf("the caller's request changed: %+v", req)
	}
	// The same params without a task reach it as they came.
	params = json.RawMessage(`{"name":"see__it","arguments":{"a":1}}`)
	if _, err := h.CallTool(ctx, &host.CallRequest{User: "alice", Name: "see/it", Params: params, Arguments: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if got := <-see.seen; string(got.Params) != string(params) {
		t.Errorf("the extension saw params %s, want %s", got.Params, params)
	}
}
