package extmcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// oauthServer is a running example OAuth server (examples/servers/oauth):
// its own authorization server and a protected MCP endpoint.
type oauthServer struct {
	t    testing.TB
	base string
}

// startOAuth runs the example OAuth server with args (-admin always).
func startOAuth(t testing.TB, args ...string) *oauthServer {
	t.Helper()
	needBins(t)
	cmd := exec.Command(bins.oauth, append([]string{"-addr", "127.0.0.1:0", "-admin"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, "serving ") {
		t.Fatalf("the oauth server did not start: %q %v", line, err)
	}
	u := strings.TrimSpace(line[strings.Index(line, "serving ")+len("serving "):])
	return &oauthServer{t: t, base: strings.TrimSuffix(u, "/mcp")}
}

func (s *oauthServer) mcpURL() string { return s.base + "/mcp" }

type asStats struct {
	Registrations, Authorizations, CodeExchanges, Refreshes, RefreshReuses, Revocations, Rejected, Unavailable int
	RefreshesWithoutResource                                                                                   int
	Sessions                                                                                                   int // open now
	ClientCredentials                                                                                          map[string]int
}

func (s *oauthServer) stats() asStats {
	s.t.Helper()
	var st asStats
	s.get("/admin/stats", &st)
	return st
}

// seen returns the account of every MCP request the server accepted.
func (s *oauthServer) seen() []string {
	s.t.Helper()
	var reqs []struct{ Login string }
	s.get("/admin/seen", &reqs)
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Login
	}
	return out
}

func (s *oauthServer) get(path string, v any) {
	s.t.Helper()
	resp, err := http.Get(s.base + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		s.t.Fatal(err)
	}
}

// revoke withdraws every grant of account login at the provider.
func (s *oauthServer) revoke(login string) {
	s.t.Helper()
	resp, err := http.Post(s.base+"/admin/revoke?login="+url.QueryEscape(login), "", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
}

// follow plays the person's browser: it opens the authorization URL,
// answers the provider's sign-in form as account login (or denies), and
// returns the raw query the provider redirects back with.
func follow(t testing.TB, authURL, login string, allow bool) string {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the authorize page answered %s", resp.Status)
	}
	u, _ := url.Parse(authURL)
	form := u.Query()
	form.Set("login", login)
	form.Set("decision", map[bool]string{true: "allow", false: "deny"}[allow])
	resp, err = hc.PostForm(u.Scheme+"://"+u.Host+u.Path, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("the provider answered %s, redirect %q", resp.Status, resp.Header.Get("Location"))
	}
	if !strings.HasPrefix(back.String(), redirectURL) {
		t.Fatalf("redirected to %s, want the host's callback", back)
	}
	return back.RawQuery
}

const (
	publicURL   = "http://127.0.0.1:7777"
	redirectURL = publicURL + "/oauth/callback"
)

func oauthConfig(s *oauthServer, extra string) string {
	return fmt.Sprintf(`{"mcpServers": {"o": {"url": %q%s}}}`, s.mcpURL(), extra)
}

// signIn runs a whole sign-in of user to server o as account login.
func (f *fixture) signIn(user, server, login string) *ext.CompleteAuthResult {
	f.t.Helper()
	a := f.e.(ext.Authorizer)
	begin, err := a.BeginAuth(ctx(f.t), &ext.BeginAuthRequest{User: user, Name: server, RedirectURL: redirectURL})
	if err != nil {
		f.t.Fatalf("BeginAuth(%s, %s): %v", user, server, err)
	}
	q := follow(f.t, begin.URL, login, true)
	done, err := a.CompleteAuth(ctx(f.t), &ext.CompleteAuthRequest{User: user, Name: server, State: begin.State, Query: q})
	if err != nil {
		f.t.Fatalf("CompleteAuth(%s, %s): %v", user, server, err)
	}
	return done
}

// whoami returns the provider account behind user's call of o/whoami.
func (f *fixture) whoami(user string) string {
	f.t.Helper()
	res := f.mustCall(user, "o/whoami", `{}`)
	var out struct{ Login string }
	if err := json.Unmarshal(res.StructuredContent, &out); err != nil {
		f.t.Fatalf("whoami: %s", res.StructuredContent)
	}
	return out.Login
}

// TestOAuthSignIn is the whole life of a sign-in, on every carrier: a
// server that asks for OAuth shows "needs sign-in" with the link; the
// user signs in (discovery from the 401, registration, PKCE, the
// provider's form, the code exchange); the tools appear and calls carry
// the user's own token; the grant is in the user's secrets only and
// never in logs or status; a second sign-in reuses the registration; a
// revoked grant makes the next call fail with the link and the server
// show "needs sign-in" again.
func TestOAuthSignIn(t *testing.T) {
	for _, carrier := range []string{"inprocess", "grpc"} {
		t.Run(carrier, func(t *testing.T) {
			as := startOAuth(t)
			f := newFixtureAt(t, carrier, oauthConfig(as, ""), publicURL, nil)
			f.activate("alice")
			st := f.statusOf("alice", "o")
			link := publicURL + "/settings/connect/mcp/o"
			if st.State != ext.StateNeedsSignIn || !strings.Contains(st.Reason, link) || !strings.Contains(st.Reason, "agenthost auth login --user alice o") {
				t.Fatalf("before signing in: %+v; want needs sign-in with the link and the command", st)
			}
			res, err := f.call("alice", "o/whoami", `{}`)
			if err != nil || !res.IsError || !strings.Contains(res.Text(), "needs sign-in") || !strings.Contains(res.Text(), link) {
				t.Errorf("a call before signing in: %v %q; want an error result with the link", err, res.Text())
			}

			login := canary("alice")
			done := f.signIn("alice", "o", login)
			if done.Message != "Connected to o." {
				t.Errorf("CompleteAuth message %q", done.Message)
			}
			f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
			if got := f.whoami("alice"); got != login {
				t.Errorf("alice's calls carry the token of %q, want %q", got, login)
			}
			if st := f.statusOf("alice", "o"); st.State != "connected" {
				t.Errorf("after signing in: %+v", st)
			}
			names, _ := f.h.UserStore("alice").Secrets().List(ctx(t))
			if fmt.Sprint(names) != "["+extmcp.GrantSecret("o")+"]" {
				t.Errorf("alice's secrets = %v, want only the grant", names)
			}
			raw, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
			var g struct{ Access, Refresh, Issuer, ClientID, Resource string }
			_ = json.Unmarshal([]byte(raw), &g)
			if g.Access == "" || g.Refresh == "" || g.Issuer != as.base || g.Resource != as.mcpURL() || g.ClientID == "" {
				t.Errorf("the stored grant lacks its binding: issuer %q resource %q client %q", g.Issuer, g.Resource, g.ClientID)
			}
			for _, leak := range []string{g.Access, g.Refresh} {
				if strings.Contains(f.logs.String(), leak) || strings.Contains(fmt.Sprint(f.status("")), leak) {
					t.Errorf("a token of the grant is in the logs or the status")
				}
			}

			// Signing in again (a new account at the provider) reuses
			// the registration made for this issuer.
			login2 := canary("alice2")
			f.signIn("alice", "o", login2)
			eventually(t, "alice uses her new sign-in", func() bool { return f.whoami("alice") == login2 })
			if st := as.stats(); st.Registrations != 1 || st.CodeExchanges != 2 {
				t.Errorf("after two sign-ins: %+v; want one registration, two exchanges", st)
			}

			// The account holder revokes access at the provider: the next
			// call's 401 tries one refresh, which is refused for good.
			as.revoke(login2)
			res, err = f.call("alice", "o/whoami", `{}`)
			if err != nil || !res.IsError || !strings.Contains(res.Text(), "revoked or has expired") || !strings.Contains(res.Text(), link) {
				t.Errorf("a call after the revocation: %v %q; want an error result saying so, with the link", err, res.Text())
			}
			eventually(t, "the server needs sign-in again", func() bool {
				return f.statusOf("alice", "o").State == ext.StateNeedsSignIn
			})
			if st := f.statusOf("alice", "o"); !strings.Contains(st.Reason, "revoked") {
				t.Errorf("status after the revocation: %+v", st)
			}
			raw, _ = f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
			if strings.Contains(raw, `"access"`) || !strings.Contains(raw, `"dead"`) {
				t.Errorf("the dead grant still holds tokens: %d bytes", len(raw))
			}
		})
	}
}

// TestOAuthChallengeFromToolsList: a server that lets initialize through
// without a token and asks for one from tools/list on (the example's
// -open-initialize) needs sign-in, and BeginAuth finds its challenge on
// tools/list, in a session of the probe's own that it ends; the sign-in
// completes and calls carry the user's token.
func TestOAuthChallengeFromToolsList(t *testing.T) {
	as := startOAuth(t, "-open-initialize")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	if st := f.statusOf("alice", "o"); st.State != ext.StateNeedsSignIn {
		t.Fatalf("before signing in: %+v; want needs sign-in", st)
	}
	open := as.stats().Sessions
	a := f.e.(ext.Authorizer)
	begin, err := a.BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if err != nil {
		t.Fatalf("BeginAuth: %v", err)
	}
	eventually(t, "the probe's session ends", func() bool { return as.stats().Sessions == open })
	login := canary("alice")
	q := follow(t, begin.URL, login, true)
	if _, err := a.CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "alice", Name: "o", State: begin.State, Query: q}); err != nil {
		t.Fatalf("CompleteAuth: %v", err)
	}
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	if got := f.whoami("alice"); got != login {
		t.Errorf("alice's calls carry the token of %q, want %q", got, login)
	}
}

