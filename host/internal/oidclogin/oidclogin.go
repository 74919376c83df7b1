package oidclogin

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Config configures [New].
type Config struct {
	// Name is the provider's name on the sign-in button.
	Name string
	// Issuer is the provider's issuer URL; ClientID the client registered
	// there.
	Issuer, ClientID string
	// ClientSecret returns the client secret (read at each sign-in, so
	// that a secret set or changed while serving is used).
	ClientSecret func(ctx context.Context) (string, error)
	// RedirectURL returns the callback URL registered at the provider.
	RedirectURL func() string
	// UserClaim and GroupsClaim name the ID token's claims of the user's
	// ID and groups.
	UserClaim, GroupsClaim string
	// Scopes are asked for besides "openid".
	Scopes []string
	// The admission rule (see the package doc).
	AllowedDomains, AllowedGroups, AllowedUsers []string
	// ValidUser reports whether a claim's value is a valid user ID.
	ValidUser func(string) bool
	// Users records admitted people and disables refused ones.
	Users Users
	// HTTPClient makes the calls to the provider (default: a client with a
	// 15 s timeout).
	HTTPClient *http.Client
	// Logger receives refusals and errors (never a token or secret).
	Logger *slog.Logger
	_      struct{}
}

// Identity is a person the provider vouched for.
type Identity struct {
	User    string // the user's ID (the UserClaim's value)
	Issuer  string
	Subject string // the provider's stable ID of the person
	Email   string // "" unless verified
	Groups  []string
	// RefreshToken is the provider's refresh token from this sign-in, ""
	// when it gave none: for [Login.Recheck]. A secret: never logged.
	RefreshToken string
}

// Users is what a sign-in needs of the host's users.
type Users interface {
	// Admitted records the sign-in of an admitted person: it creates
	// their user on first sight, or updates email, subject, groups and
	// last seen. An error matching [ErrDisabled] refuses a disabled user.
	Admitted(ctx context.Context, id Identity) error
	// NotAdmitted is told that the rule refused the person: a user bound
	// to this identity is disabled (they left the group).
	NotAdmitted(ctx context.Context, id Identity, reason string) error
}

// ErrDisabled is a user the operator disabled.
var ErrDisabled = errors.New("the user is disabled")

// Refusal is a person the provider vouched for (or not) whom this host
// does not sign in; Reason is safe to show them.
type Refusal struct {
	User   string // "" when the ID token named no valid user
	Reason string
}

func (r *Refusal) Error() string { return "sign-in refused: " + r.Reason }

// State is what the browser that began a sign-in keeps until the
// callback.
type State struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
}

// Login signs people in with one provider. Create it with [New].
type Login struct {
	cfg Config
	hc  *http.Client

	mu       sync.Mutex
	provider *oidc.Provider // nil until discovered
}

// New returns the sign-in of cfg. It does not contact the provider.
func New(cfg Config) (*Login, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.ClientSecret == nil || cfg.RedirectURL == nil || cfg.Users == nil {
		return nil, errors.New("oidclogin: New: Issuer, ClientID, ClientSecret, RedirectURL and Users are required")
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = "email"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.ValidUser == nil {
		cfg.ValidUser = func(s string) bool { return s != "" }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	return &Login{cfg: cfg, hc: hc}, nil
}

// Name is the provider's name for the sign-in button.
func (l *Login) Name() string { return l.cfg.Name }

func (l *Login) ctx(ctx context.Context) context.Context { return oidc.ClientContext(ctx, l.hc) }

// discover returns the provider, fetching its discovery document on first
// use. Its remote key set keeps the context it was made with for every
// later fetch of the keys, so that context is ctx without its
// cancellation (the HTTP client's timeout bounds each fetch).
func (l *Login) discover(ctx context.Context) (*oidc.Provider, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.provider != nil {
		return l.provider, nil
	}
	p, err := oidc.NewProvider(l.ctx(context.WithoutCancel(ctx)), l.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidclogin: discovering the provider %s: %w", l.cfg.Issuer, err)
	}
	l.provider = p
	return p, nil
}

func (l *Login) oauth2Config(p *oidc.Provider, secret string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: l.cfg.ClientID, ClientSecret: secret, Endpoint: p.Endpoint(), RedirectURL: l.cfg.RedirectURL(),
		Scopes: append([]string{oidc.ScopeOpenID}, slices.DeleteFunc(slices.Clone(l.cfg.Scopes), func(s string) bool { return s == oidc.ScopeOpenID })...),
	}
}

// Begin starts a sign-in: it returns the provider's authorization URL and
// the state the browser must keep until the callback.
func (l *Login) Begin(ctx context.Context) (string, State, error) {
	p, err := l.discover(ctx)
	if err != nil {
		return "", State{}, err
	}
	st := State{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier()}
	u := l.oauth2Config(p, "").AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier))
	return u, st, nil
}

