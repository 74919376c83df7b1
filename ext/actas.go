package ext

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// UserActor is the capability to act as a user: mint and revoke a scoped,
// expiring bearer token for the user's agent (the runner's), and list and
// call the user's tools within a scope (code mode's). The [Host] an
// extension receives implements it, in process and over the wire; reach
// it with a type assertion:
//
//	ua, ok := host.(ext.UserActor)
//
// Every method fails with [ErrPermission] unless the operator granted the
// extension this power (actAsUsers: true in its entry of the host's
// config): an extension that may act as any user is as powerful as every
// user together.
//
// What the host guarantees, granted or not: a call goes the way a call
// from the user's own /mcp session goes (the same user's tools, the same
// quarantine, drain, timeout and result cap); a tool outside the scope is
// [ErrNotFound], as a tool the user does not have; a minted token is
// always scoped and always expires, so it can never reach more than the
// user's own tools within its scope, and refuses at once when revoked or
// expired (its open /mcp sessions too). An extension calling tools on
// behalf of a caller passes the caller's scope on ([CallToolRequest.Scope])
// so that the caller is never widened; the host cannot tell a forgotten
// scope from a deliberate nil, which is why the grant is the operator's.
type UserActor interface {
	// MintUserToken issues a bearer token for user that reaches req.Scope
	// (required) until req.Expires (required, in the future).
	MintUserToken(ctx context.Context, req *MintTokenRequest) (*MintedToken, error)
	// RevokeUserToken revokes a token this extension minted; its open
	// sessions close at once. Revoking one already gone is not an error.
	RevokeUserToken(ctx context.Context, tokenID string) error
	// ListToolsAs returns the user's tools within scope (nil: all), as
	// the host registered them, every exposure.
	ListToolsAs(ctx context.Context, user string, scope *Scope) ([]Tool, error)
	// CallToolAs calls one of the user's tools within scope (nil: all).
	// The result arrives as Raw.
	CallToolAs(ctx context.Context, req *CallAsRequest) (*CallToolResult, error)
}

// MintTokenRequest asks for a scoped, expiring token of User.
type MintTokenRequest struct {
	User string
	// Name is what the user's token list shows, e.g. "runner notes".
	Name    string
	Scope   *Scope
	Expires time.Time
}

// MintedToken is a minted token: Token is the secret (give it to the
// agent only, never log it), ID names it for revocation.
type MintedToken struct {
	Token string
	ID    string
}

// CallAsRequest is a call of one of User's tools within Scope.
type CallAsRequest struct {
	User string
	// Scope bounds the call (nil: every tool of the user).
	Scope *Scope
	// Name is the tool's host name, e.g. "notes/add".
	Name string
	// Arguments is a JSON object, raw (nil: {}).
	Arguments json.RawMessage
	// Conversation, when set, binds the call to a conversation of User.
	Conversation string
}

func scopeToProto(s *Scope) *extpb.Scope {
	if s == nil {
		return nil
	}
	return &extpb.Scope{Servers: s.Servers, Tools: s.Tools}
}

func scopeFromProto(s *extpb.Scope) *Scope {
	if s == nil {
		return nil
	}
	return &Scope{Servers: s.GetServers(), Tools: s.GetTools()}
}

// actor returns the host's UserActor, or an error saying it has none.
func (s *hostServer) actor() (UserActor, error) {
	ua, ok := s.impl.(UserActor)
	if !ok {
		return nil, fmt.Errorf("this host cannot act as users: %w", ErrUnimplemented)
	}
	return ua, nil
}

func (s *hostServer) MintUserToken(ctx context.Context, req *extpb.MintUserTokenRequest) (*extpb.MintUserTokenResponse, error) {
	ua, err := s.actor()
	if err != nil {
		return nil, err
	}
	var exp time.Time
	if ms := req.GetExpiresUnixMs(); ms != 0 {
		exp = time.UnixMilli(ms)
	}
	t, err := ua.MintUserToken(ctx, &MintTokenRequest{User: req.GetUserId(), Name: req.GetName(), Scope: scopeFromProto(req.GetScope()), Expires: exp})
	if err != nil {
		return nil, err
	}
	return &extpb.MintUserTokenResponse{Token: t.Token, TokenId: t.ID}, nil
}

