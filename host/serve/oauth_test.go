package serve_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/serve"
)

// oauthStack is a real host (the clock extension in process) served by
// serve.Server on 127.0.0.1:0, with its OAuth server, stopped on demand.
type oauthStack struct {
	t    *testing.T
	h    *host.Host
	s    *serve.Server
	url  string
	logs *syncBuffer
	done chan error
	stop context.CancelFunc
}

type stackOptions struct {
	dataDir   string
	publicURL string
	docs      *httptest.Server // a TLS server of client ID metadata documents
	oauth     host.OAuthConfig
}

func startOAuthStack(t *testing.T, so stackOptions) *oauthStack {
	t.Helper()
	if so.dataDir == "" {
		so.dataDir = filepath.Join(t.TempDir(), "data")
	}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHost(t, &host.Config{DataDir: so.dataDir, PublicURL: so.publicURL, OAuth: so.oauth})
	opts := &serve.Options{Logger: logger, Addr: "127.0.0.1:0"}
	var (
		allow   []netip.Prefix
		tlsConf *tls.Config
	)
	if so.docs != nil {
		// The document server listens on loopback, which the SSRF guard
		// refuses unless opened; and its certificate is its own.
		allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		tlsConf = so.docs.Client().Transport.(*http.Transport).TLSClientConfig
	}
	// Access tokens live 2 s: fosite rounds their expiry to a second, and
	// with 1 s a token could be issued with expires_in 0 (never expiring,
	// to the client).
	serve.SetOAuthForTest(opts, allow, tlsConf, 2*time.Second)
	s, err := serve.New(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &oauthStack{t: t, h: h, s: s, url: "http://" + ln.Addr().String(), logs: logs, done: make(chan error, 1), stop: cancel}
	go func() { st.done <- s.Serve(ctx, ln) }()
	t.Cleanup(st.close)
	return st
}

// close stops the server and the host; it may be called more than once.
func (st *oauthStack) close() {
	st.stop()
	if st.done != nil {
		if err := <-st.done; err != nil {
			st.t.Errorf("Serve: %v", err)
		}
		st.done = nil
	}
	_ = st.h.Close()
}

// browser is a person's browser: a cookie jar, and no redirect followed
// (the tests look at each).
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (b *browser) do(method, u string, form url.Values) (*http.Response, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return nil, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp, string(raw), err
}

var (
	consentActionRE = regexp.MustCompile(`<form method="post" action="([^"]*)" id="consent">`)
)

// signIn signs the browser in to the settings UI with a one-time link.
func (b *browser) signIn(st *oauthStack, user string) {
	b.t.Helper()
	link, err := st.s.LoginLink(context.Background(), user)
	if err != nil {
		b.t.Fatal(err)
	}
	link = strings.Replace(link, st.s.URL(), st.url, 1)
	_, page, err := b.do("GET", link, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	form := hosttest.HiddenFields(page, "")
	resp, _, err := b.do("POST", st.url+"/settings/login", form)
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("signing in: %v %v", resp, err)
	}
}

// consent opens an authorization URL as the signed-in user, allows it,
// and returns where the server sent the browser (the client's redirect
// URI with code, state and iss, or an error).
func (b *browser) consent(authURL, action string) (*url.URL, error) {
	resp, page, err := b.do("GET", authURL, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusSeeOther {
		return resp.Location() // refused before consent: an error redirect
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="consent"`) {
		return nil, fmt.Errorf("authorization page: %d, no consent form:\n%s", resp.StatusCode, page)
	}
	if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") || resp.Header.Get("X-Frame-Options") != "DENY" {
		return nil, fmt.Errorf("the consent page can be framed: CSP %q", got)
	}
	form := hosttest.HiddenFields(page, "consent")
	form.Set("action", action)
	m := consentActionRE.FindStringSubmatch(page)
	if m == nil {
		return nil, fmt.Errorf("the consent form has no action:\n%s", page)
	}
	u, _ := url.Parse(authURL)
	target, err := u.Parse(html.UnescapeString(m[1]))
	if err != nil {
		return nil, err
	}
	resp, page, err = b.do("POST", target.String(), form)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("consent answered %d:\n%s", resp.StatusCode, page)
	}
	return resp.Location()
}

// fetcher is go-sdk's AuthorizationCodeFetcher played by the browser.
func (b *browser) fetcher(ctx context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
	loc, err := b.consent(a.URL, "allow")
	if err != nil {
		return nil, err
	}
	q := loc.Query()
	if e := q.Get("error"); e != "" {
		return nil, fmt.Errorf("authorization refused: %s: %s", e, q.Get("error_description"))
	}
	return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
}

// tokenRecorder is a client's HTTP transport that remembers every token the
// token endpoint issued (for the canary scan and the raw tests).
type tokenRecorder struct {
	mu        sync.Mutex
	base      http.RoundTripper
	clientID  string
	access    []string
	refresh   []string
	refreshes int
}

func (r *tokenRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	grant := ""
	if strings.HasSuffix(req.URL.Path, "/oauth/token") && req.Body != nil {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		f, _ := url.ParseQuery(string(b))
		grant = f.Get("grant_type")
		r.mu.Lock()
		r.clientID = f.Get("client_id")
		r.mu.Unlock()
	}
	resp, err := r.base.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/oauth/token") {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return resp, err
	}
	var tok struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	if json.Unmarshal(b, &tok) == nil && tok.Access != "" {
		r.mu.Lock()
		r.access = append(r.access, tok.Access)
		if tok.Refresh != "" {
			r.refresh = append(r.refresh, tok.Refresh)
		}
		if grant == "refresh_token" {
			r.refreshes++
		}
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *tokenRecorder) tokens() (access, refresh []string, refreshes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.access), slices.Clone(r.refresh), r.refreshes
}

// client is the client ID of the last token request.
func (r *tokenRecorder) client() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clientID
}

// cimdServer serves a client ID metadata document over TLS.
func cimdServer(t *testing.T, redirect string) (*httptest.Server, string) {
	var docURL string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/clients/e2e.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"client_id": docURL, "client_name": "e2e document client", "client_uri": "https://example.com/e2e",
			"redirect_uris": []string{redirect}, "grant_types": []string{"authorization_code", "refresh_token"},
			"response_types": []string{"code"}, "token_endpoint_auth_method": "none",
		})
	}))
	t.Cleanup(srv.Close)
	docURL = srv.URL + "/clients/e2e.json"
	return srv, docURL
}

// mcpStatus sends an MCP initialize with a bearer token and returns the
// status and the WWW-Authenticate header.
func mcpStatus(t *testing.T, base, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
}

func getJSON(t *testing.T, u, token string, v any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %d, not JSON: %v", u, resp.StatusCode, err)
	}
	return resp
}

const redirectURI = "http://127.0.0.1:53682/callback"

// connect connects a go-sdk client that authorizes with OAuth through
// handler config cfg and calls clock__now.
func connect(t *testing.T, ctx context.Context, st *oauthStack, cfg *auth.AuthorizationCodeHandlerConfig) *mcp.ClientSession {
	t.Helper()
	h, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Pinned to 2025-11-25: a session, which a revocation must close (an
	// unpinned go-sdk client speaks the stateless 2026-07-28).
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: st.url + "/mcp", OAuthHandler: h, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connecting with OAuth: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "clock__now", Arguments: map[string]any{}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "noon for alice" {
		t.Fatalf("calling clock__now with an OAuth token: %+v, %v", res, err)
	}
	return cs
}

// TestOAuthEndToEnd drives the authorization server as go-sdk's MCP
// client does, against the real stack: discovery from the 401, dynamic
// registration and a client ID metadata document, consent in the user's
// browser session, PKCE, tool calls, refreshes (access tokens live 2 s
// here), Connected apps (page and API) with a revocation that closes the
// grant's session, and no token in the log or the API's answers.
func TestOAuthEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	docSrv, docURL := cimdServer(t, redirectURI)
	st := startOAuthStack(t, stackOptions{docs: docSrv})
	b := newBrowser(t)
	b.signIn(st, "alice")

	// Discovery: the 401 names the resource metadata, which names us.
	code, challenge := mcpStatus(t, st.url, "")
	wantRM := st.url + "/.well-known/oauth-protected-resource/mcp"
	if code != http.StatusUnauthorized || !strings.Contains(challenge, `resource_metadata="`+wantRM+`"`) {
		t.Fatalf("401 without a token: %d %q, want resource_metadata=%q", code, challenge, wantRM)
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		var prm oauthex.ProtectedResourceMetadata
		getJSON(t, st.url+p, "", &prm)
		if prm.Resource != st.url+"/mcp" || !slices.Equal(prm.AuthorizationServers, []string{st.url}) {
			t.Errorf("%s = %+v", p, prm)
		}
	}
	var asm map[string]any
	resp := getJSON(t, st.url+"/.well-known/oauth-authorization-server", "", &asm)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("AS metadata Content-Type %q", ct)
	}
	for k, want := range map[string]any{
		"issuer": st.url, "authorization_endpoint": st.url + "/oauth/authorize", "token_endpoint": st.url + "/oauth/token",
		"registration_endpoint": st.url + "/oauth/register", "revocation_endpoint": st.url + "/oauth/revoke",
		"code_challenge_methods_supported": []any{"S256"}, "response_types_supported": []any{"code"},
		"grant_types_supported": []any{"authorization_code", "refresh_token"}, "token_endpoint_auth_methods_supported": []any{"none"},
		"client_id_metadata_document_supported": true, "authorization_response_iss_parameter_supported": true,
		"scopes_supported": []any{"mcp", "offline_access"},
	} {
		if got, _ := json.Marshal(asm[k]); string(got) != mustJSON(want) {
			t.Errorf("AS metadata %s = %s, want %s", k, got, mustJSON(want))
		}
	}

	// Dynamic client registration.
	dcrRec := &tokenRecorder{base: http.DefaultTransport}
	dcr := connect(t, ctx, st, &auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "e2e DCR client", RedirectURIs: []string{redirectURI}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}}},
		AuthorizationCodeFetcher: b.fetcher, RequestRefreshToken: true, Client: &http.Client{Transport: dcrRec},
	})
	defer dcr.Close()
	// A client ID metadata document.
	docRec := &tokenRecorder{base: http.DefaultTransport}
	doc := connect(t, ctx, st, &auth.AuthorizationCodeHandlerConfig{
		ClientIDMetadataDocumentConfig: &auth.ClientIDMetadataDocumentConfig{URL: docURL},
		RedirectURL:                    redirectURI,
		AuthorizationCodeFetcher:       b.fetcher, RequestRefreshToken: true, Client: &http.Client{Transport: docRec},
	})
	defer doc.Close()

	// The access tokens live 2 s (at most 2.5 s: fosite rounds the expiry
	// to a second); later calls run on refreshed ones.
	time.Sleep(2600 * time.Millisecond)
	for _, cs := range []*mcp.ClientSession{dcr, doc} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "clock__now", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("calling after the access token expired: %+v, %v\n%s", res, err, st.logs)
		}
	}
	dcrAccess, dcrRefresh, n := dcrRec.tokens()
	if n == 0 || len(dcrRefresh) < 2 {
		t.Fatalf("the DCR client refreshed %d times (%d refresh tokens): want refreshes", n, len(dcrRefresh))
	}
	if c, _ := mcpStatus(t, st.url, dcrAccess[0]); c != http.StatusUnauthorized {
		t.Errorf("an expired access token: %d, want 401", c)
	}

	// Connected apps, in the JSON API and on the settings page.
	tok, err := st.s.CreateToken(ctx, "alice", "api")
	if err != nil {
		t.Fatal(err)
	}
	var grants []struct {
		ID, User, Client, ClientID string
		Scopes                     []string
		Created                    time.Time
	}
	getJSON(t, st.url+"/api/v1/grants", tok, &grants)
	names := map[string]string{}
	for _, g := range grants {
		names[g.Client] = g.ID
		if !slices.Equal(g.Scopes, []string{"mcp", "offline_access"}) || g.User != "alice" || g.Created.IsZero() {
			t.Errorf("grant %+v", g)
		}
	}
	if len(grants) != 2 || names["e2e DCR client"] == "" || names["e2e document client"] == "" {
		t.Fatalf("/api/v1/grants = %+v, want the two clients", grants)
	}
	_, page, err := b.do("GET", st.url+"/settings", nil)
	if err != nil || !strings.Contains(page, "Connected apps") || !strings.Contains(page, "e2e document client") || !strings.Contains(page, docURL) {
		t.Fatalf("settings page has no Connected apps with the clients (%v)", err)
	}
	var before struct {
		MCPSessions int `json:"mcpSessions"`
	}
	op, _ := st.s.CreateOperatorToken(ctx, "ops")
	getJSON(t, st.url+"/status.json", op, &before)

	// Revoking the DCR client's grant on the settings page closes its MCP
	// session at once and stops its tokens.
	form := url.Values{"_csrf": {csrfOf(page)}, "id": {names["e2e DCR client"]}}
	resp, _, err = b.do("POST", st.url+"/settings/_apps/revoke", form)
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoking on the settings page: %v %v", resp, err)
	}
	dcrAccess, dcrRefresh, _ = dcrRec.tokens()
	if c, _ := mcpStatus(t, st.url, dcrAccess[len(dcrAccess)-1]); c != http.StatusUnauthorized {
		t.Errorf("the revoked grant's access token: %d, want 401", c)
	}
	if e := refreshError(t, st.url, dcrRefresh[len(dcrRefresh)-1], dcrRec.client()); e != "invalid_grant" {
		t.Errorf("the revoked grant's refresh token: %q, want invalid_grant", e)
	}
	var after struct {
		MCPSessions int `json:"mcpSessions"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		getJSON(t, st.url+"/status.json", op, &after)
		if after.MCPSessions == before.MCPSessions-1 || time.Now().After(deadline) {
			break
		}
	}
	if after.MCPSessions != before.MCPSessions-1 {
		t.Errorf("MCP sessions %d before the revocation, %d after: want one fewer", before.MCPSessions, after.MCPSessions)
	}
	getJSON(t, st.url+"/api/v1/grants", tok, &grants)
	if len(grants) != 1 || grants[0].Client != "e2e document client" {
		t.Errorf("grants after the revocation: %+v", grants)
	}
	// The JSON API revokes too.
	req, _ := http.NewRequest("DELETE", st.url+"/api/v1/grants/"+grants[0].ID, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE /api/v1/grants/ID: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	_ = dcr.Close()
	_ = doc.Close()

	// Canaries: no token, refresh token or code in the log or the API.
	docAccess, docRefresh, _ := docRec.tokens()
	st.close()
	logs := st.logs.String()
	apiAnswer, _ := json.Marshal(grants)
	for _, secret := range slices.Concat(dcrAccess, dcrRefresh, docAccess, docRefresh) {
		if strings.Contains(logs, secret) || strings.Contains(string(apiAnswer), secret) || strings.Contains(page, secret) {
			t.Errorf("a token (%.12s...) appears in the log, the API or the settings page", secret)
		}
	}
	for _, frag := range []string{"ory_at_", "ory_rt_", "ory_ac_", "code=ory", "refresh_token="} {
		if strings.Contains(logs, frag) {
			t.Errorf("the log holds %q", frag)
		}
	}
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func csrfOf(page string) string {
	if m := csrfRE.FindStringSubmatch(page); m != nil {
		return html.UnescapeString(m[1])
	}
	return ""
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// rawClient is a hand-driven OAuth client: it registers, then runs each
// step itself, so that tests can send what a real client would not.
type rawClient struct {
	t        *testing.T
	st       *oauthStack
	b        *browser
	clientID string
	verifier string
}

func newRawClient(t *testing.T, st *oauthStack, b *browser) *rawClient {
	t.Helper()
	body := `{"client_name":"raw client","redirect_uris":["` + redirectURI + `"],"grant_types":["authorization_code","refresh_token"],"token_endpoint_auth_method":"none"}`
	resp, err := http.Post(st.url+"/oauth/register", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg oauthex.ClientRegistrationResponse
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil || resp.StatusCode != http.StatusCreated || reg.ClientID == "" || reg.TokenEndpointAuthMethod != "none" {
		t.Fatalf("registering: %d %+v %v", resp.StatusCode, reg, err)
	}
	return &rawClient{t: t, st: st, b: b, clientID: reg.ClientID, verifier: oauth2.GenerateVerifier()}
}

// authParams are a correct authorization request.
func (c *rawClient) authParams() url.Values {
	sum := sha256.Sum256([]byte(c.verifier))
	return url.Values{
		"response_type": {"code"}, "client_id": {c.clientID}, "redirect_uri": {redirectURI},
		"scope": {"mcp offline_access"}, "state": {"state-1234567890"}, "resource": {c.st.url + "/mcp"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
}

// authorize runs the authorization with params (after edit) and returns
// the redirect's query.
func (c *rawClient) authorize(edit func(url.Values)) url.Values {
	c.t.Helper()
	p := c.authParams()
	if edit != nil {
		edit(p)
	}
	loc, err := c.b.consent(c.st.url+"/oauth/authorize?"+p.Encode(), "allow")
	if err != nil {
		c.t.Fatal(err)
	}
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != redirectURI {
		c.t.Fatalf("redirected to %s, want the client's %s", got, redirectURI)
	}
	q := loc.Query()
	if q.Get("state") != "state-1234567890" || q.Get("iss") != c.st.url {
		c.t.Errorf("redirect without state or iss: %v", q)
	}
	return q
}

// tokenRequest posts to the token endpoint and returns the status and
// the body.
func tokenRequest(t *testing.T, base string, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(base+"/oauth/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (c *rawClient) exchange(code string, edit func(url.Values)) (int, map[string]any) {
	f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirectURI},
		"client_id": {c.clientID}, "code_verifier": {c.verifier}, "resource": {c.st.url + "/mcp"}}
	if edit != nil {
		edit(f)
	}
	return tokenRequest(c.t, c.st.url, f)
}

// refreshError refreshes with rt (for clientID, if given) and returns the
// OAuth error, "" on success.
func refreshError(t *testing.T, base, rt, clientID string) string {
	f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
	if clientID != "" {
		f.Set("client_id", clientID)
	}
	_, out := tokenRequest(t, base, f)
	e, _ := out["error"].(string)
	return e
}

func (c *rawClient) refresh(rt string) (int, map[string]any) {
	return tokenRequest(c.t, c.st.url, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {c.clientID}})
}

// tokens authorizes and exchanges correctly.
func (c *rawClient) tokens() (access, refresh string) {
	c.t.Helper()
	q := c.authorize(nil)
	code, out := c.exchange(q.Get("code"), nil)
	if code != http.StatusOK {
		c.t.Fatalf("exchanging a code: %d %v", code, out)
	}
	access, _ = out["access_token"].(string)
	refresh, _ = out["refresh_token"].(string)
	if access == "" || refresh == "" {
		c.t.Fatalf("token response without tokens: %v", out)
	}
	return access, refresh
}

// TestOAuthRefusals: each attack on the authorization server is refused
// with the right OAuth error, and a reuse revokes the grant.
func TestOAuthRefusals(t *testing.T) {
	st := startOAuthStack(t, stackOptions{})
	b := newBrowser(t)
	b.signIn(st, "alice")
	c := newRawClient(t, st, b)

	t.Run("missing PKCE challenge", func(t *testing.T) {
		q := c.authorize(func(p url.Values) { p.Del("code_challenge"); p.Del("code_challenge_method") })
		if q.Get("error") != "invalid_request" || q.Get("code") != "" {
			t.Errorf("without code_challenge: %v, want invalid_request", q)
		}
	})
	t.Run("plain PKCE method", func(t *testing.T) {
		q := c.authorize(func(p url.Values) { p.Set("code_challenge", c.verifier); p.Set("code_challenge_method", "plain") })
		if q.Get("error") != "invalid_request" || q.Get("code") != "" {
			t.Errorf("code_challenge_method=plain: %v, want invalid_request", q)
		}
	})
	t.Run("wrong PKCE verifier", func(t *testing.T) {
		q := c.authorize(nil)
		code, out := c.exchange(q.Get("code"), func(f url.Values) { f.Set("code_verifier", oauth2.GenerateVerifier()) })
		if code != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Errorf("a wrong verifier: %d %v, want invalid_grant", code, out)
		}
	})
	t.Run("reused code", func(t *testing.T) {
		q := c.authorize(nil)
		code, out := c.exchange(q.Get("code"), nil)
		if code != http.StatusOK {
			t.Fatalf("first exchange: %d %v", code, out)
		}
		access := out["access_token"].(string)
		code, out = c.exchange(q.Get("code"), nil)
		if code != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Errorf("a reused code: %d %v, want invalid_grant", code, out)
		}
		if s, _ := mcpStatus(t, st.url, access); s != http.StatusUnauthorized {
			t.Errorf("the first exchange's access token after the code's reuse: %d, want 401 (the grant is revoked)", s)
		}
	})
	t.Run("wrong redirect URI", func(t *testing.T) {
		// At the authorization endpoint: not redirected anywhere.
		p := c.authParams()
		p.Set("redirect_uri", "https://evil.example/callback")
		resp, page, err := b.do("GET", st.url+"/oauth/authorize?"+p.Encode(), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" || !strings.Contains(page, "refused") {
			t.Errorf("an unregistered redirect_uri: %v %v, want a 400 page and no redirect", resp.StatusCode, err)
		}
		// At the token endpoint: another redirect URI than the code's.
		q := c.authorize(nil)
		code, out := c.exchange(q.Get("code"), func(f url.Values) { f.Set("redirect_uri", "http://127.0.0.1:53682/other") })
		if code != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Errorf("exchanging with another redirect_uri: %d %v, want invalid_grant", code, out)
		}
	})
	t.Run("another audience", func(t *testing.T) {
		q := c.authorize(func(p url.Values) { p.Set("resource", "https://other.example/mcp") })
		if q.Get("error") != "invalid_target" || q.Get("code") != "" {
			t.Errorf("resource of another server: %v, want invalid_target", q)
		}
		q = c.authorize(nil)
		code, out := c.exchange(q.Get("code"), func(f url.Values) { f.Set("resource", "https://other.example/mcp") })
		if code != http.StatusBadRequest || out["error"] != "invalid_target" {
			t.Errorf("a token request for another resource: %d %v, want invalid_target", code, out)
		}
	})
	t.Run("reused refresh token", func(t *testing.T) {
		_, rt1 := c.tokens()
		code, out := c.refresh(rt1)
		if code != http.StatusOK {
			t.Fatalf("refreshing: %d %v", code, out)
		}
		access2, rt2 := out["access_token"].(string), out["refresh_token"].(string)
		if rt2 == "" || rt2 == rt1 {
			t.Fatalf("no new refresh token: %v", out)
		}
		if s, _ := mcpStatus(t, st.url, access2); s != http.StatusOK {
			t.Fatalf("the refreshed access token: %d", s)
		}
		code, out = c.refresh(rt1)
		if code != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Errorf("a reused refresh token: %d %v, want invalid_grant", code, out)
		}
		// The whole grant is revoked: the newer refresh token and its
		// access token too.
		if code, out := c.refresh(rt2); out["error"] != "invalid_grant" {
			t.Errorf("the newer refresh token after the reuse: %d %v, want invalid_grant", code, out)
		}
		if s, _ := mcpStatus(t, st.url, access2); s != http.StatusUnauthorized {
			t.Errorf("the newer access token after the reuse: %d, want 401", s)
		}
	})
	t.Run("revocation endpoint", func(t *testing.T) {
		access, rt := c.tokens()
		resp, err := http.PostForm(st.url+"/oauth/revoke", url.Values{"token": {rt}, "client_id": {c.clientID}})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("revoking: %v %v", resp, err)
		}
		resp.Body.Close()
		if s, _ := mcpStatus(t, st.url, access); s != http.StatusUnauthorized {
			t.Errorf("the access token after revoking its refresh token: %d, want 401", s)
		}
		if code, out := c.refresh(rt); out["error"] != "invalid_grant" {
			t.Errorf("a revoked refresh token: %d %v, want invalid_grant", code, out)
		}
	})
	t.Run("registration", func(t *testing.T) {
		for name, body := range map[string]string{
			"http to a remote host": `{"redirect_uris":["http://evil.example/cb"]}`,
			"no redirect URI":       `{"client_name":"x"}`,
			"a custom scheme":       `{"redirect_uris":["myapp://cb"]}`,
			"a fragment":            `{"redirect_uris":["https://app.example/cb#x"]}`,
			"implicit grant":        `{"redirect_uris":["https://app.example/cb"],"grant_types":["implicit"]}`,
		} {
			resp, err := http.Post(st.url+"/oauth/register", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var e map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || (e["error"] != "invalid_redirect_uri" && e["error"] != "invalid_client_metadata") {
				t.Errorf("%s: %d %v, want a registration error", name, resp.StatusCode, e)
			}
		}
	})
	t.Run("deny", func(t *testing.T) {
		loc, err := b.consent(st.url+"/oauth/authorize?"+c.authParams().Encode(), "deny")
		if err != nil {
			t.Fatal(err)
		}
		if q := loc.Query(); q.Get("error") != "access_denied" || q.Get("code") != "" || q.Get("iss") != st.url {
			t.Errorf("denied: %v, want access_denied with iss", q)
		}
	})
	t.Run("consent without CSRF token", func(t *testing.T) {
		form := c.authParams()
		form.Set("action", "allow")
		resp, _, err := b.do("POST", st.url+"/oauth/authorize", form)
		if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" {
			t.Errorf("allow without the CSRF token: %v %v, want 403", resp.StatusCode, err)
		}
	})
	t.Run("not signed in", func(t *testing.T) {
		stranger := newBrowser(t)
		resp, page, err := stranger.do("GET", st.url+"/oauth/authorize?"+c.authParams().Encode(), nil)
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(page, `id="sign-in"`) || strings.Contains(page, `id="consent"`) {
			t.Fatalf("authorization without a session: %d, want the sign-in offer", resp.StatusCode)
		}
		// The sign-in comes back to the authorization.
		m := regexp.MustCompile(`href="([^"]+)" id="sign-in"`).FindStringSubmatch(page)
		login := html.UnescapeString(m[1])
		tok, _ := st.s.CreateToken(context.Background(), "alice", "browser")
		_, lp, _ := stranger.do("GET", st.url+login, nil)
		f := hosttest.HiddenFields(lp, "")
		f.Set("token", tok)
		resp, _, err = stranger.do("POST", st.url+"/settings/login", f)
		if err != nil || resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/oauth/authorize?") {
			t.Fatalf("signing in from the authorization: %v, Location %q", err, resp.Header.Get("Location"))
		}
		loc, err := stranger.consent(st.url+resp.Header.Get("Location"), "allow")
		if err != nil || loc.Query().Get("code") == "" {
			t.Errorf("consent after signing in: %v %v", loc, err)
		}
	})
}

