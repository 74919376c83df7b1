package main

import (
	"cmp"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// options configures the server.
type options struct {
	// accessTTL is the lifetime of access tokens.
	accessTTL time.Duration
	// cimd advertises client ID metadata documents (URL client IDs).
	cimd bool
	// admin serves /admin/: counters, the requests the MCP endpoint saw,
	// and revocation by account (tests only).
	admin bool
	// scopes are the scopes the MCP endpoint requires.
	scopes []string
	// tokenEndpoint, when set, is the token endpoint the metadata names
	// instead of its own (tests of a client that must not follow it).
	tokenEndpoint string
	// openInitialize lets a request without a token through when it opens
	// or ends a session (initialize, notifications, DELETE): the token is
	// asked for from tools/list on, as some hosted servers do.
	openInitialize bool
	// openList also lets tools/list through without a token: the token is
	// asked for from tools/call on.
	openList bool
	// legacy serves the 2025-03-26 authorization rules: no metadata
	// documents (neither RFC 9728 nor RFC 8414), the endpoints /authorize,
	// /token and /register at the server's root, no iss in redirects.
	legacy bool
	// noResourceMetadata serves no RFC 9728 metadata (its 401 names
	// none) but RFC 8414 metadata at the root, as 2025-03-26 specified.
	noResourceMetadata bool
	// ccClient, when set, is a client that may use the client credentials
	// grant (RFC 6749 §4.4) for a machine's own token, authenticated with
	// ccSecret (client_secret_basic or client_secret_post) or, with
	// ccKey, a client assertion (private_key_jwt, RFC 7523) signed with
	// the key whose public half ccKey is.
	ccClient, ccSecret string
	ccKey              crypto.PublicKey
}

// authServer is a small OAuth 2.1 authorization server: RFC 8414
// metadata, dynamic client registration (RFC 7591), authorization with
// PKCE S256 (plain is refused), the RFC 9207 iss parameter, RFC 8707
// resource indicators, refresh-token rotation with reuse detection (a
// used refresh token revokes its whole grant, RFC 9700), revocation
// (RFC 7009). The "sign-in" is a form that asks for an account name: it
// stands for the provider's own login. State is in memory.
type authServer struct {
	o    options
	base string // issuer: scheme://host[:port]

	mu      sync.Mutex
	clients map[string]*client
	codes   map[string]*code
	access  map[string]*issued
	refresh map[string]*issued
	grants  map[string]*grantFamily
	stats   stats
	seen    []seenRequest
	failing int // the next token requests that answer 503 (tests)
	// assertions are the IDs (jti) of the client assertions accepted, until
	// they expire: an assertion is used once.
	assertions map[string]time.Time
	// sessions counts the MCP endpoint's open sessions (set by routes).
	sessions func() int
}

type client struct {
	id           string
	redirectURIs []string
}

type code struct {
	client, redirect, challenge, resource, login string
	scopes                                       []string
	expires                                      time.Time
}

// grantFamily is one authorization and every token issued under it.
type grantFamily struct {
	id, login, client, resource string
	scopes                      []string
	revoked                     bool
}

type issued struct {
	family  *grantFamily
	expires time.Time // access tokens only
	used    bool      // refresh tokens: rotated away
}

type stats struct {
	Registrations  int `json:"registrations"`
	Authorizations int `json:"authorizations"`
	CodeExchanges  int `json:"codeExchanges"`
	Refreshes      int `json:"refreshes"`
	RefreshReuses  int `json:"refreshReuses"`
	// RefreshesWithoutResource counts refreshes that sent no resource
	// (RFC 8707), which MCP clients must send on every token request.
	RefreshesWithoutResource int `json:"refreshesWithoutResource"`
	Revocations              int `json:"revocations"`
	Rejected                 int `json:"rejected"`    // MCP requests refused for their token
	Unavailable              int `json:"unavailable"` // token requests answered 503 on purpose
	Sessions                 int `json:"sessions"`    // MCP sessions open now
	// ClientCredentials counts the tokens issued to ccClient by the
	// client credentials grant, by how it authenticated:
	// client_secret_basic, client_secret_post or private_key_jwt.
	ClientCredentials map[string]int `json:"clientCredentials,omitempty"`
	// ClientsRefused counts client credentials grants refused for the
	// client's authentication.
	ClientsRefused int `json:"clientsRefused"`
}

// seenRequest is one request the MCP endpoint accepted: whose token it
// carried.
type seenRequest struct {
	Login string `json:"login"`
	Token string `json:"tokenSha256"` // a prefix of the token's hash
}

func newAuthServer(base string, o options) *authServer {
	return &authServer{o: o, base: base, clients: map[string]*client{}, codes: map[string]*code{},
		access: map[string]*issued{}, refresh: map[string]*issued{}, grants: map[string]*grantFamily{},
		assertions: map[string]time.Time{}}
}

func (a *authServer) routes(mux *http.ServeMux) {
	if !a.o.legacy {
		mux.HandleFunc("GET /.well-known/oauth-authorization-server", a.metadata)
	}
	mux.HandleFunc("POST /register", a.register)
	mux.HandleFunc("GET /authorize", a.authorizePage)
	mux.HandleFunc("POST /authorize", a.authorize)
	mux.HandleFunc("POST /token", a.token)
	mux.HandleFunc("POST /revoke", a.revoke)
	if a.o.admin {
		mux.HandleFunc("GET /admin/stats", a.adminStats)
		mux.HandleFunc("GET /admin/seen", a.adminSeen)
		mux.HandleFunc("POST /admin/revoke", a.adminRevoke)
		mux.HandleFunc("POST /admin/fail-tokens", a.adminFailTokens)
		mux.HandleFunc("GET /admin/tokens", a.adminTokens)
	}
}

func (a *authServer) metadata(w http.ResponseWriter, _ *http.Request) {
	grants, methods := []string{"authorization_code", "refresh_token"}, []string{"none"}
	var algs []string
	if a.o.ccClient != "" {
		grants = append(grants, "client_credentials")
		methods = append(methods, "client_secret_basic", "client_secret_post")
		if a.o.ccKey != nil {
			methods = append(methods, "private_key_jwt")
			algs = assertionAlgs
		}
	}
	writeJSON(w, http.StatusOK, &oauthex.AuthServerMeta{
		Issuer:                                     a.base,
		AuthorizationEndpoint:                      a.base + "/authorize",
		TokenEndpoint:                              cmp.Or(a.o.tokenEndpoint, a.base+"/token"),
		RegistrationEndpoint:                       a.base + "/register",
		RevocationEndpoint:                         a.base + "/revoke",
		ScopesSupported:                            append(slices.Clone(a.o.scopes), "offline_access"),
		ResponseTypesSupported:                     []string{"code"},
		GrantTypesSupported:                        grants,
		TokenEndpointAuthMethodsSupported:          methods,
		TokenEndpointAuthSigningAlgValuesSupported: algs,
		CodeChallengeMethodsSupported:              []string{"S256"},
		ClientIDMetadataDocumentSupported:          a.o.cimd,
		AuthorizationResponseIssParameterSupported: true,
	})
}

func (a *authServer) register(w http.ResponseWriter, r *http.Request) {
	var meta oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&meta); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_client_metadata", "the body is not client metadata")
		return
	}
	if len(meta.RedirectURIs) == 0 {
		oauthError(w, http.StatusBadRequest, "invalid_redirect_uri", "redirect_uris is required")
		return
	}
	for _, u := range meta.RedirectURIs {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Fragment != "" {
			oauthError(w, http.StatusBadRequest, "invalid_redirect_uri", "redirect URIs must be http(s) without fragment")
			return
		}
	}
	c := &client{id: "client-" + random(12), redirectURIs: meta.RedirectURIs}
	a.mu.Lock()
	a.clients[c.id] = c
	a.stats.Registrations++
	a.mu.Unlock()
	meta.TokenEndpointAuthMethod = "none"
	writeJSON(w, http.StatusCreated, &oauthex.ClientRegistrationResponse{ClientRegistrationMetadata: meta, ClientID: c.id,
		ClientIDIssuedAt: time.Now()})
}

