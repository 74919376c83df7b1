package extmcp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// OAuth grants, and the connections that use them.
//
// A user's grant for server S lives in that user's secrets as GrantSecret(S)
// (a shared server's in the operator's): the tokens, the authorization
// server's issuer, the client they were issued to and, for a client that
// was registered on the fly, its registration. The grant is bound to the
// issuer and client: a registration is offered again only to the same
// issuer (go-sdk refuses pre-registered credentials of another), so a
// server that moves to another authorization server gets a new one.
//
// Every connection of one owner to one grant shares one token source
// (grantSource, keyed by owner, server, issuer, client and resource): its refresh
// is single-flight, so a rotating refresh token is never used twice, even
// by a retiring and a new connection at once. A source refreshes and
// writes its grant only while the stored grant is still its sign-in: one
// that a newer sign-in replaced, or that the user deleted (signing out),
// stops, and the owner's catalog moves to what is stored.

// GrantSecret is the name of the secret that holds a user's OAuth grant for
// server: "oauth:" + server. It is written by the sign-in and by every
// refresh; deleting it signs the user out of server. A user may store any
// secret of their own, this one too: the grant carries a seal (an HMAC
// under [GrantKeySecret]) over what decides where its refreshes go and
// with which client credential, and one without a valid seal is dead.
func GrantSecret(server string) string { return "oauth:" + server }

// GrantKeySecret is the name of the operator secret that keys the seals
// of every stored grant, made at random on first use. Users can neither
// read nor write the operator's secrets; deleting it makes every stored
// grant dead (everybody signs in again).
const GrantKeySecret = "oauth-grant-key"

// grant is the stored form of a sign-in.
type grant struct {
	V  int    `json:"v"`
	ID string `json:"id"` // random, names the sign-in (not its tokens) in fingerprints
	// Issuer, ClientID and Resource bind the grant: its tokens come from
	// Issuer, for ClientID, for the server at Resource.
	Issuer   string `json:"issuer"`
	ClientID string `json:"clientId"`
	Resource string `json:"resource"`
	// ClientSecret is a registered client's secret (dynamic registration);
	// SecretRef names the operator secret of a configured one.
	ClientSecret string `json:"clientSecret,omitempty"`
	SecretRef    string `json:"secretRef,omitempty"`
	// Registered marks a client registered on the fly for RedirectURI,
	// which a new sign-in to the same issuer reuses.
	Registered  bool             `json:"registered,omitempty"`
	RedirectURI string           `json:"redirectUri,omitempty"`
	TokenURL    string           `json:"tokenUrl"`
	AuthStyle   oauth2.AuthStyle `json:"authStyle,omitempty"`
	Scopes      []string         `json:"scopes,omitempty"`
	Access      string           `json:"access,omitempty"`
	Refresh     string           `json:"refresh,omitempty"`
	Type        string           `json:"type,omitempty"`
	Expiry      time.Time        `json:"expiry,omitzero"`
	Obtained    time.Time        `json:"obtained,omitzero"`
	// Dead says why the grant no longer works (revoked, expired); its
	// tokens are gone and the user must sign in again.
	Dead string `json:"dead,omitempty"`
	// Seal is the HMAC (sealOf) of what a forged grant could abuse: the
	// token endpoint, the client and the operator secret sent there, and
	// whose grant for which server it is.
	Seal string `json:"seal,omitempty"`
}

