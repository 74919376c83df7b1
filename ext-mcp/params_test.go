package extmcp_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestCallParamsEdited: a call that brings the client's params
// (ext.CallToolRequest.Params) reaches the server as they came, each
// member's bytes kept (an unknown one too), with ext-mcp's one edit: the
// server's tool name, and its own progress token in _meta beside the
// client's other fields.
func TestCallParamsEdited(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join("testdata", "golden", "client-2025-11-25.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "received")
	srv := selfServerEnv("scripted", map[string]string{scriptEnv: abs, recordEnv: record}, `"protocolVersion": "2025-11-25"`)
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"s": %s}}`, srv), nil)
	f.activate("alice")
	params := `{"name":"s__echo","arguments":{"text" : "milk"},"_meta":{"x":1,"progressToken":"c-1"},"extra":[1, 2]}`
	res, err := f.e.(ext.ToolCaller).CallTool(ctx(t), &ext.CallToolRequest{User: "alice", Name: "s/echo",
		Params: json.RawMessage(params), Arguments: json.RawMessage(`{"text" : "milk"}`), ProgressToken: json.RawMessage(`"c-1"`),
		Meta: json.RawMessage(`{"x":1,"progressToken":"c-1"}`), Session: clientSession("alice")})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var sent string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"method":"tools/call"`) {
			sent = line
		}
	}
	want := regexp.MustCompile(`"params":\{"arguments":\{"text" : "milk"\},"extra":\[1, 2\],"name":"echo","_meta":\{"progressToken":"[^"]+","x":1\}\}`)
	if !want.MatchString(sent) || strings.Contains(sent, `"c-1"`) {
		t.Errorf("the server got %s\nwant params matching %s (the client's token replaced by ext-mcp's)", sent, want)
	}
}
