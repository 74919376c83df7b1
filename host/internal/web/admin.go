package web

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/control"
)

// TokenAdmin gives the CLI's control socket (control.Tokens) the token and
// login-link administration of an auth.Store. It is safe for concurrent
// use.
type TokenAdmin struct {
	// Store issues and revokes the tokens.
	Store *auth.Store
	// BaseURL returns the web UI's public URL with its base path, e.g.
	// "http://127.0.0.1:7777"; login links point at its /settings/login.
	// It is a function because a server listening on port 0 knows its URL
	// only once it listens.
	BaseURL func() string
	// Host, when set, removes a deleted user's data and tells their
	// servers' trouble (control.Users); Apps, when set, counts their
	// connected apps. Without Host the user verbs still disable, enable
	// and delete in the Store.
	Host UserHost
	Apps ConnectedApps
}

var (
	_ control.Tokens = (*TokenAdmin)(nil)
	_ control.Users  = (*TokenAdmin)(nil)
)

// CreateToken issues a user's token, or an operator token when operator
// is set (user must then be empty).
func (t *TokenAdmin) CreateToken(ctx context.Context, user, name string, operator bool) (string, control.TokenInfo, error) {
	var (
		plain string
		tok   auth.Token
		err   error
	)
	switch {
	case operator && user != "":
		return "", control.TokenInfo{}, fmt.Errorf("an operator token has no user (got %q): %w", user, ext.ErrInvalidArgument)
	case operator:
		plain, tok, err = t.Store.CreateOperatorToken(ctx, name)
	default:
		plain, tok, err = t.Store.CreateToken(ctx, user, name)
	}
	if err != nil {
		return "", control.TokenInfo{}, mapAuthErr(err)
	}
	return plain, tokenInfo(tok), nil
}

// ListTokens lists a user's tokens, or every token when user is "".
func (t *TokenAdmin) ListTokens(ctx context.Context, user string) ([]control.TokenInfo, error) {
	toks, err := t.Store.ListTokens(ctx, user)
	if err != nil {
		return nil, mapAuthErr(err)
	}
	out := make([]control.TokenInfo, 0, len(toks))
	for _, tok := range toks {
		out = append(out, tokenInfo(tok))
	}
	return out, nil
}

// RevokeToken revokes a token at once, with its web sessions.
func (t *TokenAdmin) RevokeToken(ctx context.Context, id string) error {
	return mapAuthErr(t.Store.RevokeToken(ctx, id))
}

// CreateLoginLink returns a one-time sign-in URL for user.
func (t *TokenAdmin) CreateLoginLink(ctx context.Context, user string) (string, error) {
	code, err := t.Store.CreateLoginLink(ctx, user, 0)
	if err != nil {
		return "", mapAuthErr(err)
	}
	return LoginURL(t.BaseURL(), code), nil
}

// LoginURL is the sign-in link for a login code under baseURL (the web
// UI's public URL including its base path).
func LoginURL(baseURL, code string) string {
	return strings.TrimRight(baseURL, "/") + "/settings/login?code=" + url.QueryEscape(code)
}

func tokenInfo(t auth.Token) control.TokenInfo {
	return control.TokenInfo{ID: t.ID, User: t.User, Operator: t.Operator, Name: t.Name, Created: t.Created, LastUsed: t.LastUsed}
}

// mapAuthErr gives auth's errors the ext sentinels the control socket maps
// to exit codes and HTTP statuses.
func mapAuthErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrInvalidArgument):
		return ext.Mark(err, ext.ErrInvalidArgument)
	case errors.Is(err, auth.ErrNotFound):
		return ext.Mark(err, ext.ErrNotFound)
	case errors.Is(err, auth.ErrClosed):
		return ext.Mark(err, ext.ErrUnavailable)
	case errors.Is(err, auth.ErrUserDisabled):
		return ext.Mark(err, ext.ErrPermission)
	case errors.Is(err, auth.ErrConflict):
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	return err
}
