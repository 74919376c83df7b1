// Command actas is an example extension that acts as its caller through
// [ext.UserActor], the way code mode and the runner do: it lists and
// calls the calling user's tools within the caller's own scope, and
// mints and revokes a scoped, expiring token for the calling user's
// agent. It needs the operator's grant (actAsUsers: true in its config
// entry); without it every tool answers with the host's refusal.
//
// It never acts for anyone but the calling user, and never wider than the
// caller: calls and lists carry the caller's scope
// ([ext.CallToolRequest.Scope]), and a token it mints for a scoped caller
// must lie within the caller's scope ([ext.Scope.Within]).
//
// Tools:
//
//	actas/list   {}                                   the caller's tools, by name
//	actas/call   {"name": "server/tool", "arguments": {...}, "unscoped": false}
//	actas/mint   {"servers": [...], "tools": [...], "seconds": N}
//	actas/revoke {"id": "tok_..."}
package main

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/agenthost/agenthost/ext"
)

type actas struct{ host ext.Host }

var _ ext.ToolCaller = (*actas)(nil)

func (a *actas) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{
		Name: "actas", Version: "v1", Description: "Calls your tools and mints tokens for your agents, within your scope.",
		Capabilities: []ext.Capability{ext.CapabilityTools},
	}, nil
}

func (a *actas) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	a.host = req.Host
	obj := json.RawMessage(`{"type":"object"}`)
	return req.Host.SetSystemTools(ctx, []ext.Tool{
		{Name: "actas/list", Description: "List the tools you may call, within your token's scope.", InputSchema: obj},
		{Name: "actas/call", Description: "Call one of your tools by its host name (server/tool).", InputSchema: obj},
		{Name: "actas/mint", Description: "Mint a scoped, expiring token for your agent.", InputSchema: obj},
		{Name: "actas/revoke", Description: "Revoke a token minted here.", InputSchema: obj},
	})
}

func (a *actas) Shutdown(context.Context) error { return nil }

func (a *actas) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	ua, ok := a.host.(ext.UserActor)
	if !ok {
		return ext.ErrorResult("this host cannot act as users"), nil
	}
	if req.User == "" {
		return ext.ErrorResult("no calling user"), nil
	}
	var args struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Servers   []string        `json:"servers"`
		Tools     []string        `json:"tools"`
		Seconds   int             `json:"seconds"`
		ID        string          `json:"id"`
		// Unscoped drops the caller's scope from actas/call: what a buggy
		// or hostile extension would do. The host still refuses to widen
		// the caller's conversation (the test shows it).
		Unscoped bool `json:"unscoped"`
	}
	if len(req.Arguments) > 0 {
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return ext.ErrorResult("arguments: %v", err), nil
		}
	}
	switch req.Name {
	case "actas/list":
		tools, err := ua.ListToolsAs(ctx, req.User, req.Scope)
		if err != nil {
			return ext.ErrorResult("%s", err), nil
		}
		names := make([]string, 0, len(tools))
		for _, t := range tools {
			names = append(names, t.Name)
		}
		return ext.TextResult(strings.Join(names, "\n")), nil
	case "actas/call":
		scope := req.Scope
		if args.Unscoped {
			scope = nil
		}
		res, err := ua.CallToolAs(ctx, &ext.CallAsRequest{User: req.User, Scope: scope, Name: args.Name, Arguments: args.Arguments, Conversation: req.Conversation})
		if err != nil {
			return ext.ErrorResult("%s", err), nil
		}
		return res, nil
	case "actas/mint":
		scope := &ext.Scope{Servers: args.Servers, Tools: args.Tools}
		if !scope.Within(req.Scope) {
			return ext.ErrorResult("scope %s is wider than yours (%s)", scope, req.Scope), nil
		}
		t, err := ua.MintUserToken(ctx, &ext.MintTokenRequest{User: req.User, Name: "actas agent", Scope: scope,
			Expires: time.Now().Add(time.Duration(max(args.Seconds, 1)) * time.Second)})
		if err != nil {
			return ext.ErrorResult("%s", err), nil
		}
		b, _ := json.Marshal(map[string]string{"token": t.Token, "id": t.ID})
		return ext.TextResult(string(b)), nil
	case "actas/revoke":
		if err := ua.RevokeUserToken(ctx, args.ID); err != nil {
			return ext.ErrorResult("%s", err), nil
		}
		return ext.TextResult("revoked " + args.ID), nil
	}
	return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
}

func main() { ext.Serve(&actas{}) }