// TestOAuthRestart: the store survives a restart: a refresh token issued
// before works after, and its access token on /mcp. A server whose
// public URL changed refuses the old tokens: they are for another
// audience.
func TestOAuthRestart(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	const public = "http://agenthost.test"
	st := startOAuthStack(t, stackOptions{dataDir: dataDir, publicURL: public})
	b := newBrowser(t)
	b.signIn(st, "alice")
	// The client talks to the listener; the issuer and resource are the
	// public URL's.
	c := newRawClient(t, st, b)
	p := c.authParams()
	p.Set("resource", public+"/mcp")
	loc, err := b.consent(st.url+"/oauth/authorize?"+p.Encode(), "allow")
	if err != nil || loc.Query().Get("iss") != public {
		t.Fatalf("authorizing: %v %v", loc, err)
	}
	code, out := c.exchange(loc.Query().Get("code"), func(f url.Values) { f.Set("resource", public+"/mcp") })
	if code != http.StatusOK {
		t.Fatalf("exchange: %d %v", code, out)
	}
	rt := out["refresh_token"].(string)
	st.close()

	st2 := startOAuthStack(t, stackOptions{dataDir: dataDir, publicURL: public})
	code, out = tokenRequest(t, st2.url, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {c.clientID}})
	if code != http.StatusOK {
		t.Fatalf("refreshing after a restart: %d %v", code, out)
	}
	access := out["access_token"].(string)
	if s, _ := mcpStatus(t, st2.url, access); s != http.StatusOK {
		t.Errorf("the access token refreshed after a restart: %d, want 200", s)
	}
	rt = out["refresh_token"].(string)
	st2.close()

	// Another public URL: another resource.
	st3 := startOAuthStack(t, stackOptions{dataDir: dataDir, publicURL: "https://moved.example"})
	if s, challenge := mcpStatus(t, st3.url, access); s != http.StatusUnauthorized || !strings.Contains(challenge, `error="invalid_token"`) {
		t.Errorf("a token for another audience: %d %q, want 401 invalid_token", s, challenge)
	}
	// Nor does the grant refresh there: its audience is not this server.
	if code, out = tokenRequest(t, st3.url, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {c.clientID}}); code != http.StatusBadRequest {
		t.Errorf("refreshing a grant of another audience: %d %v, want 400", code, out)
	}
}
