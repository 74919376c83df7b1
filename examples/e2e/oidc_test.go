package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// oidcProvider is examples/oidcprovider (zitadel/oidc's OpenID Provider)
// started by a test.
type oidcProvider struct {
	t      *testing.T
	issuer string
}

const oidcClientSecret = "e2e-oidc-client-secret-0123456789"

// startOIDCProvider starts the provider with these users, its one client
// redirecting to redirect.
func startOIDCProvider(t *testing.T, redirect string, users []map[string]any, flags ...string) *oidcProvider {
	t.Helper()
	bin := testbin.Build(t, pkg+"examples/oidcprovider")
	f := filepath.Join(t.TempDir(), "users.json")
	raw, _ := json.Marshal(users)
	if err := os.WriteFile(f, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-users", f, "-redirect", redirect, "-admin"}, flags...)...)
	cmd.Env = append(os.Environ(), "OIDCPROVIDER_CLIENT_SECRET="+oidcClientSecret)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("oidcprovider log:\n%s", logs.String())
		}
	})
	p := &oidcProvider{t: t}
	eventually(t, "the OpenID provider serves", func() bool {
		line, _, _ := strings.Cut(logs.String(), "\n")
		if i := strings.Index(line, "serving "); i >= 0 {
			p.issuer = strings.TrimSpace(line[i+len("serving "):])
		}
		return p.issuer != ""
	})
	return p
}

