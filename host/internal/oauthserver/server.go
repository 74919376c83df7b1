package oauthserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/handler/oauth2"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/netguard"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/guard"
)

// Scopes the server grants. A request that names none gets [ScopeMCP];
// other scopes are ignored (RFC 6749 §3.3 lets a server grant less than
// asked), since clients such as Claude send scopes of their own.
const (
	// ScopeMCP lets the client use the user's tools on /mcp.
	ScopeMCP = "mcp"
	// ScopeOfflineAccess asks for a refresh token, for a client registered
	// with the refresh_token grant type.
	ScopeOfflineAccess = "offline_access"
)

// scopeText explains each scope on the consent page.
var scopeText = map[string]string{
	ScopeMCP:           "Use your tools on this host, as you: list them and call them.",
	ScopeOfflineAccess: "Stay connected: renew its access without asking you again, until you revoke it.",
}

// Sentinel errors of [Server.Verify].
var (
	// ErrInvalidToken is any refused access token: malformed, unknown,
	// expired, revoked, or for another resource. It never says which.
	ErrInvalidToken = errors.New("invalid, expired or revoked access token")
	// ErrUnavailable means the store could not be read: the token could
	// be fine.
	ErrUnavailable = errors.New("oauth store unavailable")
	// ErrExpired marks (errors.Is) an [ErrInvalidToken] for a token this
	// server issued that has expired: no guess, its client will refresh.
	ErrExpired = errors.New("access token expired")
)

// Sessions is the settings web UI's sign-in, which the authorization page
// uses: the browser's signed-in user, the session's CSRF token and the
// pre-sign-in form token (package web implements it).
type Sessions interface {
	// User returns the user signed in on r's browser and the session's
	// CSRF token; ok is false without a session, or for the operator's.
	User(w http.ResponseWriter, r *http.Request) (user, csrf string, ok bool)
	// ValidCSRF reports whether r's parsed form carries csrf.
	ValidCSRF(r *http.Request, csrf string) bool
	// FormToken returns the anti-forgery value of a form shown before
	// sign-in, setting its cookie when needed; ValidFormToken checks that
	// r's parsed form carries it.
	FormToken(w http.ResponseWriter, r *http.Request) string
	ValidFormToken(r *http.Request) bool
	// LoginURL is the sign-in page's path that comes back to next (a
	// local path) once signed in.
	LoginURL(next string) string
	// ProviderLogin is the operator's OpenID Connect provider's name and
	// the path that signs in there and comes back to next; "" and ""
	// without a provider.
	ProviderLogin(next string) (name, url string)
}

// Limiter counts passphrase guesses with every other failed sign-in (the
// host's auth.Limiter is one): Attempt, with the client's key and the
// credential, counts a guess before it is checked; refused (an
// *auth.LockoutError) means it must not be checked, locked that it is
// the last one allowed (a wrong one is answered 429).
type Limiter interface {
	Attempt(addr, credential string) (locked, refused error)
}

// Passphrase is the operator's gate of a single-user install: whoever
// knows the passphrase may connect apps as User, without the settings
// sign-in.
type Passphrase struct {
	// Hash is the passphrase's bcrypt hash.
	Hash string
	// User is the user the passphrase stands for.
	User string
}

