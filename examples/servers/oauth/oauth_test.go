package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs the server on a loopback port and returns its base URL.
func serve(t *testing.T, o options) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	srv.Config.Handler = newMux(base, o)
	srv.Start()
	t.Cleanup(srv.Close)
	return base
}

// signIn follows an authorization URL as a browser would: the form, the
// account, Allow; it returns the redirect's query.
func signIn(t *testing.T, authURL, login string) url.Values {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(authURL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the authorize page: %v %v", resp, err)
	}
	resp.Body.Close()
	u, _ := url.Parse(authURL)
	form := u.Query()
	form.Set("login", login)
	form.Set("decision", "allow")
	resp, err = hc.PostForm(u.Scheme+"://"+u.Host+"/authorize", form)
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("allowing: %v %v", resp, err)
	}
	resp.Body.Close()
	back, _ := url.Parse(resp.Header.Get("Location"))
	return back.Query()
}

// TestWithGoSDKClient signs in with go-sdk's own client (discovery from
// the 401, registration, PKCE, iss) and calls whoami.
func TestWithGoSDKClient(t *testing.T) {
	base := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}, admin: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "test", RedirectURIs: []string{"http://127.0.0.1:1/callback"}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}}},
		RequestRefreshToken: true,
		AuthorizationCodeFetcher: func(_ context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			q := signIn(t, a.URL, "ann")
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", OAuthHandler: h, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("whoami: %v %+v", err, res)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(b), `"login":"ann"`) {
		t.Errorf("whoami = %s", b)
	}
	var st stats
	getJSON(t, base+"/admin/stats", &st)
	if st.Registrations != 1 || st.CodeExchanges != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestPKCERotationRevocation checks what the clients under test rely on:
// a wrong verifier is refused, a refresh rotates the refresh token and a
// reused one revokes the grant, and a revoked grant's tokens stop working.
func TestPKCERotationRevocation(t *testing.T) {
	base := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}, admin: true})
	ctx := context.Background()
	reg, err := oauthex.RegisterClient(ctx, base+"/register", &oauthex.ClientRegistrationMetadata{
		RedirectURIs: []string{"http://127.0.0.1:1/cb"}, TokenEndpointAuthMethod: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &oauth2.Config{ClientID: reg.ClientID, RedirectURL: "http://127.0.0.1:1/cb", Scopes: []string{"mcp"},
		Endpoint: oauth2.Endpoint{AuthURL: base + "/authorize", TokenURL: base + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	resource := oauth2.SetAuthURLParam("resource", base+"/mcp")
	verifier := oauth2.GenerateVerifier()
	code := func() string {
		return signIn(t, cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier), resource), "bea").Get("code")
	}
	var re *oauth2.RetrieveError
	if _, err := cfg.Exchange(ctx, code(), oauth2.VerifierOption(oauth2.GenerateVerifier()), resource); !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Errorf("a wrong verifier: %v; want invalid_grant", err)
	}
	tok, err := cfg.Exchange(ctx, code(), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(rt string) (*oauth2.Token, error) {
		return cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: rt}).Token()
	}
	tok2, err := refresh(tok.RefreshToken)
	if err != nil || tok2.RefreshToken == tok.RefreshToken {
		t.Fatalf("refresh: %v (rotated: %v)", err, tok2 != nil && tok2.RefreshToken != tok.RefreshToken)
	}
	if _, err := refresh(tok.RefreshToken); !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Errorf("reusing a rotated refresh token: %v; want invalid_grant", err)
	}
	if _, err := refresh(tok2.RefreshToken); err == nil {
		t.Error("the grant survived a refresh-token reuse")
	}
	var st stats
	getJSON(t, base+"/admin/stats", &st)
	if st.Refreshes != 1 || st.RefreshReuses != 1 {
		t.Errorf("stats = %+v", st)
	}
	// Revocation (RFC 7009) ends a fresh grant at once.
	tok3, err := cfg.Exchange(ctx, code(), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.PostForm(base+"/revoke", url.Values{"token": {tok3.RefreshToken}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := refresh(tok3.RefreshToken); err == nil {
		t.Error("a revoked grant refreshed")
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+tok3.AccessToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("a revoked token on /mcp: %d %q; want 401 with resource_metadata", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

// TestOpenInitialize checks -open-initialize: without a token, initialize
// and its notification pass and open a session, tools/list on that
// session is refused with 401 and the challenge, DELETE ends the session;
// without the mode, initialize is refused already.
func TestOpenInitialize(t *testing.T) {
	post := func(base, sid, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	open := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}, openInitialize: true})
	resp := post(open, "", initialize)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize without a token: %s, session %q", resp.Status, sid)
	}
	if resp := post(open, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); resp.StatusCode/100 != 2 {
		t.Errorf("notifications/initialized without a token: %s", resp.Status)
	}
	resp = post(open, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("tools/list without a token: %s %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
	del, _ := http.NewRequest(http.MethodDelete, open+"/mcp", nil)
	del.Header.Set("Mcp-Session-Id", sid)
	if resp, err := http.DefaultClient.Do(del); err != nil || resp.StatusCode/100 != 2 {
		t.Errorf("ending the session without a token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	closed := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}})
	if resp := post(closed, "", initialize); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("initialize without a token and without the mode: %s", resp.Status)
	}
}

// TestLegacy checks -legacy, a server on the 2025-03-26 authorization
// rules: no metadata documents, a 401 that names none, no iss in the
// redirect; a bare go-sdk client signs in with the endpoints at the root
// (its fallback) and calls whoami.
func TestLegacy(t *testing.T) {
	base := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}, admin: true, legacy: true})
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource",
		"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s; want 404", p, resp.Status)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var iss string
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "test", RedirectURIs: []string{"http://127.0.0.1:1/callback"}, TokenEndpointAuthMethod: "none"}},
		AuthorizationCodeFetcher: func(_ context.Context, a *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			if !strings.HasPrefix(a.URL, base+"/authorize?") {
				t.Errorf("authorization URL %s; want %s/authorize", a.URL, base)
			}
			q := signIn(t, a.URL, "lee")
			iss = q.Get("iss")
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", OAuthHandler: h, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("whoami: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(b), `"login":"lee"`) {
		t.Errorf("whoami = %s", b)
	}
	if iss != "" {
		t.Errorf("the redirect carries iss=%q; 2025-03-26 sends none", iss)
	}
}