// authorizeRequest is a checked authorization request.
type authorizeRequest struct {
	ClientID, RedirectURI, State, Challenge, Resource, Scope string
}

// checkAuthorize validates an authorization request; an error that is not
// safe to redirect (unknown client or redirect URI) is shown instead.
func (a *authServer) checkAuthorize(q url.Values) (*authorizeRequest, string) {
	ar := &authorizeRequest{ClientID: q.Get("client_id"), RedirectURI: q.Get("redirect_uri"), State: q.Get("state"),
		Challenge: q.Get("code_challenge"), Resource: q.Get("resource"), Scope: q.Get("scope")}
	a.mu.Lock()
	c := a.clients[ar.ClientID]
	a.mu.Unlock()
	switch {
	case c == nil && !(a.o.cimd && strings.HasPrefix(ar.ClientID, "https://")):
		return nil, "unknown client_id"
	case c != nil && !slices.Contains(c.redirectURIs, ar.RedirectURI):
		return nil, "redirect_uri is not registered for this client"
	case c == nil && ar.RedirectURI == "":
		return nil, "redirect_uri is required"
	case q.Get("response_type") != "code":
		return nil, "response_type must be code"
	case q.Get("code_challenge_method") != "S256" || len(ar.Challenge) < 43:
		return nil, "PKCE with S256 is required"
	case ar.Resource == "":
		return nil, "resource (RFC 8707) is required"
	}
	return ar, ""
}

