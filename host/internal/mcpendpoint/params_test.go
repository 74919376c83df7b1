package mcpendpoint_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
)

// TestCallParamsAsTheyCame: a session revision's tools/call reaches the
// host with the client's params as it sent them, byte for byte, and its
// _meta whole (the progress token read, not taken out); the name the
// host sees is the tool's registered one.
func TestCallParamsAsTheyCame(t *testing.T) {
	e := newEnv(t, nil)
	seen := make(chan api.CallRequest, 1)
	e.host.SetCallTool(func(_ context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		seen <- *req
		return ext.TextResult("done"), nil
	})
	cs := e.session(t, aliceTok, "2025-11-25", nil)
	params := `{"name":"notes__add", "arguments":{"a" : 1},"_meta":{"trace":"x","progressToken":5},"task":null}`
	_, msgs := e.rpc(t, aliceTok, cs.ID(), "2025-11-25", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":`+params+`}`)
	if len(msgs) == 0 || !strings.Contains(string(msgs[len(msgs)-1]), "done") {
		t.Fatalf("answer: %s", msgs)
	}
	req := <-seen
	if string(req.Params) != params {
		t.Errorf("the host saw params %s\nwant %s", req.Params, params)
	}
	if req.Name != "notes/add" || string(req.Arguments) != `{"a" : 1}` || string(req.ProgressToken) != "5" ||
		string(req.Meta) != `{"trace":"x","progressToken":5}` || req.Task != nil {
		t.Errorf("the host saw name %q arguments %s token %s meta %s task %s", req.Name, req.Arguments, req.ProgressToken, req.Meta, req.Task)
	}
	if req.Credential == "" || req.SessionID != cs.ID() {
		t.Errorf("the audit log's names: credential %q session %q", req.Credential, req.SessionID)
	}
}