// sealOf is the seal of owner's grant g for server under key.
func sealOf(key []byte, owner, server string, g *grant) string {
	m := hmac.New(sha256.New, key)
	for _, f := range []string{owner, server, g.Resource, g.TokenURL, g.ClientID, g.SecretRef, strconv.Itoa(int(g.AuthStyle))} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// sealKey returns the key of the grants' seals: the operator secret
// GrantKeySecret, made on first use.
func (x *Extension) sealKey(ctx context.Context, h ext.Host) ([]byte, error) {
	o := &x.oauth
	o.keyMu.Lock()
	defer o.keyMu.Unlock()
	if o.sealKey != nil {
		return o.sealKey, nil
	}
	secrets := h.UserStore(OperatorUser).Secrets()
	v, err := secrets.Get(ctx, GrantKeySecret)
	switch {
	case errors.Is(err, ext.ErrNotFound):
		v = rand.Text() + rand.Text()
		if err := secrets.Set(ctx, GrantKeySecret, v); err != nil {
			return nil, fmt.Errorf("storing the key of sign-ins (operator secret %s): %w", GrantKeySecret, err)
		}
	case err != nil:
		return nil, fmt.Errorf("reading the key of sign-ins (operator secret %s): %w", GrantKeySecret, err)
	}
	o.sealKey = []byte(v)
	return o.sealKey, nil
}

// parseGrant reads a stored grant; one that does not parse is dead.
func parseGrant(raw string) *grant {
	var g grant
	if err := json.Unmarshal([]byte(raw), &g); err != nil || g.V != 1 || g.ID == "" {
		return &grant{V: 1, ID: "unreadable", Dead: "the stored sign-in cannot be read"}
	}
	if g.Dead == "" && (g.TokenURL == "" || g.Access == "") {
		g.Dead = "the stored sign-in is incomplete"
	}
	return &g
}

// token returns g's tokens for oauth2.
func (g *grant) token() *oauth2.Token {
	return &oauth2.Token{AccessToken: g.Access, RefreshToken: g.Refresh, TokenType: g.Type, Expiry: g.Expiry}
}

// fresh reports whether g's access token is good for a while: at least a
// quarter of its lifetime (up to 30 s) before it expires, so that it is
// renewed before a server refuses it.
func (g *grant) fresh(now time.Time) bool {
	if g.Expiry.IsZero() {
		return true
	}
	margin := 30 * time.Second
	if !g.Obtained.IsZero() {
		margin = min(margin, g.Expiry.Sub(g.Obtained)/4)
	}
	return now.Add(margin).Before(g.Expiry)
}

// withToken returns a copy of g holding tok (a refresh that issues no new
// refresh token keeps the old one).
func (g *grant) withToken(tok *oauth2.Token, now time.Time) *grant {
	n := *g
	n.Access, n.Type, n.Expiry, n.Obtained = tok.AccessToken, tok.TokenType, tok.Expiry, now
	if tok.RefreshToken != "" {
		n.Refresh = tok.RefreshToken
	}
	return &n
}

// dead returns a copy of g without tokens, dead for why.
func (g *grant) dead(why string) *grant {
	n := *g
	n.Access, n.Refresh, n.Expiry, n.Dead = "", "", time.Time{}, why
	return &n
}

// credentialID names g in a fingerprint: the sign-in and whether it
// still works, never a token (a refresh keeps the connection).
func (x *Extension) credentialID(g *grant) string {
	m := hmac.New(sha256.New, x.key)
	m.Write([]byte(g.ID))
	id := "oauth-" + hex.EncodeToString(m.Sum(nil)[:12])
	if g.Dead != "" {
		id += "-dead"
	}
	return id
}

// newGrantID returns a random grant ID.
func newGrantID() string { return rand.Text() }

// loadGrant reads owner's grant for server, nil when there is none. A
// live grant without its seal was not stored here (a user may write the
// secret): it is dead, and nothing of it is used.
func (x *Extension) loadGrant(ctx context.Context, h ext.Host, owner, server string) (*grant, error) {
	raw, err := readSecret(ctx, h, owner, GrantSecret(server))
	switch {
	case errors.Is(err, ext.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the sign-in for %q: %w", server, err)
	}
	g := parseGrant(raw)
	if g.Dead != "" {
		return g, nil
	}
	key, err := x.sealKey(ctx, h)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal([]byte(g.Seal), []byte(sealOf(key, owner, server, g))) {
		return &grant{V: 1, ID: "unsealed", Dead: "the stored sign-in was not made by this host"}, nil
	}
	return g, nil
}

// Why a token source may not write its grant: the stored one is no
// longer the source's.
var (
	errReplaced  = errors.New("a newer sign-in replaced it")
	errSignedOut = errors.New("it was deleted (signed out)")
)

// checkCurrent reports whether owner's stored grant for server is still
// the sign-in id: errReplaced when another is stored, errSignedOut when
// none is.
func (x *Extension) checkCurrent(ctx context.Context, h ext.Host, owner, server, id string) error {
	cur, err := x.loadGrant(ctx, h, owner, server)
	switch {
	case err != nil:
		return err
	case cur == nil:
		return errSignedOut
	case cur.ID != id:
		return errReplaced
	}
	return nil
}

// storeIfCurrent writes g as owner's grant for server only while the
// stored grant is still g's sign-in (else errReplaced or errSignedOut):
// a token source never writes over a newer sign-in or a sign-out. The
// check and the write hold the lock the sign-ins store under.
func (x *Extension) storeIfCurrent(ctx context.Context, h ext.Host, owner, server string, g *grant) error {
	mu := x.oauth.storeLock(owner, server)
	mu.Lock()
	defer mu.Unlock()
	if err := x.checkCurrent(ctx, h, owner, server, g.ID); err != nil {
		return err
	}
	return x.storeGrant(ctx, h, owner, server, g)
}

// storeGrant writes owner's grant for server, sealed.
func (x *Extension) storeGrant(ctx context.Context, h ext.Host, owner, server string, g *grant) error {
	key, err := x.sealKey(ctx, h)
	if err != nil {
		return err
	}
	g.Seal = sealOf(key, owner, server, g)
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if err := h.UserStore(owner).Secrets().Set(ctx, GrantSecret(server), string(b)); err != nil {
		return fmt.Errorf("storing the sign-in for %q: %w", server, err)
	}
	return nil
}

// grantKey identifies a token source: one per owner, server and grant
// binding (two names of one URL have a grant each, even with one client).
type grantKey struct{ owner, server, issuer, client, resource string }

// oauthState is the extension's OAuth state: the shared token sources,
// the step-up scopes servers asked for, and the sign-ins under way.
type oauthState struct {
	mu      sync.Mutex
	offered map[[2]string]offer // (user, server) → the last time a client was asked to open the link
	sources map[grantKey]*grantSource
	cc      map[string]*ccSource   // the client credentials servers', by name (ccgrant.go)
	stepUp  map[[2]string][]string // (owner, server) → scopes a server asked for
	flows   map[string]*flow       // by OAuth state
	// underway counts each owner's sign-ins from their start until their
	// flow ends (admitFlow).
	underway map[string]int

	// challenges are the last refusals of owner's connections to a
	// server that asked for a sign-in, where a probe may not meet one (a
	// server that asks only from tools/call on).
	challenges map[[2]string]challenge

	keyMu   sync.Mutex
	sealKey []byte // GrantKeySecret's value, once read

	// stores serialise the writes of one (owner, server)'s grant (a
	// sign-in's, a refresh's check-then-write), striped by hash.
	stores [32]sync.Mutex
}

// storeLock returns the lock of owner's grant for server.
func (o *oauthState) storeLock(owner, server string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(owner))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(server))
	return &o.stores[h.Sum32()%uint32(len(o.stores))]
}