func (p *oidcProvider) admin(path string, form url.Values) {
	p.t.Helper()
	resp, err := http.PostForm(p.issuer+path, form)
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		p.t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

// TestOIDCSignInInABrowser runs the real agenthost with a real OpenID
// provider (examples/oidcprovider: zitadel/oidc's OP) and drives headless
// Chromium through its login form: alice (in the allowed domain) and bob
// (in the allowed group, outside the domain) become users at their first
// sign-in and each lands on their own settings page with their own
// servers; bob first arrives as an app connecting through the OAuth
// consent page, signs in through the provider from there, comes back to
// the consent page, allows, and the app's token works on /mcp; carol
// (neither) gets a page naming why and no session; after the provider
// rotates its signing key a new sign-in still verifies; a shared server
// lent to group:staff reaches bob (staff at the provider), not alice; bob, removed from the group at the provider, is refused at his next
// sign-in and disabled: his web session ends and his app stops working.
func TestOIDCSignInInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	port := freePort(t)
	host := fmt.Sprintf("http://127.0.0.1:%d", port)
	idp := startOIDCProvider(t, host+"/settings/oidc/callback", []map[string]any{
		{"id": "u-alice", "username": "alice", "password": "alice-pw", "email": "Alice@Example.com", "emailVerified": true},
		{"id": "u-bob", "username": "bob", "password": "bob-pw", "email": "bob@partner.org", "emailVerified": true, "groups": []string{"staff", "partners"}},
		{"id": "u-carol", "username": "carol", "password": "carol-pw", "email": "carol@other.org", "emailVerified": true, "groups": []string{"guests"}},
	})
	e := newEnv(t, b, map[string]any{
		"userServers": "url",
		"mcpServers":  map[string]any{"team": map[string]any{"command": b.notes, "credentials": "shared", "users": []string{"group:staff"}}},
	}, map[string]any{
		"listen": fmt.Sprintf("127.0.0.1:%d", port),
		"oidc": map[string]any{
			"name": "Example IdP", "issuer": idp.issuer, "clientID": "agenthost", "clientSecret": "oidc-client",
			"allowedDomains": []string{"example.com"}, "allowedGroups": []string{"staff"},
		},
	})
	e.startServe()
	e.must(oidcClientSecret+"\n", "secret", "set", "--operator", "oidc-client")
	const alice, bob = "alice@example.com", "bob@partner.org"
	for u, srv := range map[string]string{alice: "alice-own", bob: "bob-own"} {
		e.must("", "settings", "set", "--user", u, "--ext", "mcp", "user-servers",
			`{"servers":"{\"mcpServers\":{\"`+srv+`\":{\"url\":\"https://`+srv+`.example/mcp\"}}}"}`)
	}

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	type browser struct {
		ctx context.Context
		do  func(step string, actions ...chromedp.Action[chromedp.Void])
	}
	open := func() browser {
		ctx := newBrowser(t)
		return browser{ctx, func(step string, actions ...chromedp.Action[chromedp.Void]) {
			t.Helper()
			if err := chromedp.Do(ctx, actions...); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
		}}
	}
	page := func(br browser) string {
		t.Helper()
		s, err := chromedp.Run(br.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	location := func(br browser) string {
		t.Helper()
		u, err := chromedp.Run(br.ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// atProvider plays a person at the provider's login form.
	atProvider := func(br browser, who, password string) {
		t.Helper()
		br.do(who+" at the provider's login form", chromedp.WaitVisible(css(`#username`)))
		if u := location(br); !strings.HasPrefix(u, idp.issuer+"/login/") {
			t.Fatalf("%s is at %q, want the provider's login form", who, u)
		}
		br.do(who+" signs in at the provider",
			chromedp.SendKeys(css(`#username`), who),
			chromedp.SendKeys(css(`#password`), password),
			chromedp.Click(css(`button[type="submit"]`)),
		)
	}
	// signIn signs a person in from the settings page; it returns their
	// settings page's text.
	signIn := func(br browser, who, password string) string {
		t.Helper()
		br.do(who+" opens the settings page",
			chromedp.Navigate(host+"/settings"),
			chromedp.WaitVisible(css(`#oidc-signin`)),
		)
		if got := page(br); !strings.Contains(got, "Sign in with Example IdP") {
			t.Errorf("the sign-in page: %q; want the provider's button", got)
		}
		br.do(who+" chooses the provider", chromedp.Click(css(`#oidc-signin`)))
		atProvider(br, who, password)
		br.do(who+" lands on the settings page", chromedp.WaitVisible(css(`.who`)))
		return page(br)
	}

	// Alice: her own page, her own server, nothing of bob's.
	ab := open()
	if got := signIn(ab, "alice", "alice-pw"); !strings.Contains(got, "Signed in as "+alice) || !strings.Contains(got, "alice-own") || strings.Contains(got, "bob-own") {
		t.Errorf("alice's page after signing in:\n%s", got)
	}
	if u := location(ab); u != host+"/settings" {
		t.Errorf("alice landed on %q, want %s/settings", u, host)
	}

	// Bob arrives as an app connecting through OAuth: the consent page
	// sends him to the provider's form, and back to consent.
	codes := make(chan url.Values, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case codes <- r.URL.Query():
		default:
		}
		_, _ = w.Write([]byte("app callback"))
	}))
	t.Cleanup(app.Close)
	redirect := app.URL + "/callback"
	client := e.register(redirect)
	bb := open()
	bb.do("bob's app opens the consent page",
		chromedp.Navigate(e.authorizeURL(client, redirect, nil)),
		chromedp.WaitVisible(css(`#provider-sign-in`)),
	)
	if got := page(bb); !strings.Contains(got, "Sign in with Example IdP") || !strings.Contains(got, "with a token or a link") {
		t.Errorf("the consent page before sign-in:\n%s", got)
	}
	bb.do("bob chooses the provider on the consent page", chromedp.Click(css(`#provider-sign-in`)))
	atProvider(bb, "bob", "bob-pw")
	bb.do("bob is back on the consent page", chromedp.WaitVisible(css(`#allow`)))
	if got := page(bb); !strings.Contains(got, bob) {
		t.Errorf("the consent page after bob's sign-in does not name him:\n%s", got)
	}
	bb.do("bob allows", chromedp.Click(css(`#allow`)))
	var q url.Values
	select {
	case q = <-codes:
	case <-time.After(30 * time.Second):
		t.Fatal("the app's callback never got the code")
	}
	code, _, body := fetch(t, http.DefaultClient, "POST", host+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
		"code": {q.Get("code")}, "redirect_uri": {redirect}, "client_id": {client}, "code_verifier": {pkceVerifier}})
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &tok) != nil || tok.AccessToken == "" {
		t.Fatalf("the app's token exchange: %d %s", code, body)
	}
	if _, err := connect(t, host, tok.AccessToken); err != nil {
		t.Fatalf("the app's token on /mcp: %v", err)
	}
	bb.do("bob opens his settings page", chromedp.Navigate(host+"/settings"), chromedp.WaitVisible(css(`.who`)))
	if got := page(bb); !strings.Contains(got, "Signed in as "+bob) || !strings.Contains(got, "bob-own") || strings.Contains(got, "alice-own") {
		t.Errorf("bob's page:\n%s", got)
	}

	// The shared server lent to group:staff: bob (staff at the provider)
	// switches it on and has its tools; alice (not in staff) cannot.
	e.must("", "settings", "set", "--user", bob, "--ext", "mcp", "servers", `{"team":true}`)
	eventually(t, "team reaches bob", func() bool { return hasPrefix(e.toolNames(bob), "team/") })
	if _, errOut, code := e.run("", "settings", "set", "--user", alice, "--ext", "mcp", "servers", `{"team":true}`); code == 0 || !strings.Contains(errOut, "not to you") {
		t.Errorf("alice switching on team (lent to group:staff): exit %d %s", code, errOut)
	}
	if hasPrefix(e.toolNames(alice), "team/") {
		t.Error("alice has the tools of team")
	}

	// Carol: refused, with the reason; no session, no user.
	cb := open()
	cb.do("carol opens the sign-in page", chromedp.Navigate(host+"/settings/login"), chromedp.WaitVisible(css(`#oidc-signin`)), chromedp.Click(css(`#oidc-signin`)))
	atProvider(cb, "carol", "carol-pw")
	cb.do("carol's refusal", chromedp.WaitVisible(css(`.error-box`)))
	if got := page(cb); !strings.Contains(got, "Not allowed in") || !strings.Contains(got, "carol@other.org is not in an allowed domain") ||
		!strings.Contains(got, "you are not in an allowed group") {
		t.Errorf("carol's refusal page:\n%s", got)
	}
	cb.do("carol has no session", chromedp.Navigate(host+"/settings"), chromedp.WaitVisible(css(`#oidc-signin`)))
	users := func() map[string]struct{ Source, DisabledBy string } {
		t.Helper()
		var list []struct{ Name, Source, DisabledBy string }
		if err := json.Unmarshal([]byte(e.must("", "user", "list", "--json")), &list); err != nil {
			t.Fatal(err)
		}
		m := map[string]struct{ Source, DisabledBy string }{}
		for _, u := range list {
			m[u.Name] = struct{ Source, DisabledBy string }{u.Source, u.DisabledBy}
		}
		return m
	}
	if us := users(); us[alice].Source != "oidc" || us[bob].Source != "oidc" || len(us) != 2 {
		t.Errorf("the users after carol's refusal: %+v; want alice and bob from oidc, no carol", us)
	}

	// The provider rotates its signing key; alice signs in again in
	// carol's browser: the new key is fetched and the token verifies.
	idp.admin("/admin/rotate-keys", nil)
	if got := signIn(cb, "alice", "alice-pw"); !strings.Contains(got, "Signed in as "+alice) {
		t.Errorf("alice's sign-in after the key rotation:\n%s", got)
	}

	// Bob leaves the group at the provider: his next sign-in is refused
	// and disables him; his app's token stops working.
	idp.admin("/admin/groups", url.Values{"username": {"bob"}, "group": {"partners"}})
	db := open()
	db.do("bob signs in again", chromedp.Navigate(host+"/settings/login"), chromedp.WaitVisible(css(`#oidc-signin`)), chromedp.Click(css(`#oidc-signin`)))
	atProvider(db, "bob", "bob-pw")
	db.do("bob's refusal", chromedp.WaitVisible(css(`.error-box`)))
	if got := page(db); !strings.Contains(got, "you are not in an allowed group") {
		t.Errorf("bob's refusal after leaving the group:\n%s", got)
	}
	bb.do("bob's old session is gone", chromedp.Navigate(host+"/settings"), chromedp.WaitVisible(css(`#oidc-signin`)))
	if _, err := connect(t, host, tok.AccessToken); err == nil {
		t.Error("bob's app still connects to /mcp after he was disabled")
	}
	if us := users(); us[bob].DisabledBy != "oidc" || us[alice].DisabledBy != "" {
		t.Errorf("the users after bob left the group: %+v; want bob disabled by oidc", us)
	}
}