// TestOAuthChallengeFromToolCall: a server that lists its tools without a
// token and asks for one only from tools/call on (-open-initialize
// -open-list) is connected, and its call fails asking for a sign-in;
// BeginAuth, whose probe meets no refusal (it calls no tool), starts from
// the refusal that call met, and the sign-in completes.
func TestOAuthChallengeFromToolCall(t *testing.T) {
	as := startOAuth(t, "-open-initialize", "-open-list")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	res, err := f.call("alice", "o/whoami", `{}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text(), "sign in") {
		t.Fatalf("a call before signing in: %v %q; want an error result asking for a sign-in", err, res.Text())
	}
	login := canary("alice")
	f.signIn("alice", "o", login)
	eventually(t, "alice's calls carry her token", func() bool {
		res, err := f.call("alice", "o/whoami", `{}`)
		return err == nil && !res.IsError && strings.Contains(string(res.StructuredContent), login)
	})
}

// eventually retries cond for up to 20 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOAuthRefreshSingleFlight lets the access token expire and makes
// twenty calls at once: exactly one refresh reaches the authorization
// server (whose refresh tokens rotate and whose reuse detection would
// revoke the grant on a second use), and every call succeeds. A retiring
// and a new connection of the same user share the same token source.
func TestOAuthRefreshSingleFlight(t *testing.T) {
	as := startOAuth(t, "-access-ttl", "2s")
	f := newFixtureAt(t, "grpc", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	login := canary("alice")
	f.signIn("alice", "o", login)
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	time.Sleep(2100 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.call("alice", "o/whoami", `{}`)
			if err != nil || res.IsError || !strings.Contains(string(res.StructuredContent), login) {
				errs <- fmt.Sprintf("%v %q", err, res.Text())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a call at expiry: %s", e)
	}
	if st := as.stats(); st.Refreshes != 1 || st.RefreshReuses != 0 {
		t.Errorf("twenty calls at expiry: %+v; want exactly one refresh and no reuse", st)
	}
	// RFC 8707 on every token request (MCP authorization), the refresh
	// too, and the one the grant was made for (else invalid_target).
	if st := as.stats(); st.RefreshesWithoutResource != 0 {
		t.Errorf("%d refresh(es) without the resource parameter", st.RefreshesWithoutResource)
	}
	// A new connection (the config's timeout changes nothing; a server
	// toggle off and on retires one and makes another) keeps using the
	// same grant without a refresh of its own.
	f.setToggles("alice", `{"o": false}`)
	f.activate("alice")
	f.setToggles("alice", `{"o": true}`)
	f.activate("alice")
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	if got := f.whoami("alice"); got != login {
		t.Errorf("after reconnecting: %q", got)
	}
	if st := as.stats(); st.Refreshes != 1 {
		t.Errorf("a reconnect within the token's life refreshed: %+v", st)
	}
}

// TestOAuthTwoUsers checks that two users get two grants and never each
// other's: every request the provider saw for a user's call carried that
// user's token, and each user's store holds only their own grant.
func TestOAuthTwoUsers(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "grpc", oauthConfig(as, ""), publicURL, nil)
	logins := map[string]string{"alice": canary("alice"), "bob": canary("bob")}
	for u, l := range logins {
		f.activate(u)
		f.signIn(u, "o", l)
	}
	for range 5 {
		for u, l := range logins {
			f.waitTools(u, func(n []string) bool { return hasPrefix(n, "o/whoami") })
			if got := f.whoami(u); got != l {
				t.Fatalf("%s's call carried the token of %q", u, got)
			}
		}
	}
	seen := as.seen()
	for _, l := range seen {
		if l != logins["alice"] && l != logins["bob"] {
			t.Errorf("the provider saw a token of %q", l)
		}
	}
	for u, l := range logins {
		raw, _ := f.h.UserStore(u).Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
		for other, ol := range logins {
			if other != u && (strings.Contains(raw, ol) || strings.Contains(raw, l)) {
				t.Errorf("%s's grant mentions an account name", u)
			}
		}
	}
	var a, b struct{ Access string }
	ra, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	rb, _ := f.h.UserStore("bob").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	_ = json.Unmarshal([]byte(ra), &a)
	_ = json.Unmarshal([]byte(rb), &b)
	if a.Access == "" || a.Access == b.Access {
		t.Error("alice and bob share a token")
	}
	if strings.Contains(f.logs.String(), a.Access) || strings.Contains(f.logs.String(), b.Access) {
		t.Error("a token is in the logs")
	}
}

// TestOAuthBadInput checks that a broken sign-in says why, names the
// culprit, and loses nothing: the user's other servers and the other
// users go on.
func TestOAuthBadInput(t *testing.T) {
	as := startOAuth(t)
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/.well-known/") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"resource": 42, "authorization_servers": "not a list`))
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+"http://"+r.Host+`/.well-known/oauth-protected-resource/mcp"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer garbage.Close()
	cfg := fmt.Sprintf(`{"mcpServers": {"o": {"url": %q}, "g": {"url": %q},
		"notes": %s, "open": {"url": %q, "headers": {"X": "1"}}}}`, as.mcpURL(), garbage.URL+"/mcp", notesServer(""), as.base+"/nowhere")
	f := newFixtureAt(t, "inprocess", cfg, publicURL, nil)
	f.activate("alice")
	a := f.e.(ext.Authorizer)
	begin := func(server string) error {
		_, err := a.BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: server, RedirectURL: redirectURL})
		return err
	}
	for name, c := range map[string]struct {
		server string
		is     error
		says   string
	}{
		"an authorization server that answers garbage": {"g", ext.ErrUnavailable, `MCP server "g"`},
		"a local program":      {"notes", ext.ErrInvalidArgument, "takes a token"},
		"an unknown server":    {"nope", ext.ErrNotFound, `no MCP server "nope"`},
		"a server without one": {"open", ext.ErrUnavailable, "instead of asking for a sign-in"},
	} {
		err := begin(c.server)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v saying %q", name, err, c.is, c.says)
		}
	}
	if _, err := a.BeginAuth(ctx(t), &ext.BeginAuthRequest{Name: "o", RedirectURL: redirectURL}); !errors.Is(err, ext.ErrPermission) {
		t.Errorf("an unidentified sign-in: %v", err)
	}

	// A redirect with a wrong state, one reused, one for another user, and
	// the provider's refusal.
	b, err := a.BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if err != nil {
		t.Fatal(err)
	}
	q := follow(t, b.URL, canary("alice"), true)
	code, _ := url.ParseQuery(q)
	for name, req := range map[string]*ext.CompleteAuthRequest{
		"a wrong state":    {User: "alice", Name: "o", State: "forged", Query: q},
		"another user's":   {User: "bob", Name: "o", State: b.State, Query: q},
		"another server's": {User: "alice", Name: "g", State: b.State, Query: q},
	} {
		_, err := a.CompleteAuth(ctx(t), req)
		if err == nil || strings.Contains(err.Error(), code.Get("code")) {
			t.Errorf("%s: %v; want a refusal without the code", name, err)
		}
		// Words for a person: no identifier of the code in them.
		if err != nil && (!strings.Contains(err.Error(), "redirect") || strings.Contains(err.Error(), "redirectAnswer")) {
			t.Errorf("%s: %q; want it to speak of the redirect in words", name, err)
		}
	}
	if _, err := a.CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "alice", Name: "o", State: b.State, Query: q}); err != nil {
		t.Fatalf("the right answer after refused ones: %v", err)
	}
	if _, err := a.CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "alice", Name: "o", State: b.State, Query: q}); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a reused state: %v; want ErrInvalidArgument", err)
	}
	b2, err := a.BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "bob", Name: "o", RedirectURL: redirectURL})
	if err != nil {
		t.Fatal(err)
	}
	deny := follow(t, b2.URL, "bob", false)
	_, err = a.CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "bob", Name: "o", State: b2.State, Query: deny})
	if err == nil || !strings.Contains(err.Error(), "access_denied") {
		t.Errorf("the provider's refusal: %v; want it named", err)
	}
	// Alice's sign-in went through; her stdio server never noticed.
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") && hasPrefix(n, "notes/") })
	if st := f.statusOf("bob", "o"); st.State == "connected" {
		t.Errorf("bob is connected after denying: %+v", st)
	}
}

// TestOAuthSSRFGuard checks that a user's own server's OAuth requests go
// through the same address guard as its connection: refused on loopback,
// naming why, without reaching the authorization server; once the
// operator opens the prefix (userServerAllowCIDRs), the user signs in to
// their own server like to any other.
func TestOAuthSSRFGuard(t *testing.T) {
	as := startOAuth(t)
	own := fmt.Sprintf(`{"mcpServers": {"o": {"url": %q}}}`, as.mcpURL())
	f := newFixtureAt(t, "inprocess", `{"userServers": "url"}`, publicURL, nil)
	f.setOwn("alice", own)
	f.activate("alice")
	_, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "u_o", RedirectURL: redirectURL})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("BeginAuth to a user's own server on loopback: %v; want refused as loopback", err)
	}
	if st := as.stats(); st.Registrations != 0 {
		t.Errorf("the refused server was reached: %+v", st)
	}
	f2 := newFixtureAt(t, "inprocess", `{"userServers": "url", "userServerAllowCIDRs": ["127.0.0.1/32"]}`, publicURL, nil)
	f2.setOwn("alice", own)
	f2.activate("alice")
	login := canary("alice")
	f2.signIn("alice", "u_o", login)
	f2.waitTools("alice", func(n []string) bool { return hasPrefix(n, "u_o/whoami") })
	res := f2.mustCall("alice", "u_o/whoami", `{}`)
	if !strings.Contains(string(res.StructuredContent), login) {
		t.Errorf("alice on her own server: %s", res.StructuredContent)
	}
}

// TestOAuthSharedServer checks the operator's grant of a shared server:
// only the operator signs in to it, and the users on its allowlist use
// that one grant; the operator's grant never lands in a user's store.
func TestOAuthSharedServer(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"team": {"url": %q,
		"credentials": "shared", "users": ["alice", "bob"]}}}`, as.mcpURL()), publicURL, nil)
	for _, u := range []string{"alice", "bob"} {
		f.setToggles(u, `{"team": true}`) // a shared server is opt-in
	}
	f.activate("alice")
	if st := f.statusOf("alice", "team"); st.State != ext.StateNeedsSignIn || !strings.Contains(st.Reason, "--operator team") {
		t.Errorf("a shared server before the operator signed in: %+v", st)
	}
	if _, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "team", RedirectURL: redirectURL}); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a user signing in to a shared server: %v", err)
	}
	login := canary("operator")
	f.signIn(ext.OperatorUser, "team", login)
	for _, u := range []string{"alice", "bob"} {
		f.activate(u)
		f.waitTools(u, func(n []string) bool { return hasPrefix(n, "team/whoami") })
		res := f.mustCall(u, "team/whoami", `{}`)
		if !strings.Contains(string(res.StructuredContent), login) {
			t.Errorf("%s on the shared server: %s", u, res.StructuredContent)
		}
		if names, _ := f.h.UserStore(u).Secrets().List(ctx(t)); len(names) != 0 {
			t.Errorf("%s's store holds %v", u, names)
		}
	}
}