// source returns the shared token source of g for owner's server,
// creating it (or replacing one of an older sign-in).
func (x *Extension) source(owner, server string, g *grant) *grantSource {
	k := grantKey{owner, server, g.Issuer, g.ClientID, g.Resource}
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.sources[k]; s != nil && s.id == g.ID {
		return s
	}
	s := &grantSource{x: x, owner: owner, server: server, id: g.ID, g: g}
	if o.sources == nil {
		o.sources = map[grantKey]*grantSource{}
	}
	o.sources[k] = s
	return s
}

// forgetSources drops owner's token sources (the user was deactivated;
// connections that still hold one keep it).
func (x *Extension) forgetSources(owner string) {
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	for k := range o.sources {
		if k.owner == owner {
			delete(o.sources, k)
		}
	}
}

// grantSource is one grant's token source, shared by every connection
// that uses it. Token and renew refresh under one lock: one refresh at a
// time, and a caller that waited finds the new token instead of
// refreshing again.
type grantSource struct {
	x             *Extension
	owner, server string
	id            string

	mu sync.Mutex
	g  *grant
	// replaced is set once a newer sign-in replaced the stored grant:
	// the source stops, and the owner's catalog moves to the new one.
	replaced bool
}

var _ oauth2.TokenSource = (*grantSource)(nil)

