package mcpendpoint_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// BenchmarkStatelessCall measures one call to an in-process echo host, go-sdk
// client and endpoint in this process (both ends' cost): on a 2025-11-25
// session, on the stateless revision's fast path (an unpinned client),
// and on the stateless revision through go-sdk's handler (the fast path
// off).
func BenchmarkStatelessCall(b *testing.B) {
	h := &echoHost{tools: []api.Tool{{Tool: ext.Tool{Name: "notes/echo",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, Extension: "mcp"}}}
	ep, err := mcpendpoint.New(h, benchVerifier{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	srv := httptest.NewServer(ep)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	connect := func(version string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &bearerRT{base: tr, token: "tok-alice"}}, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	session, stateless := connect("2025-11-25"), connect("")
	defer session.Close()
	defer stateless.Close()
	args := json.RawMessage(`{"text":"hi"}`)
	for _, c := range []struct {
		name string
		cs   *mcp.ClientSession
		fast bool
	}{{"session", session, true}, {"stateless-fast", stateless, true}, {"stateless-gosdk", stateless, false}} {
		b.Run(c.name, func(b *testing.B) {
			mcpendpoint.SetStatelessFast(ep, c.fast)
			call := callOK(c.cs, "notes__echo", args)
			b.ReportAllocs()
			for b.Loop() {
				if err := call(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