// toCallback plays a person without a browser: from the host's start URL
// through the provider's login form, up to (not into) the host's callback,
// whose URL it returns.
func (p *oidcProvider) toCallback(hc *http.Client, start, who, password string) string {
	p.t.Helper()
	u := start
	for range 10 {
		code, hdr, body := fetch(p.t, hc, "GET", u, nil)
		switch {
		case code == http.StatusSeeOther || code == http.StatusFound:
			u = resolve(p.t, u, hdr.Get("Location"))
			continue
		case code != http.StatusOK || !strings.Contains(body, `name="password"`):
			p.t.Fatalf("the provider's login form at %s: %d\n%s", u, code, body)
		}
		lu, _ := url.Parse(u)
		code, hdr, body = fetch(p.t, hc, "POST", p.issuer+"/login/username", url.Values{
			"id": {lu.Query().Get("authRequestID")}, "username": {who}, "password": {password}})
		for code == http.StatusFound && strings.HasPrefix(resolve(p.t, p.issuer, hdr.Get("Location")), p.issuer+"/") {
			code, hdr, body = fetch(p.t, hc, "GET", resolve(p.t, p.issuer, hdr.Get("Location")), nil)
		}
		if code != http.StatusFound {
			p.t.Fatalf("%s's login at the provider: %d\n%s", who, code, body)
		}
		return hdr.Get("Location")
	}
	p.t.Fatalf("too many redirects from %s", start)
	return ""
}