// TestOAuthTransientRefresh checks that an authorization server in
// trouble (503) is not a dead grant: the refresh is retried with backoff,
// the call fails saying so, the server stays connected with its grant,
// and the next call refreshes once the server is back.
func TestOAuthTransientRefresh(t *testing.T) {
	as := startOAuth(t, "-access-ttl", "2s")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	login := canary("alice")
	f.signIn("alice", "o", login)
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
	time.Sleep(2100 * time.Millisecond)
	resp, err := http.Post(as.base+"/admin/fail-tokens?n=100", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	res, err := f.call("alice", "o/whoami", `{}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text(), "failed for now") {
		t.Errorf("a call while the authorization server fails: %v %q", err, res.Text())
	}
	if st := as.stats(); st.Unavailable != 3 {
		t.Errorf("%d token requests while failing; want 3 (the retries)", st.Unavailable)
	}
	if st := f.statusOf("alice", "o"); st.State != "connected" {
		t.Errorf("status while the authorization server fails: %+v; want still connected", st)
	}
	raw, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	if strings.Contains(raw, `"dead"`) {
		t.Error("a transient failure killed the grant")
	}
	resp, err = http.Post(as.base+"/admin/fail-tokens?n=0", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := f.whoami("alice"); got != login {
		t.Errorf("after the authorization server recovered: %q", got)
	}
	if st := as.stats(); st.Refreshes != 1 {
		t.Errorf("refreshes = %d, want 1", st.Refreshes)
	}
}

// TestOAuthStepUp checks step-up authorization: a tool the grant's scopes
// do not cover answers 403 insufficient_scope; the call fails naming the
// scopes and the link, the server's other tools go on, and the next
// sign-in asks for the union of the scopes granted and challenged.
func TestOAuthStepUp(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	login := canary("alice")
	f.signIn("alice", "o", login)
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/admin_echo") })
	res, err := f.call("alice", "o/admin_echo", `{"text":"hi"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text(), "more permissions (mcp admin)") || !strings.Contains(res.Text(), publicURL+"/settings/connect/mcp/o") {
		t.Fatalf("a call that needs more scope: %v %q", err, res.Text())
	}
	if got := f.whoami("alice"); got != login {
		t.Errorf("the server's other tools after the 403: %q", got)
	}
	begin, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(begin.URL)
	if sc := strings.Fields(u.Query().Get("scope")); !slices.Contains(sc, "admin") || !slices.Contains(sc, "mcp") {
		t.Errorf("the step-up sign-in asks for %q; want mcp and admin", u.Query().Get("scope"))
	}
	q := follow(t, begin.URL, login, true)
	if _, err := f.e.(ext.Authorizer).CompleteAuth(ctx(t), &ext.CompleteAuthRequest{User: "alice", Name: "o", State: begin.State, Query: q}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the wider grant is used", func() bool {
		res, err := f.call("alice", "o/admin_echo", `{"text":"hi"}`)
		return err == nil && !res.IsError && res.Text() == "admin: hi"
	})
}

// TestOAuthIssuerChange checks that a registration is bound to its
// issuer: when the server's authorization server is another than the one
// the stored registration was made with, the sign-in registers anew
// there instead of offering the old client.
func TestOAuthIssuerChange(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	f.signIn("alice", "o", canary("alice"))
	raw, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	var g map[string]any
	_ = json.Unmarshal([]byte(raw), &g)
	oldClient := g["clientId"]
	// The registration as if made with the server's former authorization
	// server.
	g["issuer"] = "https://former-as.example"
	b, _ := json.Marshal(g)
	f.setSecret("alice", extmcp.GrantSecret("o"), string(b))
	login := canary("alice")
	f.signIn("alice", "o", login)
	raw, _ = f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	_ = json.Unmarshal([]byte(raw), &g)
	if st := as.stats(); st.Registrations != 2 || g["clientId"] == oldClient || g["issuer"] != as.base {
		t.Errorf("after the issuer changed: %d registrations, client reused %v, issuer %v; want a new registration at the new issuer",
			st.Registrations, g["clientId"] == oldClient, g["issuer"])
	}
	eventually(t, "the new grant is used", func() bool { return f.whoami("alice") == login })
}

// TestOAuthConfiguredClient checks the operator's pre-registered client
// (oauth.clientId): the sign-in uses it instead of registering one, and a
// clientSecret that names a missing operator secret is refused naming it.
func TestOAuthConfiguredClient(t *testing.T) {
	as := startOAuth(t)
	body := fmt.Sprintf(`{"redirect_uris": [%q], "token_endpoint_auth_method": "none"}`, redirectURL)
	resp, err := http.Post(as.base+"/register", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	f := newFixtureAt(t, "inprocess", oauthConfig(as, fmt.Sprintf(`, "oauth": {"clientId": %q, "scopes": ["mcp"]}`, reg.ClientID)), publicURL, nil)
	f.activate("alice")
	login := canary("alice")
	f.signIn("alice", "o", login)
	raw, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
	var g struct {
		ClientID   string
		Registered bool
	}
	_ = json.Unmarshal([]byte(raw), &g)
	if st := as.stats(); st.Registrations != 1 || g.ClientID != reg.ClientID || g.Registered {
		t.Errorf("with a configured client: %d registrations, grant client %q (registered %v); want the operator's", st.Registrations, g.ClientID, g.Registered)
	}
	eventually(t, "the grant is used", func() bool { return f.whoami("alice") == login })

	f2 := newFixtureAt(t, "inprocess", oauthConfig(as, `, "oauth": {"clientId": "c1", "clientSecret": {"secret": "o-client-secret"}}`), publicURL, nil)
	f2.activate("alice")
	_, err = f2.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
	if !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), `operator secret "o-client-secret"`) {
		t.Errorf("a missing operator secret: %v", err)
	}
}

