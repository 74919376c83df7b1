package extmcp_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// TestOAuthDefaultEndpoints checks a server on the MCP 2025-03-26
// authorization rules (the example's -legacy: no metadata documents,
// /authorize, /token and /register at its root): a sign-in is refused
// before anything is registered or anybody is sent anywhere, with an
// error that names the server and the operator's opt-in; with
// "allowDefaultEndpoints" the sign-in registers at /register, sends the
// person to /authorize with PKCE S256, the grant is bound to the
// server's origin as issuer, and calls carry the account's token.
func TestOAuthDefaultEndpoints(t *testing.T) {
	as := startOAuth(t, "-legacy")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	if st := f.statusOf("alice", "o"); st.State != ext.StateNeedsSignIn {
		t.Fatalf("before signing in: %+v", st)
	}
	_, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), `"o"`) || !strings.Contains(err.Error(), `"allowDefaultEndpoints": true`) {
		t.Errorf("BeginAuth without the opt-in: %v; want refused naming the server and allowDefaultEndpoints", err)
	}
	if st := as.stats(); st.Registrations != 0 || st.Authorizations != 0 {
		t.Errorf("the refused sign-in reached the authorization server: %+v", st)
	}

	f2 := newFixtureAt(t, "inprocess", oauthConfig(as, `, "oauth": {"allowDefaultEndpoints": true}`), publicURL, nil)
	f2.activate("alice")
	begin, err := f2.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if err != nil {
		t.Fatalf("BeginAuth with the opt-in: %v", err)
	}
	if !strings.HasPrefix(begin.URL, as.base+"/authorize?") || !strings.Contains(begin.URL, "code_challenge_method=S256") {
		t.Errorf("the authorization URL %s; want %s/authorize with PKCE S256", begin.URL, as.base)
	}
	login := canary("alice")
	q := follow(t, begin.URL, login, true)
	if _, err := f2.e.(ext.Authorizer).CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "alice", Name: "o", State: begin.State, Query: q}); err != nil {
		t.Fatalf("CompleteAuth: %v", err)
	}
	f2.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	if got := f2.whoami("alice"); got != login {
		t.Errorf("alice's calls carry the token of %q, want %q", got, login)
	}
	raw, _ := f2.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	var g struct{ Issuer, TokenURL string }
	_ = json.Unmarshal([]byte(raw), &g)
	if g.Issuer != as.base || g.TokenURL != as.base+"/token" {
		t.Errorf("the grant is bound to issuer %q, token endpoint %q; want %s and its /token", g.Issuer, g.TokenURL, as.base)
	}
	if st := as.stats(); st.Registrations != 1 || st.CodeExchanges != 1 {
		t.Errorf("after the sign-in: %+v", st)
	}
}