func resolve(t *testing.T, base, ref string) string {
	t.Helper()
	b, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r.String()
}

// TestOIDCSignInGuards, over plain HTTP against the real provider: the
// provider is asked for the code with PKCE S256 and a nonce; the pending
// sign-in's cookie is HttpOnly, SameSite=Lax and short-lived; a callback
// in a browser that did not start the sign-in (login CSRF), one with
// another state, and a replay are refused and sign nobody in; a next
// that leaves this host (an open redirect) is dropped for /settings, and
// one of this host is kept.
func TestOIDCSignInGuards(t *testing.T) {
	b := build(t)
	port := freePort(t)
	host := fmt.Sprintf("http://127.0.0.1:%d", port)
	idp := startOIDCProvider(t, host+"/settings/oidc/callback", []map[string]any{
		{"id": "u-alice", "username": "alice", "password": "alice-pw", "email": "alice@example.com", "emailVerified": true},
	})
	e := newEnv(t, b, nil, map[string]any{
		"listen": fmt.Sprintf("127.0.0.1:%d", port),
		"oidc":   map[string]any{"issuer": idp.issuer, "clientID": "agenthost", "clientSecret": "oidc-client", "allowedUsers": []string{"alice@example.com"}},
	})
	e.startServe()
	e.must(oidcClientSecret+"\n", "secret", "set", "--operator", "oidc-client")
	signedIn := func(hc *http.Client) bool {
		code, _, _ := fetch(t, hc, "GET", host+"/settings", nil)
		return code == http.StatusOK
	}

	hc := browse()
	code, hdr, _ := fetch(t, hc, "GET", host+"/settings/oidc/start", nil)
	auth, _ := url.Parse(hdr.Get("Location"))
	if q := auth.Query(); code != http.StatusSeeOther || !strings.HasPrefix(auth.String(), idp.issuer) || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == "" || len(q.Get("nonce")) < 40 || len(q.Get("state")) < 40 || q.Get("redirect_uri") != host+"/settings/oidc/callback" {
		t.Fatalf("the start: %d %s", code, auth)
	}
	sc := hdr.Get("Set-Cookie")
	for _, want := range []string{"agenthost_oidc=", "HttpOnly", "SameSite=Lax", "Max-Age=600", "Path=/"} {
		if !strings.Contains(sc, want) {
			t.Errorf("the pending sign-in's cookie %q lacks %q", sc, want)
		}
	}
	cb := idp.toCallback(hc, auth.String(), "alice", "alice-pw")
	if !strings.HasPrefix(cb, host+"/settings/oidc/callback?") {
		t.Fatalf("the provider sent alice to %q", cb)
	}

	// Another browser (an attacker's page making the victim's browser
	// open the attacker's callback): refused, nobody signed in.
	other := browse()
	if code, _, body := fetch(t, other, "GET", cb, nil); code != http.StatusBadRequest || !strings.Contains(body, "did not start in this browser") {
		t.Errorf("the callback in another browser: %d\n%s", code, body)
	}
	if signedIn(other) {
		t.Error("the other browser is signed in")
	}
	// Another state, in the browser that started: refused.
	cu, _ := url.Parse(cb)
	q := cu.Query()
	q.Set("state", "forged-"+q.Get("state"))
	cu.RawQuery = q.Encode()
	if code, _, body := fetch(t, hc, "GET", cu.String(), nil); code != http.StatusBadRequest || !strings.Contains(body, "did not start in this browser") {
		t.Errorf("the callback with another state: %d\n%s", code, body)
	}
	// The failed callback used up the pending sign-in: the real one too
	// is refused now, and a new start works.
	if code, _, _ := fetch(t, hc, "GET", cb, nil); code != http.StatusBadRequest || signedIn(hc) {
		t.Errorf("the real callback after the pending sign-in was used: %d", code)
	}

	// next: only a path of this host survives the round trip.
	for next, want := range map[string]string{
		"https://evil.example/x":           "/settings",
		"//evil.example/x":                 "/settings",
		"/oauth/authorize?client_id=c&x=1": "/oauth/authorize?client_id=c&amp;x=1",
	} {
		hc := browse()
		_, hdr, _ := fetch(t, hc, "GET", host+"/settings/oidc/start?next="+url.QueryEscape(next), nil)
		cb := idp.toCallback(hc, hdr.Get("Location"), "alice", "alice-pw")
		code, _, body := fetch(t, hc, "GET", cb, nil)
		if code != http.StatusOK || !strings.Contains(body, `data-follow href="`+want+`"`) || !strings.Contains(body, "alice@example.com") {
			t.Errorf("next %q: %d, want a link to %q\n%s", next, code, want, body)
		}
		if !signedIn(hc) {
			t.Errorf("next %q: not signed in", next)
		}
		// The code is used: a replay in the same browser is refused.
		if code, _, _ := fetch(t, hc, "GET", cb, nil); code != http.StatusBadRequest {
			t.Errorf("a replayed callback: %d", code)
		}
	}
}

