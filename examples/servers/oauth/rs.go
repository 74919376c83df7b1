package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

type whoamiOut struct {
	Login string `json:"login" jsonschema:"the provider account the request's token was issued to"`
}

type echoIn struct {
	Text string `json:"text,omitempty" jsonschema:"the text to send back"`
}

// routes serves the protected resource: /mcp (a go-sdk MCP server behind
// auth.RequireBearerToken, whose verifier asks the authorization server:
// the token must be live and issued for this resource) and its RFC 9728
// metadata.
func routes(mux *http.ServeMux, a *authServer) {
	resource := a.base + "/mcp"
	prm := a.base + "/.well-known/oauth-protected-resource/mcp"
	s := mcp.NewServer(&mcp.Implementation{Name: "agenthost-example-oauth", Version: "v0.1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Say which provider account the request's token belongs to."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoamiOut, error) {
			if req.Extra.TokenInfo == nil {
				return nil, whoamiOut{}, fmt.Errorf("no token information")
			}
			return nil, whoamiOut{Login: req.Extra.TokenInfo.UserID}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Send the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{PropagateRequestCancellation: true})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		fam, exp, ok := a.lookup(token, resource)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: fam.login, Scopes: fam.scopes, Expiration: exp}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm, Scopes: a.o.scopes})(h))
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &oauthex.ProtectedResourceMetadata{Resource: resource, AuthorizationServers: []string{a.base},
			ScopesSupported: a.o.scopes, BearerMethodsSupported: []string{"header"}})
	})
}
