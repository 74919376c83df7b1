package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// scopedVerifier is benchVerifier, with "tok-scoped" scoped to notes.
type scopedVerifier struct{}

func (scopedVerifier) Verify(ctx context.Context, tok string) (mcpendpoint.Principal, error) {
	if tok == "tok-scoped" {
		return mcpendpoint.Principal{User: "alice", TokenID: tok, Scope: &ext.Scope{Servers: []string{"notes"}, Tools: []string{"notes/e*"}}}, nil
	}
	return benchVerifier{}.Verify(ctx, tok)
}

// BenchmarkScopedCall: a call through a scoped token's view beside the
// same call through an unscoped one (same run, same endpoint, a user with
// 40 tools on 4 servers): the endpoint adds nothing per call for a scope,
// since the view's table is built once (the scoped side's 3 more
// allocations are this verifier's new Scope per request).
func BenchmarkScopedCall(b *testing.B) {
	var tools []api.Tool
	for i := range 40 {
		tools = append(tools, api.Tool{Tool: ext.Tool{Name: fmt.Sprintf("s%d/t%d", i%4, i),
			InputSchema: json.RawMessage(`{"type":"object"}`)}, Extension: "mcp"})
	}
	tools = append(tools, api.Tool{Tool: ext.Tool{Name: "notes/echo",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, Extension: "mcp"})
	ep, err := mcpendpoint.New(&echoHost{tools: tools}, scopedVerifier{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	srv := httptest.NewServer(ep)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	args := json.RawMessage(`{"text":"hi"}`)
	for _, tok := range []string{"tok-alice", "tok-scoped"} {
		b.Run(tok[4:], func(b *testing.B) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &bearerRT{base: tr, token: tok}}, MaxRetries: -1},
				&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			call := callOK(cs, "notes__echo", args)
			b.ReportAllocs()
			for b.Loop() {
				if err := call(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
