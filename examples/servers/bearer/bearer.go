package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/servers/internal/bigtext"
)

// tokenKey is the short public name of a token: the first 12 hex digits
// of its SHA-256.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// options configures the handler.
type options struct {
	// tokens are the accepted tokens; empty accepts any non-empty token.
	tokens []string
	// reveal lets whoami return the token itself (tests only).
	reveal bool
	// apiKey, when set, must be every request's X-API-Key header.
	apiKey string
	// stateless serves the stateless protocol (2026-07-28) instead of
	// stateful sessions (2025-11-25).
	stateless bool
	// echoDescription replaces echo's description when set.
	echoDescription string
}

type echoIn struct {
	Text string `json:"text,omitempty" jsonschema:"the text to send back"`
}

type whoamiOut struct {
	User  string `json:"user" jsonschema:"the hash prefix that names the caller's token"`
	Token string `json:"token,omitempty" jsonschema:"the token itself, only in test mode"`
}

// newHandler returns the MCP endpoint: a Streamable HTTP handler behind a
// bearer-token check that answers 401 without a valid token.
func newHandler(o options) http.Handler { return handlerFor(newServer(o), o) }

// newServer returns the MCP server behind the handler.
func newServer(o options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "agenthost-example-bearer", Version: "v0.1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Say which bearer token the request carried (by hash)."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, whoamiOut, error) {
			info := req.Extra.TokenInfo
			if info == nil {
				return nil, whoamiOut{}, fmt.Errorf("no token information")
			}
			out := whoamiOut{User: info.UserID}
			if o.reveal {
				out.Token, _ = info.Extra["token"].(string)
			}
			return nil, out, nil
		})
	desc := o.echoDescription
	if desc == "" {
		desc = "Send the text back (for benchmarks)."
	}
	addEcho(s, desc)
	bigtext.AddTool(s)
	return s
}

// addEcho adds (or replaces, which tells the sessions the list changed)
// the echo tool with description desc.
func addEcho(s *mcp.Server, desc string) {
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: desc},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
}

// handlerFor serves s behind the bearer-token check.
func handlerFor(s *mcp.Server, o options) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: o.stateless, PropagateRequestCancellation: true})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if len(o.tokens) > 0 {
			ok := false
			for _, t := range o.tokens {
				if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
					ok = true
				}
			}
			if !ok {
				return nil, auth.ErrInvalidToken
			}
		}
		info := &auth.TokenInfo{UserID: tokenKey(token), Expiration: time.Now().Add(time.Hour)}
		if o.reveal {
			info.Extra = map[string]any{"token": token}
		}
		return info, nil
	}
	withToken := auth.RequireBearerToken(verify, nil)(h)
	if o.apiKey == "" {
		return withToken
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-API-Key")), []byte(o.apiKey)) != 1 {
			http.Error(w, "a missing or wrong X-API-Key", http.StatusUnauthorized)
			return
		}
		withToken.ServeHTTP(w, r)
	})
}
