package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

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
	a.mu.Lock()
	a.sessions = func() int {
		n := 0
		for range s.Sessions() {
			n++
		}
		return n
	}
	a.mu.Unlock()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{PropagateRequestCancellation: true})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		fam, exp, ok := a.lookup(token, resource)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: fam.login, Scopes: fam.scopes, Expiration: exp}, nil
	}
	mcp.AddTool(s, &mcp.Tool{Name: "admin_echo", Description: "Send the text back; needs the admin scope (a step-up)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "admin: " + in.Text}}}, nil, nil
		})
	if a.o.legacy || a.o.noResourceMetadata {
		prm = "" // 2025-03-26: no resource metadata; the 401 names none
	}
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm, Scopes: a.o.scopes})(
		stepUp(a, prm, h))
	if a.o.openInitialize {
		protected = openSession(h, protected, a.o.openList)
	}
	mux.Handle("/mcp", protected)
	if a.o.legacy || a.o.noResourceMetadata {
		return
	}
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &oauthex.ProtectedResourceMetadata{Resource: resource, AuthorizationServers: []string{a.base},
			ScopesSupported: a.o.scopes, BearerMethodsSupported: []string{"header"}})
	})
}

// peekedMessage is what the handlers here read of a JSON-RPC message.
type peekedMessage struct {
	Method string `json:"method"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

// peekMessage reads a POST's message (1 MiB at most) and puts the body
// back for the next handler; on a body it cannot read it answers 400 and
// returns false.
func peekMessage(w http.ResponseWriter, r *http.Request) (peekedMessage, bool) {
	var msg peekedMessage
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return msg, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	_ = json.Unmarshal(body, &msg)
	return msg, true
}

// stepUp answers a call of admin_echo whose token lacks the admin scope
// with 403 insufficient_scope and the scopes to ask for (MCP's step-up
// authorization); everything else passes.
func stepUp(a *authServer, prm string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		msg, ok := peekMessage(w, r)
		if !ok {
			return
		}
		if msg.Method == "tools/call" && msg.Params.Name == "admin_echo" {
			info := auth.TokenInfoFromContext(r.Context())
			if info == nil || !slices.Contains(info.Scopes, "admin") {
				want := strings.Join(append(slices.Clone(a.o.scopes), "admin"), " ")
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata=%q`, want, prm))
				http.Error(w, "insufficient scope", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// openSession lets a request without a token that opens or ends a session
// (initialize, a notification, DELETE), and with list tools/list, through
// to open; everything else goes to protected, which asks for the token.
func openSession(open, protected http.Handler, list bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			protected.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodDelete {
			open.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodPost {
			protected.ServeHTTP(w, r)
			return
		}
		msg, ok := peekMessage(w, r)
		if !ok {
			return
		}
		if msg.Method == "initialize" || strings.HasPrefix(msg.Method, "notifications/") || (list && msg.Method == "tools/list") {
			open.ServeHTTP(w, r)
			return
		}
		protected.ServeHTTP(w, r)
	})
}
