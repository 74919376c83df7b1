package mcpendpoint_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// ExampleNew serves a host's tools at /mcp and lists them with a go-sdk
// client, as an agent would.
func ExampleNew() {
	host := hosttest.New(nil)
	host.SetTools("alice",
		tool("github/create_issue", "Open an issue.", ext.ExposureDirect),
		tool("db/query", "Run SQL.", ext.ExposureDeferred),
		tool("py/exec", "Run code.", ext.ExposureCodemode),
	)
	verifier := &fakeVerifier{tokens: map[string]mcpendpoint.Principal{"secret-token": {User: "alice", TokenID: "tok_1"}}}
	ep, err := mcpendpoint.New(host, verifier, nil)
	if err != nil {
		panic(err)
	}
	defer ep.Close()
	mux := http.NewServeMux()
	mux.Handle("/mcp", ep)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp",
			HTTPClient: &http.Client{Transport: &bearerRT{base: tr, token: "secret-token"}}}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	for _, t := range res.Tools {
		fmt.Println(t.Name)
	}
	// A go-sdk v1.8 client speaks the stateless revision when the server
	// does: no session is opened.
	fmt.Println("protocol:", cs.InitializeResult().ProtocolVersion, "open sessions:", ep.Sessions())
	// Output:
	// github__create_issue
	// search_tools
	// protocol: 2026-07-28 open sessions: 0
}