// ProviderError is the provider's own refusal at the callback (the person
// cancelled, or the provider refused the client); safe to show.
type ProviderError struct{ Code, Description string }

func (e *ProviderError) Error() string {
	if e.Description != "" {
		return "the identity provider answered " + e.Code + ": " + e.Description
	}
	return "the identity provider answered " + e.Code
}

// ErrBadState is a callback whose state is not the one its browser began
// with (or a browser without one): a forged or stale callback.
var ErrBadState = errors.New("oidclogin: the callback's state does not match this browser's sign-in")

// Finish completes a sign-in at the callback: q is the callback's query,
// st what the browser kept. It returns the signed-in user, or an error: a
// [*Refusal], a [*ProviderError], [ErrBadState], or another (the
// provider unreachable, a token that fails the checks).
func (l *Login) Finish(ctx context.Context, st State, q url.Values) (string, error) {
	if e := q.Get("error"); e != "" {
		return "", &ProviderError{Code: e, Description: q.Get("error_description")}
	}
	if st.State == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(st.State)) != 1 {
		return "", ErrBadState
	}
	p, err := l.discover(ctx)
	if err != nil {
		return "", err
	}
	secret, err := l.cfg.ClientSecret(ctx)
	if err != nil {
		return "", fmt.Errorf("oidclogin: reading the client secret: %w", err)
	}
	tok, err := l.oauth2Config(p, secret).Exchange(l.ctx(ctx), q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return "", fmt.Errorf("oidclogin: exchanging the code at %s: %w", l.cfg.Issuer, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", fmt.Errorf("oidclogin: the provider %s answered without an ID token", l.cfg.Issuer)
	}
	claims, sub, err := l.verify(ctx, p, raw, st.Nonce)
	if err != nil {
		return "", err
	}
	if err := l.userinfo(ctx, p, tok, sub, claims); err != nil {
		return "", err
	}
	id, err := l.identity(claims, sub)
	if err != nil {
		return "", err
	}
	id.RefreshToken = tok.RefreshToken
	if err := l.apply(ctx, id, "sign-in"); err != nil {
		return "", err
	}
	return id.User, nil
}

// apply applies the admission rule to id: an admitted person is handed to
// Users.Admitted, a refused one to Users.NotAdmitted, and gets a
// [*Refusal].
func (l *Login) apply(ctx context.Context, id Identity, what string) error {
	if reason := l.admit(id); reason != "" {
		l.cfg.Logger.Warn("oidc: "+what+" refused by the admission rule", "user", id.User, "reason", reason)
		if nerr := l.cfg.Users.NotAdmitted(ctx, id, reason); nerr != nil {
			return fmt.Errorf("oidclogin: disabling %s: %w", id.User, nerr)
		}
		return &Refusal{User: id.User, Reason: reason}
	}
	if err := l.cfg.Users.Admitted(ctx, id); err != nil {
		if errors.Is(err, ErrDisabled) {
			return &Refusal{User: id.User, Reason: "your account on this host has been disabled by its operator"}
		}
		return fmt.Errorf("oidclogin: recording the %s of %s: %w", what, id.User, err)
	}
	return nil
}