// stoppedLocked returns why the source gives no more tokens, or nil.
// s.mu is held.
func (s *grantSource) stoppedLocked() error {
	switch {
	case s.replaced:
		return fmt.Errorf("the sign-in to MCP server %q was replaced by a newer one while this call was under way; try again: %w",
			s.server, ext.ErrUnavailable)
	case s.g.Dead != "":
		return s.x.signInError(s.owner, s.server, s.g.Dead)
	}
	return nil
}

// Token implements [oauth2.TokenSource]: the access token, refreshed
// first when it is about to expire.
func (s *grantSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stoppedLocked(); err != nil {
		return nil, err
	}
	if !s.g.fresh(time.Now()) {
		if err := s.refreshLocked(); err != nil {
			return nil, err
		}
	}
	return s.g.token(), nil
}

// renew refreshes after a server refused access token failed, unless
// another caller has refreshed since.
func (s *grantSource) renew(failed string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stoppedLocked(); err != nil {
		return err
	}
	if failed != s.g.Access {
		return nil // refreshed meanwhile: try the new token
	}
	return s.refreshLocked()
}

// stopLocked stops a source whose stored grant is no longer its own
// (why is errReplaced or errSignedOut): it neither refreshes nor stores
// again, and the owner's catalog is refreshed, so that the server uses
// the stored grant, or waits for a sign-in. s.mu is held.
func (s *grantSource) stopLocked(why error) error {
	if errors.Is(why, errSignedOut) {
		s.g = s.g.dead("you signed out of it") // in memory only
	} else {
		s.replaced = true
	}
	s.x.log.Info("extmcp: a connection's sign-in is no longer the stored one; it stops", "user", s.owner, "server", s.server, "reason", why)
	s.x.refreshOwner(s.owner)
	return s.stoppedLocked()
}

// refreshAttempts and refreshBackoff bound the retries of a refresh that
// failed for a transient reason (network, 5xx, 429).
const (
	refreshAttempts = 3
	refreshBackoff  = 300 * time.Millisecond
)