// TestOAuthSignInRequired checks that a call to a server waiting for the
// user's sign-in fails, for a client that declared URL-mode elicitation,
// with the URL elicitation required error (-32042) carrying the sign-in
// link, without asking the client anything (its session blocks every
// request until the call ends: a call that waited for an answer would
// never return); that within the minute the next call of that user to
// that server, like a client's retry, gets the isError result with the
// link instead; that a client without URL elicitation gets that result;
// that another user gets an elicitation of their own while the first,
// signed in, gets their own data, no one else's; and that a call that
// finds the grant revoked fails with the elicitation too.
func TestOAuthSignInRequired(t *testing.T) {
	as := startOAuth(t)
	f := newFixtureAt(t, "grpc-socket", oauthConfig(as, ""), publicURL, nil)
	f.activate("alice")
	f.activate("bob")
	link := publicURL + "/settings/connect/mcp/o"
	blocking := func() *exttest.Session {
		return &exttest.Session{Caps: json.RawMessage(`{"elicitation":{"url":{}}}`),
			Answer: func(ctx context.Context, _ string, _ json.RawMessage) (json.RawMessage, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}}
	}
	tc := f.e.(ext.ToolCaller)
	call := func(user string, s *exttest.Session) (*ext.CallToolResult, error) {
		return tc.CallTool(ctx(t), &ext.CallToolRequest{User: user, Name: "o/whoami", Arguments: json.RawMessage(`{}`), Session: s})
	}
	elicitation := func(user string, err error) map[string]string {
		t.Helper()
		var re *ext.RPCError
		if !errors.As(err, &re) || re.Code != ext.CodeURLElicitationRequired {
			t.Fatalf("%s's call before signing in: %v; want the URL elicitation required error", user, err)
		}
		var data struct{ Elicitations []map[string]string }
		if err := json.Unmarshal(re.Data, &data); err != nil || len(data.Elicitations) != 1 {
			t.Fatalf("%s's error data %s (%v); want one elicitation", user, re.Data, err)
		}
		el := data.Elicitations[0]
		if el["mode"] != "url" || el["url"] != link || el["elicitationId"] == "" || !strings.Contains(el["message"], `"o"`) {
			t.Errorf("%s's elicitation %v; want mode url, the link %s, an ID and a message naming the server", user, el, link)
		}
		return el
	}
	aliceSess := blocking()
	_, err := call("alice", aliceSess)
	aliceEl := elicitation("alice", err)

	// A retry within the minute, and a client without URL elicitation:
	// the isError result with the link.
	plain := &exttest.Session{}
	for _, s := range []*exttest.Session{aliceSess, plain} {
		res, err := call("alice", s)
		if err != nil || !res.IsError || !strings.Contains(res.Text(), link) {
			t.Errorf("a call within the minute: %v %+v; want the isError result with the link", err, res)
		}
	}
	if asked := append(aliceSess.Asked(), plain.Asked()...); len(asked) != 0 {
		t.Errorf("the clients were asked %q; want nothing", asked)
	}

	// Alice signs in: her clients hear that the elicitation is complete;
	// bob, not signed in, hears nothing and gets an elicitation of his own.
	login := canary("alice")
	f.signIn("alice", "o", login)
	eventually(t, "alice's grant is used", func() bool { return f.whoami("alice") == login })
	var done []string
	for _, n := range f.h.Notifications("") {
		if n.Method == ext.MethodElicitationComplete {
			done = append(done, n.User+" "+string(n.Params))
		}
	}
	if want := `alice {"elicitationId":"` + aliceEl["elicitationId"] + `"}`; len(done) != 1 || done[0] != want {
		t.Errorf("elicitation complete notifications %q; want %q", done, want)
	}
	bobSess := blocking()
	_, err = call("bob", bobSess)
	var re *ext.RPCError
	_ = errors.As(err, &re)
	bobEl := elicitation("bob", err)
	if bobEl["elicitationId"] == aliceEl["elicitationId"] || strings.Contains(re.Message+string(re.Data), "alice") ||
		strings.Contains(re.Message+string(re.Data), login) {
		t.Errorf("bob's error %s %s names alice or her elicitation", re.Message, re.Data)
	}
	res, err := call("alice", blocking())
	if err != nil || res.IsError || !strings.Contains(res.Text(), login) {
		t.Errorf("alice's call after signing in: %v %+v", err, res)
	}

	// Carol's grant is revoked at the provider: the call that finds out
	// (the server still connected) fails with the elicitation at once.
	f.activate("carol")
	carolLogin := canary("carol")
	f.signIn("carol", "o", carolLogin)
	eventually(t, "carol's grant is used", func() bool { return f.whoami("carol") == carolLogin })
	as.revoke(carolLogin)
	carolSess := blocking()
	_, err = call("carol", carolSess)
	elicitation("carol", err)
	if asked := carolSess.Asked(); len(asked) != 0 {
		t.Errorf("carol's client was asked %q; want nothing", asked)
	}
}