// Options configures [New]. Zero fields mean the defaults.
type Options struct {
	// BaseURL returns the host's public URL, such as
	// "https://agenthost.example.com" (no trailing slash). It is the
	// issuer; the protected resource is BaseURL()+"/mcp". It is a function
	// because a server on port 0 knows its URL only once it listens.
	// Required.
	BaseURL func() string
	// Sessions is the settings sign-in. Required.
	Sessions Sessions
	// Limiter counts the passphrases tried; nil counts nothing.
	Limiter Limiter
	// AddrKey returns the limiter's key of a request's client (default:
	// guard.AddrKey of RemoteAddr; behind a proxy, the host's trusted
	// proxies decide).
	AddrKey func(r *http.Request) string
	// AllowedHosts are the host names besides loopback ones that a request
	// to a loopback address may name (the public URL's): DNS rebinding.
	AllowedHosts []string
	// Refusals rate-limits the log lines of refused requests, shared with
	// the other surfaces (nil: a log of the server's own).
	Refusals *guard.RefusalLog
	// Passphrase, when set, offers the passphrase gate beside the sign-in.
	Passphrase *Passphrase
	// Admit, when set, is asked before a grant is given to user: an error
	// (a disabled user) refuses it with access_denied. The host records
	// the user and refuses a disabled one (auth.Store.AdmitUser).
	Admit func(ctx context.Context, user string) error
	// AccessTokenTTL is an access token's life (default 1 h).
	AccessTokenTTL time.Duration
	// RefreshTokenTTL is a refresh token's life (default 30 days); each
	// refresh gives a new one.
	RefreshTokenTTL time.Duration
	// AllowedRedirectHosts, when set, are the only hosts an https redirect
	// URI may name; loopback http ones are always allowed.
	AllowedRedirectHosts []string
	// DocumentAllow opens address prefixes to client ID metadata document
	// fetches, which otherwise refuse loopback, private, link-local and the
	// other internal ranges at dial time (package netguard): SSRF.
	DocumentAllow []netip.Prefix
	// DocumentDeny refuses address:port pairs to those fetches even when
	// allowed: the host's own listen addresses.
	DocumentDeny []netip.AddrPort
	// DocumentTLS, when set, is the TLS configuration of those fetches
	// (tests trust their own server with it).
	DocumentTLS *tls.Config
	// DocumentTTL is how long a fetched document is used (default 10 min).
	DocumentTTL time.Duration
	// Logger receives grants, revocations and refusals, never a token or
	// a code (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// SweepEvery is how often the server deletes expired tokens, codes
	// and grants from the store ([Store.Sweep]), besides once at start
	// (default 1 h).
	SweepEvery time.Duration
	_          struct{}
}