// Recheck asks the provider again about a signed-in person: id as the
// users table knows them (User, Issuer, Subject) with the refresh token
// kept from their sign-in. A provider that refuses the refresh
// (invalid_grant: the person was removed, or their sign-in there ended),
// or whose new ID token names another person or one the rule no longer
// admits, gets Users.NotAdmitted (the user is disabled) and a
// [*Refusal]. Admitted, the person is recorded again (Users.Admitted,
// groups updated, with the refresh token the provider gave: providers
// rotate them). Any other error (the provider unreachable) decides
// nothing.
func (l *Login) Recheck(ctx context.Context, id Identity) error {
	p, err := l.discover(ctx)
	if err != nil {
		return err
	}
	secret, err := l.cfg.ClientSecret(ctx)
	if err != nil {
		return fmt.Errorf("oidclogin: reading the client secret: %w", err)
	}
	tok, err := l.oauth2Config(p, secret).TokenSource(l.ctx(ctx), &oauth2.Token{RefreshToken: id.RefreshToken}).Token()
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re) && re.ErrorCode == "invalid_grant":
		return l.refuse(ctx, id, "the identity provider no longer vouches for you (your account or your sign-in there was ended)")
	case err != nil:
		return fmt.Errorf("oidclogin: refreshing %s at %s: %w", id.User, l.cfg.Issuer, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return fmt.Errorf("oidclogin: the provider %s refreshed %s without an ID token", l.cfg.Issuer, id.User)
	}
	t, err := p.Verifier(&oidc.Config{ClientID: l.cfg.ClientID}).Verify(l.ctx(ctx), raw)
	if err != nil {
		return fmt.Errorf("oidclogin: the refreshed ID token from %s failed its checks: %w", l.cfg.Issuer, err)
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return fmt.Errorf("oidclogin: reading the refreshed ID token's claims: %w", err)
	}
	if err := l.userinfo(ctx, p, tok, t.Subject, claims); err != nil {
		return err
	}
	now, err := l.identity(claims, t.Subject)
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return l.refuse(ctx, id, r.Reason)
	case err != nil:
		return err
	case now.Subject != id.Subject || now.User != id.User:
		return l.refuse(ctx, id, "the identity provider now names another person")
	}
	now.RefreshToken = cmp.Or(tok.RefreshToken, id.RefreshToken)
	return l.apply(ctx, now, "re-check")
}

func (l *Login) refuse(ctx context.Context, id Identity, reason string) error {
	l.cfg.Logger.Warn("oidc: re-check refused", "user", id.User, "reason", reason)
	if err := l.cfg.Users.NotAdmitted(ctx, id, reason); err != nil {
		return fmt.Errorf("oidclogin: disabling %s: %w", id.User, err)
	}
	return &Refusal{User: id.User, Reason: reason}
}

// verify checks an ID token: signature by the provider's keys, issuer,
// audience, expiry (go-oidc), then the nonce. It returns the claims and
// the subject.
func (l *Login) verify(ctx context.Context, p *oidc.Provider, raw, nonce string) (map[string]any, string, error) {
	t, err := p.Verifier(&oidc.Config{ClientID: l.cfg.ClientID}).Verify(l.ctx(ctx), raw)
	if err != nil {
		return nil, "", fmt.Errorf("oidclogin: the ID token from %s failed its checks: %w", l.cfg.Issuer, err)
	}
	if nonce == "" || subtle.ConstantTimeCompare([]byte(t.Nonce), []byte(nonce)) != 1 {
		return nil, "", fmt.Errorf("oidclogin: the ID token from %s carries another sign-in's nonce", l.cfg.Issuer)
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return nil, "", fmt.Errorf("oidclogin: reading the ID token's claims: %w", err)
	}
	return claims, t.Subject, nil
}