var page = template.Must(template.New("").Parse(`<!doctype html>
<title>Sign in to the example provider</title>
<h1>Sign in to the example provider</h1>
<p>{{.ClientID}} asks for access to {{.Resource}} ({{.Scope}}).</p>
<form method="post" action="/authorize">
{{range $k, $v := .Hidden}}<input type="hidden" name="{{$k}}" value="{{$v}}">
{{end}}<label>Account <input name="login" required></label>
<button name="decision" value="allow">Allow</button> <button name="decision" value="deny">Deny</button>
</form>`))

func (a *authServer) authorizePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ar, bad := a.checkAuthorize(q)
	if bad != "" {
		http.Error(w, bad, http.StatusBadRequest)
		return
	}
	hidden := map[string]string{}
	for _, k := range []string{"client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "resource", "scope", "response_type"} {
		hidden[k] = q.Get(k)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = page.Execute(w, map[string]any{"ClientID": ar.ClientID, "Resource": ar.Resource, "Scope": ar.Scope, "Hidden": hidden})
}

func (a *authServer) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	ar, bad := a.checkAuthorize(r.PostForm)
	if bad != "" {
		http.Error(w, bad, http.StatusBadRequest)
		return
	}
	back, _ := url.Parse(ar.RedirectURI)
	v := back.Query()
	v.Set("state", ar.State)
	if !a.o.legacy {
		v.Set("iss", a.base) // RFC 9207, which 2025-03-26 did not know
	}
	login := strings.TrimSpace(r.PostForm.Get("login"))
	if r.PostForm.Get("decision") != "allow" || login == "" {
		v.Set("error", "access_denied")
		v.Set("error_description", "the account holder said no")
	} else {
		c := "code-" + random(16)
		a.mu.Lock()
		a.codes[c] = &code{client: ar.ClientID, redirect: ar.RedirectURI, challenge: ar.Challenge, resource: ar.Resource,
			login: login, scopes: strings.Fields(ar.Scope), expires: time.Now().Add(time.Minute)}
		a.stats.Authorizations++
		a.mu.Unlock()
		v.Set("code", c)
	}
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (a *authServer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "bad form")
		return
	}
	f := r.PostForm
	a.mu.Lock()
	fail := a.failing > 0
	if fail {
		a.failing--
		a.stats.Unavailable++
	}
	a.mu.Unlock()
	if fail {
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
		return
	}
	if f.Get("grant_type") == "client_credentials" {
		a.clientCredentials(w, r, f)
		return
	}
	// The client first (public clients send client_id in the body, others
	// may use Basic): a request that names none is refused before any
	// code or token is looked at, so that a retry in another style works.
	if id, _, ok := r.BasicAuth(); ok && f.Get("client_id") == "" {
		f.Set("client_id", id)
	}
	if f.Get("client_id") == "" {
		w.Header().Set("WWW-Authenticate", "Basic")
		oauthError(w, http.StatusUnauthorized, "invalid_client", "client_id is required")
		return
	}
	switch f.Get("grant_type") {
	case "authorization_code":
		a.exchange(w, f)
	case "refresh_token":
		a.refreshToken(w, f)
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "")
	}
}