// TestOAuthNoPKCE checks that a sign-in goes no further than the
// authorization server's metadata when that server does not say it
// supports PKCE with S256 (MCP authorization: a client MUST refuse to
// proceed): one that publishes no metadata at all (go-sdk falls back to
// guessed endpoints, as 2025-03-26 allowed), and one that offers only
// plain. No authorization URL comes out, and the error names the server
// and PKCE.
func TestOAuthNoPKCE(t *testing.T) {
	for name, methods := range map[string][]string{"no metadata": nil, "plain only": {"plain"}} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var authorizes int
			legacy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				base := "http://" + r.Host
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/mcp":
					w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
					w.WriteHeader(http.StatusUnauthorized)
				case "/.well-known/oauth-protected-resource/mcp":
					_ = json.NewEncoder(w).Encode(map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
				case "/.well-known/oauth-authorization-server":
					if methods == nil {
						http.NotFound(w, r)
						return
					}
					_ = json.NewEncoder(w).Encode(map[string]any{"issuer": base, "authorization_endpoint": base + "/authorize",
						"token_endpoint": base + "/token", "registration_endpoint": base + "/register", "code_challenge_methods_supported": methods})
				case "/register":
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte(`{"client_id":"legacy-client","token_endpoint_auth_method":"none"}`))
				case "/authorize":
					mu.Lock()
					authorizes++
					mu.Unlock()
				default:
					http.NotFound(w, r)
				}
			}))
			defer legacy.Close()
			f := newFixtureAt(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"legacy": {"url": %q}}}`, legacy.URL+"/mcp"), publicURL, nil)
			f.activate("alice")
			begin, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "legacy", RedirectURL: redirectURL})
			if err == nil || !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "PKCE") || !strings.Contains(err.Error(), `"legacy"`) {
				t.Errorf("BeginAuth to a server whose authorization server does not offer PKCE S256: %+v %v; want refused naming the server and PKCE", begin, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if authorizes != 0 {
				t.Errorf("the authorization endpoint was reached %d time(s)", authorizes)
			}
		})
	}
}

// TestOAuthSupersededGrant checks that a token source never writes over
// a sign-in that is no longer its own: when the stored grant was replaced
// (a newer sign-in) or deleted (the user signed out), a connection still
// holding the old one does not refresh it, does not store it back, and
// the server moves to what is stored: the newer grant, or "needs
// sign-in".
func TestOAuthSupersededGrant(t *testing.T) {
	t.Run("replaced", func(t *testing.T) {
		as := startOAuth(t, "-access-ttl", "2s")
		f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
		f.activate("alice")
		login := canary("alice")
		f.signIn("alice", "o", login)
		f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
		// A newer sign-in is stored (here: the same tokens under another
		// sign-in ID) while the connection holds the old one.
		raw, _ := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
		var g map[string]any
		_ = json.Unmarshal([]byte(raw), &g)
		g["id"] = "newer-sign-in"
		b, _ := json.Marshal(g)
		f.setSecret("alice", extmcp.GrantSecret("o"), string(b))
		time.Sleep(2100 * time.Millisecond) // the access token expires
		_, _ = f.call("alice", "o/whoami", `{}`)
		eventually(t, "the newer grant is used", func() bool {
			res, err := f.call("alice", "o/whoami", `{}`)
			return err == nil && !res.IsError && strings.Contains(string(res.StructuredContent), login)
		})
		raw, _ = f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o"))
		_ = json.Unmarshal([]byte(raw), &g)
		if g["id"] != "newer-sign-in" {
			t.Errorf("the stored grant is %v, want the newer sign-in kept", g["id"])
		}
		if st := as.stats(); st.Refreshes != 1 || st.RefreshReuses != 0 {
			t.Errorf("%+v; want one refresh (the newer grant's) and no reuse", st)
		}
	})
	t.Run("signed out", func(t *testing.T) {
		as := startOAuth(t, "-access-ttl", "2s")
		f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil)
		f.activate("alice")
		f.signIn("alice", "o", canary("alice"))
		f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "o/whoami") })
		if err := f.h.UserStore("alice").Secrets().Delete(ctx(t), extmcp.GrantSecret("o")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2100 * time.Millisecond)
		res, err := f.call("alice", "o/whoami", `{}`)
		if err != nil || !res.IsError || !strings.Contains(res.Text(), "signed out") {
			t.Errorf("a call after signing out: %v %q; want an error result saying so", err, res.Text())
		}
		eventually(t, "the server needs sign-in", func() bool { return f.statusOf("alice", "o").State == ext.StateNeedsSignIn })
		if _, err := f.h.UserStore("alice").Secrets().Get(ctx(t), extmcp.GrantSecret("o")); !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("the grant is stored again after the user deleted it: %v", err)
		}
		if st := as.stats(); st.Refreshes != 0 {
			t.Errorf("the deleted grant was refreshed: %+v", st)
		}
	})
}

// gatingHost holds every read of one secret while its gate is closed,
// counting the readers that wait.
type gatingHost struct {
	*exttest.FakeHost
	name string

	mu      sync.Mutex
	gate    chan struct{} // nil: open
	waiting int
}

func (h *gatingHost) UserStore(u string) ext.UserStore {
	return gatingStore{h.FakeHost.UserStore(u), h}
}

func (h *gatingHost) arrivals() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

type gatingStore struct {
	ext.UserStore
	h *gatingHost
}

func (s gatingStore) Secrets() ext.Secrets { return gatingSecrets{s.UserStore.Secrets(), s.h} }

type gatingSecrets struct {
	ext.Secrets
	h *gatingHost
}

func (s gatingSecrets) Get(ctx context.Context, name string) (string, error) {
	s.h.mu.Lock()
	gate := s.h.gate
	if gate != nil && name == s.h.name {
		s.h.waiting++
	}
	s.h.mu.Unlock()
	if gate != nil && name == s.h.name {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return s.Secrets.Get(ctx, name)
}

// TestOAuthSignInsBounded checks that one user's sign-ins under way are
// bounded even when they all start at once: eight get an authorization
// URL, the others are refused at once saying why.
func TestOAuthSignInsBounded(t *testing.T) {
	as := startOAuth(t)
	var gh *gatingHost
	f := newFixtureAt(t, "inprocess", oauthConfig(as, ""), publicURL, nil, func(h *exttest.FakeHost) ext.Host {
		gh = &gatingHost{FakeHost: h, name: extmcp.TokenSecret("o")}
		return gh
	})
	f.activate("alice")
	gate := make(chan struct{})
	gh.mu.Lock()
	gh.gate = gate // every sign-in start now waits while it reads alice's token
	gh.mu.Unlock()
	const n = 20
	var mu sync.Mutex
	ok, refused := 0, 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.e.(ext.Authorizer).BeginAuth(ctx(t), &ext.BeginAuthRequest{User: "alice", Name: "o", RedirectURL: redirectURL})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ext.ErrUnavailable) && strings.Contains(err.Error(), "already"):
				refused++
			default:
				t.Errorf("a sign-in start: %v", err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		settled := refused + gh.arrivals()
		mu.Unlock()
		if settled >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	gh.mu.Lock()
	gh.gate = nil
	gh.mu.Unlock()
	close(gate)
	wg.Wait()
	if ok != 8 || refused != n-8 {
		t.Errorf("%d sign-ins of one user started at once: %d started, %d refused; want 8 and %d", n, ok, refused, n-8)
	}
}

// TestOAuthForgedGrant checks that a grant a user wrote themselves (a
// user may store any secret of their own, oauth:<server> included) is
// not trusted: one that names an operator secret as its client secret
// and a token endpoint of the user's choosing makes the extension send
// nothing there (neither that secret nor any request through the
// operator's address policy); the server waits for a sign-in instead.
func TestOAuthForgedGrant(t *testing.T) {
	as := startOAuth(t)
	var mu sync.Mutex
	var seen []string
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"trap","token_type":"Bearer","expires_in":3600}`))
	}))
	defer trap.Close()
	operatorSecret := canary("OPERATOR")
	f := newFixtureAt(t, "inprocess", oauthConfig(as, `, "oauth": {"clientId": "c1", "clientSecret": {"secret": "o-client-secret"}}`), publicURL, nil)
	f.setSecret(extmcp.OperatorUser, "o-client-secret", operatorSecret)
	forged, _ := json.Marshal(map[string]any{"v": 1, "id": "forged", "issuer": as.base, "clientId": "c1", "resource": as.mcpURL(),
		"secretRef": "o-client-secret", "tokenUrl": trap.URL + "/token", "authStyle": 1,
		"access": "stale", "refresh": "r", "expiry": time.Now().Add(-time.Hour)})
	f.setSecret("alice", extmcp.GrantSecret("o"), string(forged))
	f.activate("alice")
	res, err := f.call("alice", "o/whoami", `{}`)
	if err != nil || !res.IsError {
		t.Errorf("a call with a forged grant: %v %q; want an error result", err, res.Text())
	}
	if st := f.statusOf("alice", "o"); st.State != ext.StateNeedsSignIn {
		t.Errorf("status with a forged grant: %+v; want needs sign-in", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 0 {
		t.Errorf("%d request(s) reached the token endpoint a user wrote into their grant (the operator secret in them: %v)",
			len(seen), strings.Contains(strings.Join(seen, "\n"), operatorSecret))
	}
}
