package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/audit"
)

// TokenMinter issues and revokes the scoped, expiring tokens extensions
// mint for users ([ext.UserActor]); agenthost serve gives the host its
// auth store's ([Host.SetTokenMinter]). Its methods are called
// concurrently.
type TokenMinter interface {
	// MintToken issues a token of user named name, minted by extension
	// extName, reaching scope until expires. It returns the token (shown
	// once) and its ID.
	MintToken(ctx context.Context, extName, user, name string, scope *ext.Scope, expires time.Time) (token, id string, err error)
	// RevokeMinted revokes token id when extension extName minted it;
	// one it did not mint is [ext.ErrNotFound].
	// It returns the token's user and name ("" when it was gone already).
	RevokeMinted(ctx context.Context, extName, id string) (user, name string, err error)
}

// MaxMintedTTL is the longest a minted token may live.
const MaxMintedTTL = 24 * time.Hour

// minter holds the host's TokenMinter (set once serve has its store).
type minter struct {
	mu sync.RWMutex
	m  TokenMinter
}

// SetTokenMinter gives the host the store of the tokens extensions mint.
// Until it is set, [ext.UserActor.MintUserToken] fails with
// [ext.ErrUnavailable].
func (h *Host) SetTokenMinter(m TokenMinter) {
	h.minter.mu.Lock()
	h.minter.m = m
	h.minter.mu.Unlock()
}

var _ ext.UserActor = (*hostServices)(nil)

// granted checks the operator's grant (actAsUsers) of the extension.
func (s *hostServices) granted(what string) error {
	if e := s.h.exts[s.ext]; e != nil && e.actAsUsers {
		return nil
	}
	return fmt.Errorf("extension %q may not %s: the operator has not granted it actAsUsers: %w", s.ext, what, ext.ErrPermission)
}

// MintUserToken implements [ext.UserActor]: the token is always scoped
// (servers required) and always expires (within [MaxMintedTTL]). It
// reaches what its user has within the scope at each request, never
// more: the scope narrows the user's own tools, it grants none.
func (s *hostServices) MintUserToken(ctx context.Context, req *ext.MintTokenRequest) (*ext.MintedToken, error) {
	if err := s.granted("mint tokens"); err != nil {
		return nil, err
	}
	if err := checkUser(req.User); err != nil {
		return nil, err
	}
	if req.Scope == nil {
		return nil, fmt.Errorf("a minted token needs a scope naming its servers: %w", ext.ErrInvalidArgument)
	}
	now := time.Now()
	if !req.Expires.After(now) || req.Expires.Sub(now) > MaxMintedTTL {
		return nil, fmt.Errorf("a minted token needs an expiry in the future, within %v: %w", MaxMintedTTL, ext.ErrInvalidArgument)
	}
	s.h.minter.mu.RLock()
	m := s.h.minter.m
	s.h.minter.mu.RUnlock()
	if m == nil {
		return nil, fmt.Errorf("this host issues no tokens (no token store): %w", ext.ErrUnavailable)
	}
	tok, id, err := m.MintToken(ctx, s.ext, req.User, req.Name, req.Scope, req.Expires)
	if err != nil {
		return nil, err
	}
	s.h.logger.Info("token minted by an extension", "extension", s.ext, "user", req.User, "token", id, "scope", req.Scope.String(), "expires", req.Expires)
	s.h.AuditEvent(AuditRecord{Kind: audit.KindExtension, User: req.User, Credential: "ext:" + s.ext, Server: s.ext,
		Tool: "token minted: " + req.Name, Outcome: audit.OutcomeOK,
		Reason: "token " + id + ", scope " + req.Scope.String() + ", expires " + req.Expires.UTC().Format(time.RFC3339)})
	return &ext.MintedToken{Token: tok, ID: id}, nil
}

// RevokeUserToken implements [ext.UserActor]: only a token this
// extension minted; one already gone is no error.
func (s *hostServices) RevokeUserToken(ctx context.Context, id string) error {
	if err := s.granted("revoke tokens"); err != nil {
		return err
	}
	s.h.minter.mu.RLock()
	m := s.h.minter.m
	s.h.minter.mu.RUnlock()
	if m == nil {
		return fmt.Errorf("this host issues no tokens (no token store): %w", ext.ErrUnavailable)
	}
	user, name, err := m.RevokeMinted(ctx, s.ext, id)
	if err != nil || user == "" {
		return err
	}
	// The reason is the extension's word (e.g. how a runner's session
	// ended); the user is the token's, from the store, not from it.
	reason := "token " + id
	if r := ext.RevokeReason(ctx); r != "" {
		reason += ": " + r
	}
	s.h.AuditEvent(AuditRecord{Kind: audit.KindExtension, User: user, Credential: "ext:" + s.ext, Server: s.ext,
		Tool: "token revoked: " + name, Outcome: audit.OutcomeOK, Reason: reason})
	return nil
}

// ListToolsAs implements [ext.UserActor]: the user's tools within scope.
func (s *hostServices) ListToolsAs(ctx context.Context, user string, scope *ext.Scope) ([]ext.Tool, error) {
	if err := s.granted("list a user's tools"); err != nil {
		return nil, err
	}
	scope = scope.Clone()
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	tools, err := s.h.Tools(ctx, user)
	if err != nil {
		return nil, err
	}
	out := make([]ext.Tool, 0, len(tools))
	for _, t := range tools {
		if st, ok := scopedTool(scope, t.Tool); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// CallToolAs implements [ext.UserActor]: the call goes the way an /mcp
// call of the user goes ([Host.CallTool]: the user's registry, the
// server's quarantine, drain, timeout and result cap), within scope.
func (s *hostServices) CallToolAs(ctx context.Context, req *ext.CallAsRequest) (*ext.CallToolResult, error) {
	if err := s.granted("call tools as a user"); err != nil {
		return nil, err
	}
	scope := req.Scope.Clone()
	if err := scope.Validate(); err != nil {
		return nil, err
	}
	return s.h.CallTool(ctx, &CallRequest{User: req.User, Conversation: req.Conversation, Name: req.Name, Arguments: req.Arguments, Scope: scope})
}