// refreshLocked uses the refresh token once, stores the new tokens before
// they are handed out (a rotated refresh token must not be lost), and
// tells a dead grant (the authorization server refused: invalid_grant and
// the other 4xx answers) from a transient failure. s.mu is held.
func (s *grantSource) refreshLocked() error {
	x := s.x
	if s.g.Refresh == "" {
		return s.dieLocked("your sign-in has expired and the authorization server gave no refresh token")
	}
	h, err := x.hostRef()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(x.life, 30*time.Second)
	defer cancel()
	// A sign-in since (or a sign-out) took this grant's place: its
	// refresh token is not to be used any more.
	if err := x.checkCurrent(ctx, h, s.owner, s.server, s.id); errors.Is(err, errReplaced) || errors.Is(err, errSignedOut) {
		return s.stopLocked(err)
	} else if err != nil {
		return fmt.Errorf("renewing the sign-in to MCP server %q: %v: %w", s.server, err, ext.ErrUnavailable)
	}
	secret, err := x.clientSecret(ctx, h, s.g)
	if err != nil {
		return err
	}
	cfg := &oauth2.Config{ClientID: s.g.ClientID, ClientSecret: secret,
		Endpoint: oauth2.Endpoint{TokenURL: s.g.TokenURL, AuthStyle: s.g.AuthStyle}}
	hc := x.oauthClient(catalog.IsUserServer(s.server), s.g.Resource)
	hc.Transport = &refreshResource{base: hc.Transport, resource: s.g.Resource}
	octx := context.WithValue(ctx, oauth2.HTTPClient, hc)
	var tok *oauth2.Token
	for attempt := 1; ; attempt++ {
		// An empty access token makes x/oauth2 refresh at once.
		tok, err = cfg.TokenSource(octx, &oauth2.Token{RefreshToken: s.g.Refresh}).Token()
		if err == nil || !transient(err) || attempt == refreshAttempts || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(refreshBackoff << (attempt - 1)):
		case <-ctx.Done():
		}
	}
	if err != nil {
		if transient(err) {
			x.log.Warn("extmcp: refreshing a sign-in failed; it will be tried again", "user", s.owner, "server", s.server,
				"error", refreshErrorText(err))
			return fmt.Errorf("renewing the sign-in to MCP server %q failed for now (%s); try again shortly: %w",
				s.server, refreshErrorText(err), ext.ErrUnavailable)
		}
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client") && s.g.Registered {
			// The registration itself is gone: the next sign-in registers
			// anew instead of offering it.
			n := *s.g
			n.Registered, n.ClientSecret = false, ""
			s.g = &n
		}
		return s.dieLocked("your sign-in was revoked or has expired (" + refreshErrorText(err) + ")")
	}
	n := s.g.withToken(tok, time.Now())
	switch err := x.storeIfCurrent(ctx, h, s.owner, s.server, n); {
	case errors.Is(err, errReplaced) || errors.Is(err, errSignedOut):
		// Replaced while refreshing: the new tokens belong to a sign-in
		// nobody uses any more.
		return s.stopLocked(err)
	case err != nil:
		// The new tokens are used; a restart before the next refresh
		// will ask for a sign-in.
		x.log.Warn("extmcp: storing a refreshed sign-in failed", "user", s.owner, "server", s.server, "error", err)
	}
	s.g = n
	x.log.Debug("extmcp: sign-in refreshed", "user", s.owner, "server", s.server)
	return nil
}

// dieLocked marks the grant dead (stored without its tokens), has the
// owner's catalog refreshed so that the server shows "needs sign-in", and
// returns the sign-in error. s.mu is held.
func (s *grantSource) dieLocked(why string) error {
	x := s.x
	dead := s.g.dead(why)
	if h, err := x.hostRef(); err == nil {
		ctx, cancel := context.WithTimeout(x.life, 10*time.Second)
		err := x.storeIfCurrent(ctx, h, s.owner, s.server, dead)
		cancel()
		switch {
		case errors.Is(err, errReplaced) || errors.Is(err, errSignedOut):
			return s.stopLocked(err) // a newer sign-in stays
		case err != nil:
			x.log.Warn("extmcp: storing a dead sign-in failed", "user", s.owner, "server", s.server, "error", err)
		}
	}
	s.g = dead
	x.log.Info("extmcp: a sign-in is dead", "user", s.owner, "server", s.server, "reason", why)
	x.refreshOwner(s.owner)
	return x.signInError(s.owner, s.server, why)
}

// refreshResource adds the grant's resource indicator (RFC 8707) to the
// refresh requests x/oauth2 sends without one: MCP authorization asks for
// it on every token request, so that the new access token is again
// bound to the server.
type refreshResource struct {
	base     http.RoundTripper
	resource string
}

func (t *refreshResource) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil || t.resource == "" {
		return t.base.RoundTrip(req)
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	if form, err := url.ParseQuery(string(b)); err == nil && form.Get("grant_type") == "refresh_token" && !form.Has("resource") {
		form.Set("resource", t.resource)
		b = []byte(form.Encode())
	}
	r := req.Clone(req.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return t.base.RoundTrip(r)
}

// transient reports whether a refresh failure may pass: the network, or
// the authorization server's own trouble (5xx, 429).
func transient(err error) bool {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.Response == nil {
			return re.ErrorCode == ""
		}
		c := re.Response.StatusCode
		return c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout
	}
	return true
}

