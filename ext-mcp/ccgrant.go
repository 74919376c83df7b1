package extmcp

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/agenthost/agenthost/ext"
)

// The client credentials grant (RFC 6749 §4.4) of a shared server whose
// oauth block says grant "client_credentials": the host is the client,
// with the operator's credential (a client secret, or a private key that
// signs RFC 7523 client assertions), and no person signs in.
//
// Every connection to one such server shares one ccSource (keyed by the
// server and what its token depends on): it obtains a token when the
// first connection needs one and again before it expires (the margin of
// [grant.fresh]), one request at a time under its lock. The token lives
// in memory only: a new one can be had at any time, so none is stored.
// The operator secret is read at each request for a token, so a rotated
// secret is used from the next one on. The token endpoint is configured,
// or found from the server's metadata (RFC 9728, then RFC 8414) when the
// server first refuses a request (its challenge may name where the
// metadata is), through the operator's OAuth client (the address guard).

// ccSource is the shared token source of one server's client credentials.
type ccSource struct {
	x      *Extension
	server string
	url    string // the MCP server's, the resource (RFC 8707)
	cfg    OAuthConfig
	key    string // what the source depends on (ccKey)

	mu       sync.Mutex
	tokenURL string   // configured or discovered; "" until then
	scopes   []string // configured, else discovered
	// methods are the client authentications the authorization server's
	// metadata lists (token_endpoint_auth_methods_supported), if read.
	methods  []string
	tok      *oauth2.Token
	obtained time.Time
}

var _ oauth2.TokenSource = (*ccSource)(nil)

// ccKey names what a client credentials source depends on: the server's
// URL and its oauth block.
func ccKey(s Server) string {
	b, _ := json.Marshal(struct {
		URL   string
		OAuth *OAuthConfig
	}{s.URL, s.OAuth})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// ccSourceFor returns the shared client credentials source of server s,
// making it (or replacing one of an earlier configuration).
func (x *Extension) ccSourceFor(name string, s Server) *ccSource {
	k := ccKey(s)
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.cc[name]; c != nil && c.key == k {
		return c
	}
	c := &ccSource{x: x, server: name, url: s.URL, cfg: *s.OAuth, key: k, tokenURL: s.OAuth.TokenEndpoint,
		scopes: slices.Clone(s.OAuth.Scopes)}
	if o.cc == nil {
		o.cc = map[string]*ccSource{}
	}
	o.cc[name] = c
	return c
}

// ccAuth is a connection's [auth.OAuthHandler] for a client credentials
// server: the shared source's token on every request, once its token
// endpoint is known; a refusal finds the endpoint or obtains a new token.
type ccAuth struct{ src *ccSource }

var _ auth.OAuthHandler = (*ccAuth)(nil)

// TokenSource implements [auth.OAuthHandler]: nil until the token
// endpoint is known (the first request goes without a token, and its
// refusal says where the metadata is).
func (a *ccAuth) TokenSource(context.Context) (oauth2.TokenSource, error) {
	a.src.mu.Lock()
	defer a.src.mu.Unlock()
	if a.src.tokenURL == "" {
		return nil, nil
	}
	return a.src, nil
}

// Authorize implements [auth.OAuthHandler]: on a 401 it finds the token
// endpoint (once) and obtains a new token unless another connection did
// since the refused one was sent (asking for the scopes the challenge
// names when none are configured or discovered); on a 403 that names
// scopes the token lacks, it obtains a token with those too.
func (a *ccAuth) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	challenges := refusalChallenges(resp)
	failed := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	s := a.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp.StatusCode == http.StatusForbidden {
		// A 403 whose challenge names scopes the token lacks (with
		// error="insufficient_scope" or, as go-sdk's servers answer,
		// without): a token with those too. Nobody is asked: the client
		// gets what its registration allows.
		more := false
		for _, sc := range strings.Fields(challengeParam(challenges, "scope")) {
			if !slices.Contains(s.scopes, sc) {
				s.scopes, more = append(s.scopes, sc), true
			}
		}
		if !more {
			return nil // not ours to fix: the retry reports the 403
		}
		return s.obtainLocked(ctx)
	}
	if s.tokenURL == "" {
		if err := s.discoverLocked(ctx, challenges); err != nil {
			return err
		}
	}
	if len(s.scopes) == 0 {
		s.scopes = strings.Fields(challengeParam(challenges, "scope"))
	}
	if s.tok != nil && failed != s.tok.AccessToken {
		return nil // obtained meanwhile: try the new token
	}
	return s.obtainLocked(ctx)
}