// Server is the authorization server. Create it with [New]; mount its
// routes with [Server.Mount]. All its methods are safe for concurrent use.
type Server struct {
	store     Store
	opts      Options
	log       *slog.Logger
	now       func() time.Time
	provider  fosite.OAuth2Provider
	strategy  oauth2.CoreStrategy
	docs      *documents
	policy    redirectPolicy
	tmpl      *template.Template
	registers *rate.Limiter
	// addrRegisters bound the registrations of one client address.
	addrRegisters *addrRates

	revoked api.Callbacks[string] // revocation listeners, by token or grant ID

	touchMu sync.Mutex
	touched map[string]time.Time

	compares chan struct{} // a slot per passphrase check running
	waiting  atomic.Int32  // passphrase checks running or waiting

	stopSweep context.CancelFunc
	sweeper   sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New returns a server over store, which it owns from then on (Close
// closes it, also when New fails).
func New(store Store, opts *Options) (*Server, error) {
	if store == nil {
		return nil, errors.New("oauthserver: New: nil Store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.BaseURL == nil || o.Sessions == nil {
		_ = store.Close()
		return nil, errors.New("oauthserver: New: BaseURL and Sessions are required")
	}
	o.AccessTokenTTL = cmp.Or(o.AccessTokenTTL, time.Hour)
	o.RefreshTokenTTL = cmp.Or(o.RefreshTokenTTL, 30*24*time.Hour)
	o.DocumentTTL = cmp.Or(o.DocumentTTL, 10*time.Minute)
	o.SweepEvery = cmp.Or(o.SweepEvery, time.Hour)
	if o.AddrKey == nil {
		o.AddrKey = func(r *http.Request) string { return guard.AddrKey(r.RemoteAddr) }
	}
	if o.Refusals == nil {
		o.Refusals = guard.NewRefusalLog(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if p := o.Passphrase; p != nil {
		if _, err := bcrypt.Cost([]byte(p.Hash)); err != nil || p.User == "" {
			_ = store.Close()
			return nil, errors.New("oauthserver: New: the passphrase needs a bcrypt hash and a user")
		}
	}
	secret, err := store.HMACSecret(context.Background())
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("oauthserver: %w", err)
	}
	hosts := make([]string, 0, len(o.AllowedRedirectHosts))
	for _, h := range o.AllowedRedirectHosts {
		hosts = append(hosts, strings.ToLower(h))
	}
	s := &Server{
		store: store, opts: o, log: o.Logger, now: o.Now,
		policy:   redirectPolicy{hosts: hosts},
		tmpl:     template.Must(template.New("").ParseFS(templateFS, "templates/*.html")),
		touched:  map[string]time.Time{},
		compares: make(chan struct{}, maxCompares),
		// Registration is open to anyone: bound its rate (it writes).
		registers: rate.NewLimiter(rate.Every(time.Second), 30),
		// One client address: 10 a minute.
		addrRegisters: newAddrRates(6*time.Second, 10),
	}
	guard := &netguard.Policy{Allow: o.DocumentAllow, Deny: o.DocumentDeny}
	s.docs = newDocuments(documentClient(guard, o.DocumentTLS), o.DocumentTTL, s.policy, o.Now)
	cfg := &fosite.Config{
		AccessTokenLifespan:   o.AccessTokenTTL,
		RefreshTokenLifespan:  o.RefreshTokenTTL,
		AuthorizeCodeLifespan: 10 * time.Minute,
		GlobalSecret:          secret,
		// PKCE with S256, for every client; plain is refused.
		EnforcePKCE:                    true,
		EnablePKCEPlainChallengeMethod: false,
		ScopeStrategy:                  fosite.ExactScopeStrategy,
		AudienceMatchingStrategy:       fosite.ExactAudienceMatchingStrategy,
		RefreshTokenScopes:             []string{ScopeOfflineAccess},
		DisableRefreshTokenValidation:  true,
		SendDebugMessagesToClients:     false,
	}
	strategy := compose.NewOAuth2HMACStrategy(cfg)
	s.strategy = strategy
	s.provider = compose.Compose(cfg, &fositeStorage{Store: store, s: s}, strategy,
		compose.OAuth2AuthorizeExplicitFactory,
		compose.OAuth2RefreshTokenGrantFactory,
		compose.OAuth2TokenRevocationFactory,
		compose.OAuth2PKCEFactory,
	)
	ctx, cancel := context.WithCancel(context.Background())
	s.stopSweep = cancel
	s.sweeper.Go(func() { s.sweepLoop(ctx) })
	return s, nil
}

// sweepLoop sweeps the store now and every [Options.SweepEvery] until ctx
// ends: an install where nobody signs in still loses its expired rows.
func (s *Server) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		if err := s.store.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("oauth: sweeping expired tokens", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the periodic sweep and closes the store. It may be called
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stopSweep()
		s.sweeper.Wait()
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

// issuer is the authorization server's identifier (RFC 8414).
func (s *Server) issuer() string { return strings.TrimRight(s.opts.BaseURL(), "/") }

// basePath is the path of the public URL ("/agenthost" for
// https://example.com/agenthost; "" at the root): the host's routes are
// under it, for the pages' links and the metadata's locations.
func (s *Server) basePath() string { return guard.PathOf(s.issuer()) }

// Resource is the protected resource's canonical URL (RFC 8707, RFC
// 9728): the MCP endpoint.
func (s *Server) Resource() string { return s.issuer() + "/mcp" }

// ResourceMetadataURL is the URL of the resource's metadata (RFC 9728),
// for the WWW-Authenticate header of the MCP endpoint's 401s. Under a
// public URL with a path it is the location under that path
// (https://example.com/agenthost/.well-known/oauth-protected-resource/mcp),
// which a proxy that forwards the path reaches as it reaches /mcp; the
// server answers at RFC 9728's location too
// (/.well-known/oauth-protected-resource/agenthost/mcp).
func (s *Server) ResourceMetadataURL() string {
	return s.issuer() + "/.well-known/oauth-protected-resource/mcp"
}

// Principal is who a valid access token stands for.
type Principal struct {
	// User is the user who consented.
	User string
	// GrantID is the grant the token belongs to; it stays the same across
	// refreshes, and revoking the grant announces it to [Server.OnRevoke].
	GrantID string
	// ClientID is the client the grant was given to.
	ClientID string
	// Expires is when the access token expires.
	Expires time.Time
}

// touchEvery throttles the writes that record a grant's last use.
const touchEvery = time.Minute

// Verify checks an access token for the MCP endpoint: issued by this
// server, unexpired, not revoked, granting [ScopeMCP], for this very
// resource (its audience). Anything else is [ErrInvalidToken] (also
// [ErrExpired] for an expired one, [ErrRevoked] for a revoked one: tokens
// issued here, no guesses); a store failure is [ErrUnavailable].
func (s *Server) Verify(ctx context.Context, token string) (Principal, error) {
	sess := &fosite.DefaultSession{}
	req, err := s.store.GetAccessTokenSession(ctx, s.strategy.AccessTokenSignature(ctx, token), sess)
	switch {
	case errors.Is(err, ErrRevoked):
		// Found by its signature, so issued here: no guess.
		return Principal{}, fmt.Errorf("%w: %w", ErrRevoked, ErrInvalidToken)
	case errors.Is(err, fosite.ErrNotFound):
		return Principal{}, ErrInvalidToken
	case err != nil:
		return Principal{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := s.strategy.ValidateAccessToken(ctx, req, token); err != nil {
		if errors.Is(err, fosite.ErrTokenExpired) {
			// Found by its signature, so issued here: only old.
			return Principal{}, fmt.Errorf("%w: %w", ErrExpired, ErrInvalidToken)
		}
		return Principal{}, ErrInvalidToken
	}
	if !slices.Contains(req.GetGrantedAudience(), s.Resource()) {
		// A token of this server for another resource (say, before the
		// public URL changed) is not for this one.
		return Principal{}, fmt.Errorf("the token's audience is another resource: %w", ErrInvalidToken)
	}
	if !slices.Contains(req.GetGrantedScopes(), ScopeMCP) || sess.Subject == "" {
		return Principal{}, ErrInvalidToken
	}
	s.touch(ctx, req.GetID())
	return Principal{User: sess.Subject, GrantID: req.GetID(), ClientID: req.GetClient().GetID(),
		Expires: sess.GetExpiresAt(fosite.AccessToken)}, nil
}

// touch records a grant's use, at most once per touchEvery.
func (s *Server) touch(ctx context.Context, grantID string) {
	now := s.now()
	s.touchMu.Lock()
	if now.Sub(s.touched[grantID]) < touchEvery {
		s.touchMu.Unlock()
		return
	}
	if len(s.touched) >= 10_000 {
		clear(s.touched)
	}
	s.touched[grantID] = now
	s.touchMu.Unlock()
	// A lost update only delays the next one.
	if err := s.store.TouchGrant(ctx, grantID, now); err != nil {
		s.log.Warn("oauth: recording a grant's use", "grant", grantID, "err", err)
	}
}

// Grants lists user's connected apps: their live grants, newest first.
func (s *Server) Grants(ctx context.Context, user string) ([]api.Grant, error) {
	return s.store.Grants(ctx, user)
}

// RevokeGrant revokes one of user's grants at once: its tokens stop
// working and [Server.OnRevoke] subscribers hear of it (the MCP endpoint
// closes its sessions). A grant that is not user's is [ErrNotFound], also
// marked ext.ErrNotFound.
func (s *Server) RevokeGrant(ctx context.Context, user, id string) error {
	if err := s.store.RevokeGrant(ctx, user, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ext.Mark(err, ext.ErrNotFound)
		}
		return err
	}
	s.log.Info("oauth: grant revoked by its user", "user", user, "grant", id)
	s.revoked.Run(id)
	return nil
}

// RevokeUser revokes every grant of user at once (a user disabled or
// deleted): their tokens stop working and [Server.OnRevoke] subscribers
// hear of each grant. It returns how many there were.
func (s *Server) RevokeUser(ctx context.Context, user string) (int, error) {
	ids, err := s.store.RevokeUserGrants(ctx, user)
	if err != nil {
		return 0, err
	}
	if len(ids) > 0 {
		s.log.Info("oauth: every grant of a user revoked", "user", user, "grants", len(ids))
	}
	for _, id := range ids {
		s.revoked.Run(id)
	}
	return len(ids), nil
}

// OnRevoke registers fn to be called with a grant's ID whenever its
// tokens are revoked (by its user, by the client at /oauth/revoke, or
// because a used code or a rotated refresh token came back), after the
// revocation is committed. fn runs on the revoking goroutine and must
// return quickly. The returned function unregisters fn.
func (s *Server) OnRevoke(fn func(grantID string)) (cancel func()) {
	return s.revoked.Add(fn)
}

// client returns the live client of an ID: a metadata document (fetched
// and cached; a grant keeps the client's name and URI) or a registration.
func (s *Server) client(ctx context.Context, id string) (*Client, error) {
	if !isDocumentID(id) {
		return s.store.Client(ctx, id)
	}
	return s.docs.get(ctx, id)
}

// fositeClient is a client as fosite sees it.
type fositeClient struct {
	fosite.DefaultClient
	c *Client
}

func (s *Server) toFosite(c *Client) *fositeClient {
	// offline_access may be asked by every client; it is granted only to
	// one with the refresh_token grant (see grant).
	return &fositeClient{c: c, DefaultClient: fosite.DefaultClient{
		ID: c.ID, RedirectURIs: c.RedirectURIs, GrantTypes: c.GrantTypes,
		ResponseTypes: []string{"code"}, Scopes: []string{ScopeMCP, ScopeOfflineAccess}, Audience: []string{s.Resource()}, Public: true,
	}}
}

// fositeStorage is the store as fosite uses it: live clients come from
// the server, and revocations are announced once committed.
type fositeStorage struct {
	Store
	s *Server
}

// pendingKey carries the grants a transaction revoked, announced at
// commit.
type pendingKey struct{}

type pending struct{ grants []string }

// GetClient returns a live client; an unknown or unreadable one is
// fosite.ErrNotFound (invalid_client), with the reason logged.
func (f *fositeStorage) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	c, err := f.s.client(ctx, id)
	if err != nil {
		switch {
		case errors.Is(err, ErrNotFound):
		case isDocumentID(id):
			// Anyone may name any document: rate-limited.
			f.s.opts.Refusals.Refused(f.s.log, "oauth: refused a client", "client", clip(id), "err", err)
		default:
			f.s.log.Warn("oauth: reading a client failed", "client", clip(id), "err", err)
		}
		return nil, fosite.ErrNotFound.WithWrap(err).WithHint(clientHint(err))
	}
	fc := f.s.toFosite(c)
	if req, ok := ctx.Value(redirectKey{}).(string); ok && localhostMatch(req, c.RedirectURIs) {
		// fosite lets only IP literals change port; the requested
		// localhost URI is the registered one on another port.
		fc.RedirectURIs = append(slices.Clone(fc.RedirectURIs), req)
	}
	return fc, nil
}

// redirectKey carries an authorization request's redirect_uri to
// GetClient, for [localhostMatch].
type redirectKey struct{}

// localhostMatch reports whether the redirect URI requested is
// http://localhost on some port with the path and query of one of the
// registered ones on another port: RFC 8252 §7.3 lets a native app's
// loopback redirect use any port, and an app whose usual port is busy
// moves to the next. fosite does that only for 127.0.0.1 and [::1];
// this is the same rule for "localhost" (http only; any other host, or
// https, must match exactly).
func localhostMatch(requested string, registered []string) bool {
	q, err := url.Parse(requested)
	if err != nil || q.Scheme != "http" || !strings.EqualFold(q.Hostname(), "localhost") || q.User != nil || q.Fragment != "" {
		return false
	}
	for _, raw := range registered {
		r, err := url.Parse(raw)
		if err == nil && r.Scheme == "http" && strings.EqualFold(r.Hostname(), "localhost") &&
			r.Path == q.Path && r.RawQuery == q.RawQuery {
			return true
		}
	}
	return false
}

// clientHint is what an unusable client is told.
func clientHint(err error) string {
	var fe *fetchError
	switch {
	case errors.Is(err, ErrNotFound):
		return "The client is not registered here."
	case errors.As(err, &fe):
		return fe.public()
	}
	return err.Error()
}

// ClientAssertionJWTValid reports that no JWT assertion was seen: the
// server has public clients only and never accepts one.
func (f *fositeStorage) ClientAssertionJWTValid(context.Context, string) error { return nil }

// SetClientAssertionJWT does nothing, for the same reason.
func (f *fositeStorage) SetClientAssertionJWT(context.Context, string, time.Time) error { return nil }

// BeginTX starts a transaction that collects the grants it revokes.
func (f *fositeStorage) BeginTX(ctx context.Context) (context.Context, error) {
	ctx, err := f.Store.BeginTX(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, pendingKey{}, &pending{}), nil
}

// Commit commits, then announces the grants the transaction revoked.
func (f *fositeStorage) Commit(ctx context.Context) error {
	if err := f.Store.Commit(ctx); err != nil {
		return err
	}
	if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
		for _, g := range slices.Compact(p.grants) {
			f.revoked(g)
		}
		p.grants = nil
	}
	return nil
}

// RevokeRefreshToken revokes a grant's refresh tokens, and announces it.
func (f *fositeStorage) RevokeRefreshToken(ctx context.Context, requestID string) error {
	if err := f.Store.RevokeRefreshToken(ctx, requestID); err != nil {
		return err
	}
	f.announce(ctx, requestID)
	return nil
}

// RevokeAccessToken revokes a grant's access tokens, and announces it.
func (f *fositeStorage) RevokeAccessToken(ctx context.Context, requestID string) error {
	if err := f.Store.RevokeAccessToken(ctx, requestID); err != nil {
		return err
	}
	f.announce(ctx, requestID)
	return nil
}

// announce tells of a revoked grant now, or at commit inside a
// transaction.
func (f *fositeStorage) announce(ctx context.Context, grantID string) {
	if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
		p.grants = append(p.grants, grantID)
		return
	}
	f.revoked(grantID)
}

func (f *fositeStorage) revoked(grantID string) {
	f.s.log.Info("oauth: grant's tokens revoked", "grant", grantID)
	f.s.revoked.Run(grantID)
}