// userinfo fills in, from the provider's userinfo endpoint, the claims
// the ID token lacks of those the sign-in reads (the user's, email and
// email_verified, groups): providers that follow OIDC Core 5.4 strictly
// put the email and profile claims there only, when an access token is
// issued. The answer counts only when its sub is the ID token's (5.3.2);
// a provider without the endpoint leaves the claims as they are.
func (l *Login) userinfo(ctx context.Context, p *oidc.Provider, tok *oauth2.Token, sub string, claims map[string]any) error {
	want := []string{l.cfg.UserClaim, "email", "email_verified", l.cfg.GroupsClaim}
	missing := false
	for _, c := range want {
		if _, ok := claims[c]; !ok {
			missing = true
		}
	}
	if !missing || p.UserInfoEndpoint() == "" || tok.AccessToken == "" {
		return nil
	}
	ui, err := p.UserInfo(l.ctx(ctx), oauth2.StaticTokenSource(tok))
	if err != nil {
		return fmt.Errorf("oidclogin: reading the userinfo of %s: %w", l.cfg.Issuer, err)
	}
	if ui.Subject != sub {
		return fmt.Errorf("oidclogin: the userinfo of %s names another subject than the ID token", l.cfg.Issuer)
	}
	var more map[string]any
	if err := ui.Claims(&more); err != nil {
		return fmt.Errorf("oidclogin: reading the userinfo's claims: %w", err)
	}
	for _, c := range want {
		if _, ok := claims[c]; !ok {
			if v, ok := more[c]; ok {
				claims[c] = v
			}
		}
	}
	return nil
}

// identity reads the person from the ID token's claims.
func (l *Login) identity(claims map[string]any, sub string) (Identity, error) {
	id := Identity{Issuer: l.cfg.Issuer, Subject: sub}
	if email, _ := claims["email"].(string); email != "" && verified(claims["email_verified"]) {
		id.Email = strings.ToLower(email)
	}
	switch v := claims[l.cfg.GroupsClaim].(type) {
	case string:
		id.Groups = []string{v}
	case []any:
		for _, g := range v {
			if s, ok := g.(string); ok && s != "" {
				id.Groups = append(id.Groups, s)
			}
		}
	}
	if l.cfg.UserClaim == "email" {
		if id.Email == "" {
			return id, &Refusal{Reason: "the identity provider did not vouch for a verified email address"}
		}
		id.User = id.Email
	} else {
		s, _ := claims[l.cfg.UserClaim].(string)
		if s == "" {
			return id, &Refusal{Reason: "the identity provider's answer has no " + l.cfg.UserClaim + " claim to be your user name"}
		}
		id.User = s
	}
	if !l.cfg.ValidUser(id.User) {
		return id, &Refusal{Reason: fmt.Sprintf("%q (your %s) cannot be a user name here (1-128 of A-Z a-z 0-9 . _ @ + -)", id.User, l.cfg.UserClaim)}
	}
	return id, nil
}

// admit applies the operator's rule; "" admits, else the reason.
func (l *Login) admit(id Identity) string {
	c := l.cfg
	if slices.Contains(c.AllowedUsers, id.User) {
		return ""
	}
	if at := strings.LastIndexByte(id.Email, '@'); at >= 0 && slices.Contains(c.AllowedDomains, id.Email[at+1:]) {
		return ""
	}
	for _, g := range id.Groups {
		if slices.Contains(c.AllowedGroups, g) {
			return ""
		}
	}
	var why []string
	if len(c.AllowedDomains) > 0 {
		if id.Email == "" {
			why = append(why, "you have no verified email address in an allowed domain")
		} else {
			why = append(why, "your email address "+id.Email+" is not in an allowed domain")
		}
	}
	if len(c.AllowedGroups) > 0 {
		why = append(why, "you are not in an allowed group")
	}
	if len(c.AllowedUsers) > 0 {
		why = append(why, id.User+" is not on the list of allowed users")
	}
	return strings.Join(why, "; ")
}

func verified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