// TestOIDCRecheck: with offline_access the host keeps the provider's
// refresh token and, every recheckMinutes of a web session's use, asks the
// provider again: rotated refresh tokens keep working across re-checks;
// a person who leaves the allowed group at the provider, or whose sign-in
// the provider ends (removed there), is disabled at the next re-check:
// the web session ends and their own token stops working on /mcp.
func TestOIDCRecheck(t *testing.T) {
	b := build(t)
	port := freePort(t)
	host := fmt.Sprintf("http://127.0.0.1:%d", port)
	idp := startOIDCProvider(t, host+"/settings/oidc/callback", []map[string]any{
		{"id": "u-alice", "username": "alice", "password": "alice-pw", "email": "alice@example.com", "emailVerified": true, "groups": []string{"staff"}},
		{"id": "u-bob", "username": "bob", "password": "bob-pw", "email": "bob@example.com", "emailVerified": true, "groups": []string{"staff"}},
	})
	e := newEnv(t, b, nil, map[string]any{
		"listen": fmt.Sprintf("127.0.0.1:%d", port),
		"oidc": map[string]any{"issuer": idp.issuer, "clientID": "agenthost", "clientSecret": "oidc-client",
			"scopes": []string{"email", "profile", "offline_access"}, "recheckMinutes": 0.001, "allowedGroups": []string{"staff"}},
	})
	e.startServe()
	e.must(oidcClientSecret+"\n", "secret", "set", "--operator", "oidc-client")
	signIn := func(who, password string) *http.Client {
		t.Helper()
		hc := browse()
		_, hdr, _ := fetch(t, hc, "GET", host+"/settings/oidc/start", nil)
		if code, _, body := fetch(t, hc, "GET", idp.toCallback(hc, hdr.Get("Location"), who, password), nil); code != http.StatusOK {
			t.Fatalf("%s's sign-in: %d\n%s", who, code, body)
		}
		return hc
	}
	settings := func(hc *http.Client) int {
		code, _, _ := fetch(t, hc, "GET", host+"/settings", nil)
		return code
	}
	ah, bh := signIn("alice", "alice-pw"), signIn("bob", "bob-pw")
	aliceTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice@example.com", "--name", "e2e"))
	bobTok := strings.TrimSpace(e.must("", "token", "create", "--user", "bob@example.com", "--name", "e2e"))
	// Each page load past the interval refreshes (the provider rotates the
	// refresh token each time); a spent one would refuse and disable.
	for i := range 5 {
		time.Sleep(100 * time.Millisecond) // past recheckMinutes (60 ms), so that each load re-checks
		if c := settings(ah); c != http.StatusOK {
			t.Fatalf("alice's settings page at re-check %d: %d\n%s", i, c, e.serveOut.String())
		}
	}

	// Alice leaves the group: her next re-check disables her.
	idp.admin("/admin/groups", url.Values{"username": {"alice"}})
	eventually(t, "alice's session ends", func() bool { return settings(ah) != http.StatusOK })
	if c, _ := e.mcpPing(aliceTok); c != http.StatusUnauthorized {
		t.Errorf("alice's token after she was disabled: %d, want 401", c)
	}
	// Bob is removed at the provider (his tokens there end).
	if c := settings(bh); c != http.StatusOK {
		t.Fatalf("bob's page before: %d", c)
	}
	idp.admin("/admin/terminate", url.Values{"username": {"bob"}})
	eventually(t, "bob's session ends", func() bool { return settings(bh) != http.StatusOK })
	if c, _ := e.mcpPing(bobTok); c != http.StatusUnauthorized {
		t.Errorf("bob's token after he was disabled: %d, want 401", c)
	}
	for _, want := range []string{`user=alice@example.com reason="you are not in an allowed group"`, `user=bob@example.com reason="the identity provider no longer vouches for you`} {
		if !strings.Contains(e.serveOut.String(), want) {
			t.Errorf("the host's log lacks %q", want)
		}
	}
}