// refreshErrorText describes a refresh failure without the response body
// (which may echo what was sent).
func refreshErrorText(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := "the authorization server answered"
		if re.Response != nil {
			msg += " " + re.Response.Status
		}
		if re.ErrorCode != "" {
			msg += " " + clip(re.ErrorCode, 40)
		}
		if d := strings.TrimSpace(re.ErrorDescription); d != "" {
			msg += ": " + clip(d, 120)
		}
		return msg
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the authorization server did not answer in time"
	}
	return "the authorization server could not be reached"
}

// clientSecret returns the secret of g's client: a registered one's, or a
// configured one's from the operator's store.
func (x *Extension) clientSecret(ctx context.Context, h ext.Host, g *grant) (string, error) {
	if g.SecretRef == "" {
		return g.ClientSecret, nil
	}
	v, err := h.UserStore(OperatorUser).Secrets().Get(ctx, g.SecretRef)
	if err != nil {
		return "", fmt.Errorf("reading the operator secret %q (the OAuth client secret): %w", g.SecretRef, err)
	}
	return v, nil
}

// refreshOwner refreshes, in the background, the catalogs that use owner's
// grants: the user's, or every user's for the operator's.
func (x *Extension) refreshOwner(owner string) {
	x.spawn(func(ctx context.Context) {
		_, _, e, err := x.state()
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if owner == OperatorUser {
			err = e.ReconcileAll(ctx)
		} else {
			err = e.Refresh(ctx, owner)
		}
		if err != nil && ctx.Err() == nil {
			x.log.Warn("extmcp: refreshing after a sign-in change failed", "user", owner, "error", err)
		}
	})
}

// spawn runs f on a goroutine the extension owns (joined by Shutdown),
// with the extension's lifetime context, and reports whether it did:
// nothing runs after Shutdown.
func (x *Extension) spawn(f func(ctx context.Context)) bool {
	x.bgMu.Lock()
	defer x.bgMu.Unlock()
	if x.life.Err() != nil {
		return false
	}
	x.bg.Add(1)
	go func() {
		defer x.bg.Done()
		f(x.life)
	}()
	return true
}

// signInError is the error of a server that needs owner to sign in: it
// says why and how, with the link to the settings page when the host has
// a public URL.
func (x *Extension) signInError(owner, server, why string) *catalog.SignInError {
	return &catalog.SignInError{Reason: x.signInHint(owner, server, why)}
}

func (x *Extension) signInHint(owner, server, why string) string {
	if owner == OperatorUser {
		return fmt.Sprintf("%s; it is a shared server: the operator signs in with `agenthost auth login --operator %s`", why, server)
	}
	x.mu.Lock()
	public, name := x.publicURL, x.name
	x.mu.Unlock()
	cli := fmt.Sprintf("`agenthost auth login --user %s %s`", owner, server)
	if public == "" {
		return fmt.Sprintf("%s; sign in with Connect on the settings page, or %s (a server that takes a plain token instead: store it as %s)",
			why, cli, TokenSecret(server))
	}
	return fmt.Sprintf("%s; sign in at %s (or %s; a server that takes a plain token instead: store it as %s)",
		why, ext.SignInURL(public, name, server), cli, TokenSecret(server))
}

// connAuth is a connection's [auth.OAuthHandler]: it hands go-sdk's
// transport (and ext-mcp's own requests) the grant's token, and on a 401
// renews it once; a connection without a grant, or whose grant is dead,
// answers a 401 with the sign-in error, and a 403 for scope with one that
// asks for the wider sign-in. It never starts a sign-in itself: that
// takes a person (BeginAuth).
type connAuth struct {
	x             *Extension
	owner, server string
	src           *grantSource // nil without a grant
	dead          string       // why the stored grant is dead ("" when alive or none)
}

var _ auth.OAuthHandler = (*connAuth)(nil)