func (s *hostServer) RevokeUserToken(ctx context.Context, req *extpb.RevokeUserTokenRequest) (*extpb.RevokeUserTokenResponse, error) {
	ua, err := s.actor()
	if err != nil {
		return nil, err
	}
	return &extpb.RevokeUserTokenResponse{}, ua.RevokeUserToken(WithRevokeReason(ctx, req.GetReason()), req.GetTokenId())
}

func (s *hostServer) ListToolsAs(ctx context.Context, req *extpb.ListToolsAsRequest) (*extpb.ListToolsAsResponse, error) {
	ua, err := s.actor()
	if err != nil {
		return nil, err
	}
	tools, err := ua.ListToolsAs(ctx, req.GetUserId(), scopeFromProto(req.GetScope()))
	if err != nil {
		return nil, err
	}
	return &extpb.ListToolsAsResponse{Tools: toolsToProto(tools)}, nil
}

func (s *hostServer) CallToolAs(ctx context.Context, req *extpb.CallToolAsRequest) (*extpb.CallToolAsResponse, error) {
	ua, err := s.actor()
	if err != nil {
		return nil, err
	}
	res, err := ua.CallToolAs(ctx, &CallAsRequest{
		User: req.GetUserId(), Scope: scopeFromProto(req.GetScope()), Name: req.GetName(),
		Arguments: raw(req.GetArguments()), Conversation: req.GetConversationId(),
	})
	if err != nil {
		return nil, err
	}
	b, err := res.JSON()
	if err != nil {
		return nil, err
	}
	return &extpb.CallToolAsResponse{Result: b, IsError: res.IsError}, nil
}

var _ UserActor = (*hostClient)(nil)

// MintUserToken implements [UserActor] over the wire.
func (h *hostClient) MintUserToken(ctx context.Context, req *MintTokenRequest) (*MintedToken, error) {
	var exp int64
	if !req.Expires.IsZero() {
		exp = req.Expires.UnixMilli()
	}
	resp, err := h.client.MintUserToken(ctx, &extpb.MintUserTokenRequest{UserId: req.User, Name: req.Name, Scope: scopeToProto(req.Scope), ExpiresUnixMs: exp})
	if err != nil {
		return nil, fromStatus(err)
	}
	return &MintedToken{Token: resp.GetToken(), ID: resp.GetTokenId()}, nil
}

// RevokeUserToken implements [UserActor] over the wire.
func (h *hostClient) RevokeUserToken(ctx context.Context, tokenID string) error {
	_, err := h.client.RevokeUserToken(ctx, &extpb.RevokeUserTokenRequest{TokenId: tokenID, Reason: RevokeReason(ctx)})
	return fromStatus(err)
}

type revokeReasonKey struct{}

// WithRevokeReason returns ctx carrying why the extension revokes a token
// (e.g. how a runner's session ended: "ok", "killed at time limit"), for
// [UserActor.RevokeUserToken]: the host's audit record of the revocation
// (kind token) says it, as the extension's own word. Never a secret.
func WithRevokeReason(ctx context.Context, reason string) context.Context {
	if reason == "" {
		return ctx
	}
	return context.WithValue(ctx, revokeReasonKey{}, reason)
}

// RevokeReason returns the reason [WithRevokeReason] put in ctx, or "".
func RevokeReason(ctx context.Context) string {
	r, _ := ctx.Value(revokeReasonKey{}).(string)
	return r
}

// ListToolsAs implements [UserActor] over the wire.
func (h *hostClient) ListToolsAs(ctx context.Context, user string, scope *Scope) ([]Tool, error) {
	resp, err := h.client.ListToolsAs(ctx, &extpb.ListToolsAsRequest{UserId: user, Scope: scopeToProto(scope)})
	if err != nil {
		return nil, fromStatus(err)
	}
	return toolsFromProto(resp.GetTools()), nil
}

// CallToolAs implements [UserActor] over the wire.
func (h *hostClient) CallToolAs(ctx context.Context, req *CallAsRequest) (*CallToolResult, error) {
	resp, err := h.client.CallToolAs(ctx, &extpb.CallToolAsRequest{
		UserId: req.User, Scope: scopeToProto(req.Scope), Name: req.Name, Arguments: req.Arguments, ConversationId: req.Conversation,
	})
	if err != nil {
		return nil, fromStatus(err)
	}
	return &CallToolResult{Raw: raw(resp.GetResult()), IsError: resp.GetIsError()}, nil
}