// Token implements [oauth2.TokenSource]: the token, obtained first when
// there is none or it is about to expire.
func (s *ccSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && (&grant{Expiry: s.tok.Expiry, Obtained: s.obtained}).fresh(time.Now()) {
		return s.tok, nil
	}
	ctx, cancel := context.WithTimeout(s.x.life, 30*time.Second)
	defer cancel()
	if s.tokenURL == "" {
		if err := s.discoverLocked(ctx, nil); err != nil {
			return nil, err
		}
	}
	if err := s.obtainLocked(ctx); err != nil {
		return nil, err
	}
	return s.tok, nil
}

// discoverLocked finds the token endpoint from the server's metadata:
// its protected resource metadata (where the challenge says, else at the
// well-known places) names the authorization server, whose metadata
// names the endpoint. With allowDefaultEndpoints, a server without
// metadata has its token endpoint at /token of its root (MCP
// 2025-03-26). s.mu is held.
func (s *ccSource) discoverLocked(ctx context.Context, challenges []oauthex.Challenge) error {
	hc := s.x.oauthClient(false, s.url)
	u, err := url.Parse(s.url)
	if err != nil {
		return fmt.Errorf("MCP server %q: the url does not parse: %w", s.server, ext.ErrInvalidArgument)
	}
	origin := u.Scheme + "://" + u.Host
	type candidate struct{ meta, resource string }
	var cands []candidate
	if m := challengeParam(challenges, "resource_metadata"); m != "" {
		cands = append(cands, candidate{m, s.url})
	}
	cands = append(cands, candidate{origin + "/.well-known/oauth-protected-resource/" + strings.TrimLeft(u.Path, "/"), s.url},
		candidate{origin + "/.well-known/oauth-protected-resource", origin})
	var prm *oauthex.ProtectedResourceMetadata
	for _, c := range cands {
		if p, err := oauthex.GetProtectedResourceMetadata(ctx, c.meta, c.resource, hc); err == nil && p != nil && len(p.AuthorizationServers) > 0 {
			prm = p
			break
		}
	}
	as := origin
	switch {
	case prm != nil:
		as = prm.AuthorizationServers[0]
		if len(s.scopes) == 0 {
			s.scopes = slices.Clone(prm.ScopesSupported)
		}
	case !s.cfg.AllowDefaultEndpoints:
		return fmt.Errorf(`MCP server %q publishes no protected resource metadata (RFC 9728) naming its authorization server: `+
			`set its token endpoint as "oauth": {"tokenEndpoint": URL}: %w`, s.server, ext.ErrInvalidArgument)
	}
	if len(s.scopes) == 0 {
		s.scopes = strings.Fields(challengeParam(challenges, "scope"))
	}
	asm, err := auth.GetAuthServerMetadata(ctx, as, hc)
	switch {
	case err != nil:
		return fmt.Errorf("MCP server %q: reading its authorization server's metadata: %v: %w", s.server, clip(err.Error(), 200), ext.ErrUnavailable)
	case asm != nil && asm.TokenEndpoint != "":
		s.tokenURL, s.methods = asm.TokenEndpoint, asm.TokenEndpointAuthMethodsSupported
	case s.cfg.AllowDefaultEndpoints:
		s.tokenURL = strings.TrimSuffix(as, "/") + "/token"
	default:
		return fmt.Errorf(`MCP server %q: its authorization server publishes no metadata (RFC 8414) naming its token endpoint: `+
			`set it as "oauth": {"tokenEndpoint": URL}: %w`, s.server, ext.ErrInvalidArgument)
	}
	return nil
}

