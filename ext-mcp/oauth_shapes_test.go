package extmcp_test

import (
	"encoding/json"
	"errors"
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