func (a *authServer) exchange(w http.ResponseWriter, f url.Values) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.codes[f.Get("code")]
	delete(a.codes, f.Get("code")) // used once
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	switch {
	case c == nil || time.Now().After(c.expires):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown or expired code")
		return
	case c.client != f.Get("client_id") || c.redirect != f.Get("redirect_uri"):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "client or redirect_uri does not match")
		return
	case subtle.ConstantTimeCompare([]byte(base64.RawURLEncoding.EncodeToString(sum[:])), []byte(c.challenge)) != 1:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "PKCE verification failed")
		return
	case f.Get("resource") != c.resource:
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource does not match the authorization")
		return
	}
	a.stats.CodeExchanges++
	fam := &grantFamily{id: random(8), login: c.login, client: c.client, resource: c.resource, scopes: c.scopes}
	a.grants[fam.id] = fam
	a.issueLocked(w, fam)
}

func (a *authServer) refreshToken(w http.ResponseWriter, f url.Values) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.refresh[f.Get("refresh_token")]
	switch {
	case old == nil || old.family.revoked:
		oauthError(w, http.StatusBadRequest, "invalid_grant", "unknown or revoked refresh token")
		return
	case old.used:
		// Reuse of a rotated token: the grant is compromised (RFC 9700).
		old.family.revoked = true
		a.stats.RefreshReuses++
		oauthError(w, http.StatusBadRequest, "invalid_grant", "refresh token reused; the grant is revoked")
		return
	case old.family.client != f.Get("client_id"):
		oauthError(w, http.StatusBadRequest, "invalid_grant", "the token belongs to another client")
		return
	case f.Has("resource") && f.Get("resource") != old.family.resource:
		oauthError(w, http.StatusBadRequest, "invalid_target", "resource does not match the grant")
		return
	}
	if !f.Has("resource") {
		a.stats.RefreshesWithoutResource++
	}
	old.used = true
	a.stats.Refreshes++
	a.issueLocked(w, old.family)
}

// issueLocked answers with a fresh access and refresh token of fam.
func (a *authServer) issueLocked(w http.ResponseWriter, fam *grantFamily) {
	at, rt := "at-"+random(24), "rt-"+random(24)
	a.access[at] = &issued{family: fam, expires: time.Now().Add(a.o.accessTTL)}
	a.refresh[rt] = &issued{family: fam}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": at, "token_type": "Bearer", "refresh_token": rt,
		"expires_in": int(a.o.accessTTL / time.Second), "scope": strings.Join(fam.scopes, " ")})
}

// assertionType is the client_assertion_type of a JWT client assertion
// (RFC 7523 §2.2).
const assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// assertionAlgs are the signatures a client assertion may carry.
var assertionAlgs = []string{"RS256", "PS256", "ES256", "ES384", "EdDSA"}

// clientCredentials answers the client credentials grant: ccClient,
// authenticated by its secret or its signed assertion, gets an access
// token of its own (account "client:ID") for the resource, and no
// refresh token (RFC 6749 §4.4.3).
func (a *authServer) clientCredentials(w http.ResponseWriter, r *http.Request, f url.Values) {
	method, why := a.authenticateClient(r, f)
	a.mu.Lock()
	defer a.mu.Unlock()
	if method == "" {
		a.stats.ClientsRefused++
		w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
		oauthError(w, http.StatusUnauthorized, "invalid_client", why)
		return
	}
	resource := cmp.Or(f.Get("resource"), a.base+"/mcp")
	if resource != a.base+"/mcp" {
		oauthError(w, http.StatusBadRequest, "invalid_target", "unknown resource")
		return
	}
	if a.stats.ClientCredentials == nil {
		a.stats.ClientCredentials = map[string]int{}
	}
	a.stats.ClientCredentials[method]++
	fam := &grantFamily{id: random(8), login: "client:" + a.o.ccClient, client: a.o.ccClient, resource: resource,
		scopes: strings.Fields(f.Get("scope"))}
	a.grants[fam.id] = fam
	at := "at-" + random(24)
	a.access[at] = &issued{family: fam, expires: time.Now().Add(a.o.accessTTL)}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": at, "token_type": "Bearer",
		"expires_in": int(a.o.accessTTL / time.Second), "scope": strings.Join(fam.scopes, " ")})
}