// refusalChallenges drains and closes a refused response's body (64 KiB
// at most, so its connection can be reused) and returns its
// WWW-Authenticate challenges; the Authorize of both handlers start so.
func refusalChallenges(resp *http.Response) []oauthex.Challenge {
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	challenges, _ := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	return challenges
}

// TokenSource implements [auth.OAuthHandler].
func (a *connAuth) TokenSource(context.Context) (oauth2.TokenSource, error) {
	if a.src == nil {
		return nil, nil
	}
	return a.src, nil
}

// Authorize implements [auth.OAuthHandler].
func (a *connAuth) Authorize(_ context.Context, req *http.Request, resp *http.Response) error {
	challenges := refusalChallenges(resp)
	if resp.StatusCode == http.StatusForbidden {
		if challengeParam(challenges, "error") != "insufficient_scope" {
			return nil // not ours to fix: the retry reports the 403
		}
		a.x.noteChallenge(a.owner, a.server, resp)
		scopes := strings.Fields(challengeParam(challenges, "scope"))
		a.x.noteStepUp(a.owner, a.server, scopes)
		why := fmt.Sprintf("MCP server %q asks for more permissions than you granted", a.server)
		if len(scopes) > 0 {
			why = fmt.Sprintf("MCP server %q asks for more permissions (%s)", a.server, clip(strings.Join(scopes, " "), 120))
		}
		return a.x.signInError(a.owner, a.server, why)
	}
	a.x.noteChallenge(a.owner, a.server, resp)
	switch {
	case a.src != nil:
		return a.src.renew(strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
	case a.dead != "":
		return a.x.signInError(a.owner, a.server, a.dead)
	}
	return a.x.signInError(a.owner, a.server, fmt.Sprintf("MCP server %q asks you to sign in", a.server))
}

// challengeParam returns a parameter of the Bearer challenge.
func challengeParam(cs []oauthex.Challenge, name string) string {
	for _, c := range cs {
		if c.Scheme == "bearer" && c.Params[name] != "" {
			return c.Params[name]
		}
	}
	return ""
}

// noteStepUp remembers the scopes a server asked owner for, so that the
// next sign-in asks for them too.
func (x *Extension) noteStepUp(owner, server string, scopes []string) {
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stepUp == nil {
		o.stepUp = map[[2]string][]string{}
	}
	k := [2]string{owner, server}
	for _, s := range scopes {
		if !slices.Contains(o.stepUp[k], s) {
			o.stepUp[k] = append(o.stepUp[k], s)
		}
	}
}

// challenge is a refusal that asked for a sign-in: its status and its
// WWW-Authenticate values.
type challenge struct {
	status int
	header []string
}

// noteChallenge remembers the refusal resp of owner's connection to
// server, for a sign-in whose probe meets none.
func (x *Extension) noteChallenge(owner, server string, resp *http.Response) {
	h := resp.Header.Values("WWW-Authenticate")
	if len(h) == 0 {
		return
	}
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.challenges == nil {
		o.challenges = map[[2]string]challenge{}
	}
	o.challenges[[2]string{owner, server}] = challenge{status: resp.StatusCode, header: slices.Clone(h)}
}

// lastChallenge returns the refusal owner's connection to server met
// last, if any.
func (x *Extension) lastChallenge(owner, server string) (challenge, bool) {
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.challenges[[2]string{owner, server}]
	return c, ok
}

// stepUpScopes returns the scopes a server asked owner for.
func (x *Extension) stepUpScopes(owner, server string) []string {
	o := &x.oauth
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.stepUp[[2]string{owner, server}])
}

// connAuthFor returns the OAuth handler of a connection of owner to
// server d with the grant planned (nil: none), or, when the grant is
// dead, the sign-in error to fail the connect with at once.
func (x *Extension) connAuthFor(owner string, d catalog.ServerDecl, g *grant) (*connAuth, error) {
	a := &connAuth{x: x, owner: owner, server: d.Name}
	switch {
	case g == nil:
	case g.Dead != "":
		return nil, x.signInError(owner, d.Name, g.Dead)
	default:
		a.src = x.source(owner, d.Name, g)
	}
	return a, nil
}

