package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/limits"
)

// TestRateLimitedCall: a call the host refuses by a rate limit is
// answered with JSON-RPC error -32029, the host's message and data the
// client acts on (retryAfterMs, limit, scope, kind), on a session and on
// the stateless revision; not an isError result.
func TestRateLimitedCall(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("notes/echo", "", ""))
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		return nil, fmt.Errorf("wrapped: %w", &limits.Refusal{Scope: limits.ScopeTool, Kind: limits.KindRate, Subject: "notes/echo",
			Limit: "5 calls per minute", RetryAfter: 11500 * time.Millisecond})
	})
	for _, version := range []string{"2025-11-25", ""} {
		t.Run("version "+version, func(t *testing.T) {
			c, err := e.connect(t, aliceTok, version)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.tryCall("notes__echo", `{}`)
			var re *jsonrpc.Error
			if !errors.As(err, &re) || re.Code != -32029 || re.Message != `rate limit: at most 5 calls per minute of tool "notes/echo"; try again in 11.5s` {
				t.Fatalf("call = %+v, %v; want the -32029 error", res, err)
			}
			var d map[string]any
			if err := json.Unmarshal(re.Data, &d); err != nil || d["retryAfterMs"] != 11500.0 || d["limit"] != "5 calls per minute" ||
				d["scope"] != "tool" || d["kind"] != "rate" || d["tool"] != "notes/echo" {
				t.Errorf("data = %s", re.Data)
			}
		})
	}
}