// authenticateClient checks the client of a client credentials grant: a
// client_assertion (private_key_jwt: signed with ccKey's private half, by
// and about ccClient, for this server, not expired, not used before), or
// ccClient's secret in the Authorization header (client_secret_basic,
// form-encoded first as RFC 6749 §2.3.1 says) or in the body
// (client_secret_post). It returns the method, or "" and why not.
func (a *authServer) authenticateClient(r *http.Request, f url.Values) (method, why string) {
	if f.Has("client_assertion") || f.Has("client_assertion_type") {
		if a.o.ccKey == nil {
			return "", "private_key_jwt is not enabled"
		}
		if f.Get("client_assertion_type") != assertionType {
			return "", "unknown client_assertion_type"
		}
		claims := &jwt.RegisteredClaims{}
		_, err := jwt.ParseWithClaims(f.Get("client_assertion"), claims, func(*jwt.Token) (any, error) { return a.o.ccKey, nil },
			jwt.WithValidMethods(assertionAlgs), jwt.WithExpirationRequired(), jwt.WithIssuer(a.o.ccClient),
			jwt.WithSubject(a.o.ccClient), jwt.WithAudience(a.base, a.base+"/token"))
		switch {
		case err != nil:
			return "", "the client assertion is refused: " + err.Error()
		case claims.ID == "" || claims.ExpiresAt.After(time.Now().Add(10*time.Minute)):
			return "", "the client assertion needs a jti and an expiry within 10 minutes"
		case f.Has("client_id") && f.Get("client_id") != a.o.ccClient:
			return "", "client_id does not match the assertion"
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		for id, exp := range a.assertions {
			if time.Now().After(exp) {
				delete(a.assertions, id)
			}
		}
		if _, used := a.assertions[claims.ID]; used {
			return "", "the client assertion was used before"
		}
		a.assertions[claims.ID] = claims.ExpiresAt.Time
		return "private_key_jwt", ""
	}
	id, secret, method := f.Get("client_id"), f.Get("client_secret"), "client_secret_post"
	if u, p, ok := r.BasicAuth(); ok {
		id, _ = url.QueryUnescape(u)
		secret, _ = url.QueryUnescape(p)
		method = "client_secret_basic"
	}
	if a.o.ccClient == "" || a.o.ccSecret == "" || id != a.o.ccClient ||
		subtle.ConstantTimeCompare([]byte(secret), []byte(a.o.ccSecret)) != 1 {
		return "", "unknown client or wrong secret"
	}
	return method, ""
}

func (a *authServer) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "bad form")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t := r.PostForm.Get("token")
	for _, m := range []map[string]*issued{a.access, a.refresh} {
		if i := m[t]; i != nil {
			i.family.revoked = true
			a.stats.Revocations++
		}
	}
	w.WriteHeader(http.StatusOK) // RFC 7009: also for unknown tokens
}

// lookup returns the family of a live access token for resource.
func (a *authServer) lookup(token, resource string) (*grantFamily, time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.access[token]
	if i == nil || i.family.revoked || i.family.resource != resource || time.Now().After(i.expires) {
		a.stats.Rejected++
		return nil, time.Time{}, false
	}
	sum := sha256.Sum256([]byte(token))
	a.seen = append(a.seen, seenRequest{Login: i.family.login, Token: fmt.Sprintf("%x", sum[:6])})
	return i.family, i.expires, true
}

func (a *authServer) adminStats(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	st, sessions := a.stats, a.sessions
	a.mu.Unlock()
	if sessions != nil {
		st.Sessions = sessions()
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *authServer) adminSeen(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	writeJSON(w, http.StatusOK, a.seen)
}

// adminRevoke revokes every grant of an account (?login=): the account
// holder withdrew access at the provider.
func (a *authServer) adminRevoke(w http.ResponseWriter, r *http.Request) {
	login := r.URL.Query().Get("login")
	a.mu.Lock()
	n := 0
	for _, g := range a.grants {
		if g.login == login && !g.revoked {
			g.revoked = true
			n++
		}
	}
	a.stats.Revocations += n
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]int{"revoked": n})
}

// adminTokens lists every access and refresh token issued, for canary
// scans of a client's logs and answers (tests only).
func (a *authServer) adminTokens(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]string{}
	for t, i := range a.access {
		out[i.family.login] = append(out[i.family.login], t)
	}
	for t, i := range a.refresh {
		out[i.family.login] = append(out[i.family.login], t)
	}
	writeJSON(w, http.StatusOK, out)
}

// adminFailTokens makes the next ?n= token requests answer 503: the
// authorization server's own trouble, which clients must ride out.
func (a *authServer) adminFailTokens(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	a.mu.Lock()
	a.failing = n
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	body := map[string]string{"error": code}
	if desc != "" {
		body["error_description"] = desc
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