// offerInterval spaces the offers to open a sign-in link to one user for
// one server.
const offerInterval = time.Minute

// offer is a sign-in link offered to a client: when, and the URL
// elicitation's ID, which the notification of the sign-in's end names.
type offer struct {
	at time.Time
	id string
}

// signInMark is set when a call failed because its server wants the user
// to sign in (a grant revoked or expired during the call): the call's
// connection sets the one in the call's context (noteSignIn).
type signInMark struct{ atomic.Bool }

type signInMarkKey struct{}

// noteSignIn marks the call of ctx as failed for want of a sign-in, when
// its caller asked to know (a client that declared URL elicitation).
func noteSignIn(ctx context.Context) {
	if m, _ := ctx.Value(signInMarkKey{}).(*signInMark); m != nil {
		m.Store(true)
	}
}

// signInRequired is the error to fail a call with instead of its isError
// result res, when the call failed because its server waits for the user
// to sign in (already before the call, or failed says the call found
// out) and the client declared URL-mode elicitation: MCP
// 2025-11-25's URL elicitation required error (-32042), whose one
// elicitation is the server's sign-in link, so that the client shows the
// person the link and the call returns at once (the agent may call again
// once signed in). It offers the link at most once a minute per user and
// server, whichever of the user's clients calls: a call in between, like
// a client's retry before the person signed in, gets res, whose text
// holds the link too, so a client that retries on -32042 does not loop.
// nil: answer with res (no such client, not waiting for sign-in, a shared
// server only the operator signs in to, no public URL to open).
func (x *Extension) signInRequired(e *catalog.Engine, req *ext.CallToolRequest, failed bool) error {
	server, _, _ := strings.Cut(req.Name, "/")
	x.mu.Lock()
	public, name, cfg := x.publicURL, x.name, x.cfg
	x.mu.Unlock()
	if public == "" || cfg.shared(server) {
		return nil // nothing the user can open, or only the operator can sign in
	}
	waiting := failed
	for _, st := range e.Status(req.User) {
		waiting = waiting || (st.Name == server && st.State == ext.StateNeedsSignIn)
	}
	if !waiting {
		return nil
	}
	k, now := [2]string{req.User, server}, time.Now()
	x.oauth.mu.Lock()
	if now.Sub(x.oauth.offered[k].at) < offerInterval {
		x.oauth.mu.Unlock()
		return nil
	}
	if x.oauth.offered == nil {
		x.oauth.offered = map[[2]string]offer{}
	}
	id := rand.Text()
	x.oauth.offered[k] = offer{at: now, id: id}
	x.oauth.mu.Unlock()
	msg := fmt.Sprintf("MCP server %q needs you to sign in with your account there. Open the link, sign in, then try again.", server)
	data, _ := json.Marshal(map[string][]map[string]string{"elicitations": {{
		"mode": "url", "elicitationId": id, "url": ext.SignInURL(public, name, server), "message": msg,
	}}})
	return &ext.RPCError{Code: ext.CodeURLElicitationRequired, Message: msg, Data: data}
}

// offerDone tells owner's clients that the sign-in link offered them for
// server was used (notifications/elicitation/complete, which the host
// hands only to sessions that declared URL elicitation), and forgets the
// offer: the next call that finds the server waiting offers the link at
// once.
func (x *Extension) offerDone(ctx context.Context, h ext.Host, owner, server string) {
	k := [2]string{owner, server}
	x.oauth.mu.Lock()
	o, ok := x.oauth.offered[k]
	delete(x.oauth.offered, k)
	x.oauth.mu.Unlock()
	if !ok {
		return
	}
	params, _ := json.Marshal(map[string]string{"elicitationId": o.id})
	if err := h.Notify(ctx, owner, ext.MethodElicitationComplete, params); err != nil {
		x.log.Debug("extmcp: telling the clients the sign-in is done", "user", owner, "server", server, "error", err)
	}
}