// TestOAuthClientCredentials checks shared servers on the client
// credentials grant against the example's -client-credentials: the
// operator's client secret (client_secret_basic, client_secret_post) or
// private key (private_key_jwt, an RFC 7523 assertion the server checks
// with the public key) gets the token at connect, with nobody signing in
// and no browser; the users the server is lent to call it as the
// machine's account; the token is obtained again before it expires; a
// wrong secret leaves the server failed with a reason that names the
// server, the client and the operator secret (never the secret's value);
// no secret or token is logged or shown; BeginAuth refuses the servers.
// The token endpoint is found from the metadata, or configured (post).
func TestOAuthClientCredentials(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubFile := filepath.Join(t.TempDir(), "client.pub")
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		t.Fatal(err)
	}
	priv, _ := x509.MarshalPKCS8PrivateKey(key)
	secret, wrong := canary("cc-secret"), canary("cc-wrong")
	t.Setenv("EXTMCP_TEST_CC_SECRET", secret)
	as := startOAuth(t, "-access-ttl", "3s", "-client-credentials", "svc", "-client-secret-env", "EXTMCP_TEST_CC_SECRET", "-client-jwt-key", pubFile)
	shared := func(oauth string) string {
		return fmt.Sprintf(`{"url": %q, "credentials": "shared", "users": ["alice"], "oauth": {"grant": "client_credentials", "clientId": "svc", %s}}`,
			as.mcpURL(), oauth)
	}
	f := newFixtureAt(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"basic": %s, "post": %s, "jwt": %s, "wrong": %s}}`,
		shared(`"clientSecret": {"secret": "cc-secret"}`),
		shared(`"clientSecret": {"secret": "cc-secret"}, "tokenEndpointAuth": "client_secret_post", "tokenEndpoint": "`+as.base+`/token"`),
		shared(`"privateKey": {"secret": "cc-key"}`),
		shared(`"clientSecret": {"secret": "cc-wrong"}`)), publicURL, nil)
	f.setSecret(ext.OperatorUser, "cc-secret", secret)
	f.setSecret(ext.OperatorUser, "cc-wrong", wrong)
	f.setSecret(ext.OperatorUser, "cc-key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})))
	f.setToggles("alice", `{"basic": true, "post": true, "jwt": true, "wrong": true}`)
	f.activate("alice")
	f.waitTools("alice", func(n []string) bool {
		return hasPrefix(n, "basic/whoami") && hasPrefix(n, "post/whoami") && hasPrefix(n, "jwt/whoami")
	})
	whoami := func(server string) string {
		res := f.mustCall("alice", server+"/whoami", `{}`)
		var out struct{ Login string }
		_ = json.Unmarshal(res.StructuredContent, &out)
		return out.Login
	}
	for _, s := range []string{"basic", "post", "jwt"} {
		if got := whoami(s); got != "client:svc" {
			t.Errorf("%s/whoami = %q, want the machine's account client:svc", s, got)
		}
		if st := f.statusOf("alice", s); st.State != "connected" {
			t.Errorf("%s: %+v", s, st)
		}
	}
	st := as.stats()
	if st.ClientCredentials["client_secret_basic"] < 1 || st.ClientCredentials["client_secret_post"] < 1 || st.ClientCredentials["private_key_jwt"] < 1 ||
		st.Registrations != 0 || st.Authorizations != 0 {
		t.Errorf("the authorization server saw %+v; want a client credentials grant of each method, no registration, no authorization", st)
	}
	bad := f.statusOf("alice", "wrong")
	if bad.State == "connected" || !strings.Contains(bad.Reason, `"wrong"`) || !strings.Contains(bad.Reason, "invalid_client") ||
		!strings.Contains(bad.Reason, `"cc-wrong"`) || !strings.Contains(bad.Reason, `"svc"`) {
		t.Errorf("the server with the wrong secret: %+v; want failed, naming the server, the client, the operator secret and invalid_client", bad)
	}
	t.Logf("the wrong secret: %s: %s", bad.State, bad.Reason)
	if _, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: ext.OperatorUser, Name: "basic", RedirectURL: redirectURL}); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("BeginAuth to a client credentials server: %v; want refused", err)
	}

	// Its tokens live 3 s: calls go on working, on tokens obtained again.
	before := st.ClientCredentials["client_secret_basic"]
	eventually(t, "a new token is obtained before the old one expires", func() bool {
		if got := whoami("basic"); got != "client:svc" {
			t.Fatalf("basic/whoami = %q while renewing", got)
		}
		return as.stats().ClientCredentials["client_secret_basic"] > before
	})

	var tokens map[string][]string
	as.get("/admin/tokens", &tokens)
	leaks := append([]string{secret, wrong, "PRIVATE KEY"}, tokens["client:svc"]...)
	if len(tokens["client:svc"]) < 4 {
		t.Errorf("the machine holds %d tokens, want one per server at least", len(tokens["client:svc"]))
	}
	shown := f.logs.String() + fmt.Sprint(f.status(""), f.status("alice"))
	for _, l := range leaks {
		if strings.Contains(shown, l) {
			t.Errorf("a secret or token is in the logs or the status")
		}
	}
	if names, _ := f.h.UserStore("alice").Secrets().List(ctx(t)); len(names) != 0 {
		t.Errorf("alice's store holds %v", names)
	}
}

// TestOAuthNoResourceMetadata checks a server on the 2025-03-26
// discovery (the example's -no-resource-metadata): no RFC 9728 metadata,
// a 401 that names none, RFC 8414 metadata at the MCP server's origin
// listing S256. go-sdk takes the origin as the authorization server; the
// sign-in needs no opt-in, and calls carry the account's token.
func TestOAuthNoResourceMetadata(t *testing.T) {
	as := startOAuth(t, "-no-resource-metadata")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	login := canary("alice")
	f.signIn("alice", "o", login)
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	if got := f.whoami("alice"); got != login {
		t.Errorf("alice's calls carry the token of %q, want %q", got, login)
	}
}

// TestOAuthClientCredentialsWithoutMetadata checks the client credentials
// grant against a server that publishes no metadata (the example's
// -legacy): without a configured token endpoint the server fails with a
// reason that says to configure one; with allowDefaultEndpoints its
// /token at the root is used; with tokenEndpoint, that one.
func TestOAuthClientCredentialsWithoutMetadata(t *testing.T) {
	secret := canary("cc-secret")
	t.Setenv("EXTMCP_TEST_CC_SECRET", secret)
	as := startOAuth(t, "-legacy", "-client-credentials", "svc", "-client-secret-env", "EXTMCP_TEST_CC_SECRET")
	shared := func(oauth string) string {
		return fmt.Sprintf(`{"url": %q, "credentials": "shared", "users": ["alice"], "oauth": {"grant": "client_credentials", "clientId": "svc",
			"clientSecret": {"secret": "cc-secret"}%s}}`, as.mcpURL(), oauth)
	}
	f := newFixtureAt(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"none": %s, "default": %s, "configured": %s}}`,
		shared(""), shared(`, "allowDefaultEndpoints": true`), shared(`, "tokenEndpoint": "`+as.base+`/token"`)), publicURL, nil)
	f.setSecret(ext.OperatorUser, "cc-secret", secret)
	f.setToggles("alice", `{"none": true, "default": true, "configured": true}`)
	f.activate("alice")
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "default/whoami") && hasPrefix(n, "configured/whoami") })
	for _, s := range []string{"default", "configured"} {
		res := f.mustCall("alice", s+"/whoami", `{}`)
		if !strings.Contains(string(res.StructuredContent), "client:svc") {
			t.Errorf("%s/whoami: %s", s, res.StructuredContent)
		}
	}
	st := f.statusOf("alice", "none")
	if st.State == "connected" || !strings.Contains(st.Reason, `MCP server "none"`) || !strings.Contains(st.Reason, `"tokenEndpoint"`) {
		t.Errorf("a server without metadata or a configured token endpoint: %+v; want failed, saying to set oauth.tokenEndpoint", st)
	}
}