// TestClientCredentials checks -client-credentials: the client gets a
// token of its own with its secret in the Authorization header or the
// body, or with a signed assertion; a wrong secret, an assertion signed
// by another key, for another audience, or used twice are refused
// invalid_client; the token opens /mcp as account "client:ID".
func TestClientCredentials(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	base := serve(t, options{accessTTL: time.Hour, scopes: []string{"mcp"}, admin: true,
		ccClient: "svc", ccSecret: "s3cret", ccKey: &key.PublicKey})
	ctx := context.Background()
	cc := func(style oauth2.AuthStyle, secret string, params url.Values) (*oauth2.Token, error) {
		c := &clientcredentials.Config{ClientID: "svc", ClientSecret: secret, TokenURL: base + "/token", Scopes: []string{"mcp"},
			AuthStyle: style, EndpointParams: params}
		return c.Token(ctx)
	}
	assertion := func(k *rsa.PrivateKey, aud, jti string) url.Values {
		s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: "svc", Subject: "svc",
			Audience: jwt.ClaimStrings{aud}, ID: jti, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Minute))}).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return url.Values{"client_assertion_type": {assertionType}, "client_assertion": {s}}
	}
	var re *oauth2.RetrieveError
	for name, try := range map[string]func() (*oauth2.Token, error){
		"basic": func() (*oauth2.Token, error) { return cc(oauth2.AuthStyleInHeader, "s3cret", nil) },
		"post":  func() (*oauth2.Token, error) { return cc(oauth2.AuthStyleInParams, "s3cret", nil) },
		"jwt": func() (*oauth2.Token, error) {
			return cc(oauth2.AuthStyleInParams, "", assertion(key, base+"/token", "j1"))
		},
	} {
		tok, err := try()
		if err != nil || tok.AccessToken == "" || tok.RefreshToken != "" {
			t.Fatalf("%s: %v %+v; want an access token without refresh token", name, err, tok)
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			t.Errorf("%s: the token on /mcp: %s", name, resp.Status)
		}
	}
	for name, try := range map[string]func() (*oauth2.Token, error){
		"wrong secret": func() (*oauth2.Token, error) { return cc(oauth2.AuthStyleInHeader, "wrong", nil) },
		"other key": func() (*oauth2.Token, error) {
			return cc(oauth2.AuthStyleInParams, "", assertion(other, base+"/token", "j2"))
		},
		"other aud": func() (*oauth2.Token, error) {
			return cc(oauth2.AuthStyleInParams, "", assertion(key, "https://elsewhere", "j3"))
		},
		"assertion reused": func() (*oauth2.Token, error) { return cc(oauth2.AuthStyleInParams, "", assertion(key, base, "j1")) },
	} {
		if _, err := try(); !errors.As(err, &re) || re.ErrorCode != "invalid_client" {
			t.Errorf("%s: %v; want invalid_client", name, err)
		}
	}
	var st stats
	getJSON(t, base+"/admin/stats", &st)
	if st.ClientCredentials["client_secret_basic"] != 1 || st.ClientCredentials["client_secret_post"] != 1 ||
		st.ClientCredentials["private_key_jwt"] != 1 || st.ClientsRefused != 4 {
		t.Errorf("stats = %+v", st)
	}
}