// obtainLocked asks the token endpoint for a new token, with the
// operator's client credential; a failure that may pass (the network,
// 5xx, 429) is tried again with backoff. s.mu is held.
func (s *ccSource) obtainLocked(ctx context.Context) error {
	x := s.x
	h, err := x.hostRef()
	if err != nil {
		return err
	}
	cc := &clientcredentials.Config{ClientID: s.cfg.ClientID, TokenURL: s.tokenURL, Scopes: s.scopes,
		EndpointParams: url.Values{"resource": {s.url}}}
	method := s.method()
	ref := s.cfg.ClientSecret
	if method == authJWT {
		ref = s.cfg.PrivateKey
	}
	field := map[bool]string{true: "oauth.privateKey", false: "oauth.clientSecret"}[method == authJWT]
	secret, err := h.UserStore(OperatorUser).Secrets().Get(ctx, ref.Secret)
	if err != nil {
		return fmt.Errorf("MCP server %q: reading the operator secret %q (%s): %v: %w", s.server, ref.Secret, field, err, ext.ErrUnavailable)
	}
	var key any
	switch method {
	case authBasic:
		cc.ClientSecret, cc.AuthStyle = secret, oauth2.AuthStyleInHeader
	case authPost:
		cc.ClientSecret, cc.AuthStyle = secret, oauth2.AuthStyleInParams
	case authJWT:
		cc.AuthStyle = oauth2.AuthStyleInParams // client_id beside the assertion, no secret
		if key, err = parsePrivateKey(secret); err != nil {
			return fmt.Errorf("MCP server %q: the operator secret %q (%s) is not a PEM private key: %v: %w", s.server, ref.Secret, field, err, ext.ErrInvalidArgument)
		}
	}
	octx := context.WithValue(ctx, oauth2.HTTPClient, x.oauthClient(false, s.url))
	var tok *oauth2.Token
	for attempt := 1; ; attempt++ {
		if method == authJWT {
			// A fresh assertion for each request: its jti is used once.
			a, err := clientAssertion(key, s.cfg.ClientID, s.tokenURL)
			if err != nil {
				return fmt.Errorf("MCP server %q: signing the client assertion with the key in %q: %v: %w", s.server, ref.Secret, err, ext.ErrInvalidArgument)
			}
			cc.EndpointParams.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
			cc.EndpointParams.Set("client_assertion", a)
		}
		tok, err = cc.Token(octx)
		if err == nil || !transient(err) || attempt == refreshAttempts || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(refreshBackoff << (attempt - 1)):
		case <-ctx.Done():
		}
	}
	if err != nil {
		s.tok = nil
		x.log.Warn("extmcp: the client credentials grant failed", "server", s.server, "error", refreshErrorText(err))
		if transient(err) {
			return fmt.Errorf("MCP server %q: its authorization server could not give a token for now (%s); it is tried again: %w",
				s.server, refreshErrorText(err), ext.ErrUnavailable)
		}
		return fmt.Errorf("MCP server %q: its authorization server refused the client credentials of client %q (%s, operator secret %q): %s: %w",
			s.server, clip(s.cfg.ClientID, 80), method, ref.Secret, refreshErrorText(err), ext.ErrPermission)
	}
	s.tok, s.obtained = tok, time.Now()
	x.log.Debug("extmcp: client credentials token obtained", "server", s.server)
	return nil
}

// method is how the source's client authenticates: as configured; with
// a private key, private_key_jwt; with a secret, client_secret_basic
// (RFC 6749's default) unless the authorization server's metadata lists
// only client_secret_post of the two. s.mu is held.
func (s *ccSource) method() string {
	switch {
	case s.cfg.TokenEndpointAuth != "":
		return s.cfg.TokenEndpointAuth
	case s.cfg.PrivateKey != nil:
		return authJWT
	case slices.Contains(s.methods, authPost) && !slices.Contains(s.methods, authBasic):
		return authPost
	}
	return authBasic
}

// parsePrivateKey reads a PEM private key: PKCS #8 (RSA, ECDSA,
// Ed25519), PKCS #1 (RSA) or SEC 1 (ECDSA).
func parsePrivateKey(pemText string) (any, error) {
	blk, _ := pem.Decode([]byte(strings.TrimSpace(pemText)))
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("a %s block that is neither PKCS #8, PKCS #1 nor SEC 1", clip(blk.Type, 40))
}

// clientAssertion is an RFC 7523 client assertion of client for the
// token endpoint: issuer and subject the client, audience the endpoint,
// a random jti, valid for a minute.
func clientAssertion(key any, client, tokenURL string) (string, error) {
	var m jwt.SigningMethod
	switch k := key.(type) {
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		switch k.Curve {
		case elliptic.P256():
			m = jwt.SigningMethodES256
		case elliptic.P384():
			m = jwt.SigningMethodES384
		case elliptic.P521():
			m = jwt.SigningMethodES512
		default:
			return "", errors.New("an ECDSA key on an unsupported curve")
		}
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	default:
		return "", fmt.Errorf("a %T key, which cannot sign (RSA, ECDSA or Ed25519)", key)
	}
	now := time.Now()
	return jwt.NewWithClaims(m, jwt.RegisteredClaims{Issuer: client, Subject: client, Audience: jwt.ClaimStrings{tokenURL},
		ID: rand.Text(), IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))}).SignedString(key)
}