// TestOIDCUserinfoClaims: a provider that keeps the email out of the ID
// token (OIDC Core 5.4: at the userinfo endpoint only, when an access
// token is issued) still signs people in: the claims the ID token lacks
// come from the userinfo endpoint, for the same subject.
func TestOIDCUserinfoClaims(t *testing.T) {
	b := build(t)
	port := freePort(t)
	host := fmt.Sprintf("http://127.0.0.1:%d", port)
	idp := startOIDCProvider(t, host+"/settings/oidc/callback", []map[string]any{
		{"id": "u-alice", "username": "alice", "password": "alice-pw", "email": "alice@example.com", "emailVerified": true},
	}, "-strict-claims")
	e := newEnv(t, b, nil, map[string]any{
		"listen": fmt.Sprintf("127.0.0.1:%d", port),
		"oidc":   map[string]any{"issuer": idp.issuer, "clientID": "agenthost", "clientSecret": "oidc-client", "allowedDomains": []string{"example.com"}},
	})
	e.startServe()
	e.must(oidcClientSecret+"\n", "secret", "set", "--operator", "oidc-client")
	hc := browse()
	_, hdr, _ := fetch(t, hc, "GET", host+"/settings/oidc/start", nil)
	if code, _, body := fetch(t, hc, "GET", idp.toCallback(hc, hdr.Get("Location"), "alice", "alice-pw"), nil); code != http.StatusOK || !strings.Contains(body, "alice@example.com") {
		t.Fatalf("alice's sign-in with the email at the userinfo endpoint only: %d\n%s", code, body)
	}
}
