package e2e_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The host's own OAuth authorization server (/oauth/*), attacked from
// outside: the real `agenthost serve` over HTTP.

const gatePassphrase = "correct horse battery staple"

// gateHost is a host whose OAuth server has the passphrase gate (for
// bob), its config merged with more; it is not started.
func gateHost(t *testing.T, b bins, more ...map[string]any) *env {
	t.Helper()
	hash := strings.TrimSpace(newEnv(t, b, nil).must(gatePassphrase+"\n", "oauth", "hash-passphrase"))
	cfg := map[string]any{"oauth": map[string]any{"passphraseHash": hash, "passphraseUser": "bob"}}
	return newEnv(t, b, nil, append([]map[string]any{cfg}, more...)...)
}

// register registers a client (RFC 7591) with these redirect URIs and
// returns its client_id.
func (e *env) register(redirects ...string) string {
	e.t.Helper()
	code, body := e.registerFrom(nil, redirects...)
	if code != http.StatusCreated {
		e.t.Fatalf("registering %v: %d %s", redirects, code, body)
	}
	var r struct {
		ClientID string `json:"client_id"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.ClientID == "" {
		e.t.Fatalf("registration answer %q: %v", body, err)
	}
	return r.ClientID
}

// registerFrom posts a registration with extra headers.
func (e *env) registerFrom(hdr http.Header, redirects ...string) (int, string) {
	e.t.Helper()
	meta, _ := json.Marshal(map[string]any{"client_name": "Test app", "redirect_uris": redirects,
		"grant_types": []string{"authorization_code", "refresh_token"}})
	req, _ := http.NewRequest("POST", e.url+"/oauth/register", strings.NewReader(string(meta)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pkceVerifier is the test's PKCE verifier; authorizeURL sends its S256
// challenge.
const pkceVerifier = "e2e-verifier-0123456789-0123456789-0123456789-abcdef"

// authorizeURL is an authorization request of client to redirect,
// with PKCE S256; extra parameters replace the defaults.
func (e *env) authorizeURL(client, redirect string, extra url.Values) string {
	sum := sha256.Sum256([]byte(pkceVerifier))
	q := url.Values{"client_id": {client}, "redirect_uri": {redirect}, "response_type": {"code"},
		"state": {"state-0123456789"}, "scope": {"mcp offline_access"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	for k, v := range extra {
		q[k] = v
	}
	return e.url + "/oauth/authorize?" + q.Encode()
}

var hiddenInput = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// passphraseForm opens an authorization request in browser hc and
// returns the passphrase form's fields.
func passphraseForm(t *testing.T, hc *http.Client, authURL string) url.Values {
	t.Helper()
	code, _, page := fetch(t, hc, "GET", authURL, nil)
	i := strings.Index(page, `id="passphrase-form"`)
	if code != http.StatusOK || i < 0 {
		t.Fatalf("no passphrase form at %s: %d\n%s", authURL, code, page)
	}
	page = page[i:]
	page = page[:strings.Index(page, "</form>")]
	f := url.Values{}
	for _, m := range hiddenInput.FindAllStringSubmatch(page, -1) {
		f.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return f
}

// TestOAuthLocalhostAnyPort: a native app registered with
// http://localhost:PORT/callback whose port is busy moves to another and
// still completes its sign-in (RFC 8252 §7.3), as with 127.0.0.1; the path
// and scheme must still match, and https or another host must match
// exactly.
func TestOAuthLocalhostAnyPort(t *testing.T) {
	e := gateHost(t, build(t))
	e.startServe()
	client := e.register("http://localhost:33418/callback", "http://127.0.0.1:33418/callback", "https://app.example/cb")
	hc := browse()
	for _, redirect := range []string{"http://localhost:33419/callback", "http://127.0.0.1:40000/callback"} {
		authURL := e.authorizeURL(client, redirect, nil)
		f := passphraseForm(t, hc, authURL)
		f.Set("passphrase", gatePassphrase)
		code, hdr, body := fetch(t, hc, "POST", e.url+"/oauth/authorize", f)
		loc, _ := url.Parse(hdr.Get("Location"))
		if code != http.StatusSeeOther || loc == nil || loc.Query().Get("code") == "" ||
			!strings.HasPrefix(loc.String(), redirect+"?") {
			t.Fatalf("%s: %d %q\n%s", redirect, code, hdr.Get("Location"), body)
		}
		// The code is redeemed at that redirect URI.
		code, _, body = fetch(t, hc, "POST", e.url+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
			"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "client_id": {client}, "code_verifier": {pkceVerifier}})
		if code != http.StatusOK || !strings.Contains(body, "access_token") {
			t.Errorf("%s: the code's exchange: %d %s", redirect, code, body)
		}
	}
	for _, redirect := range []string{
		"http://localhost:33419/other",     // another path
		"https://localhost:33418/callback", // https: exact only
		"https://app.example:8443/cb",      // not loopback: exact only
		"http://localhost.evil.example:80/callback",
	} {
		code, hdr, body := fetch(t, hc, "GET", e.authorizeURL(client, redirect, nil), nil)
		if code == http.StatusSeeOther || hdr.Get("Location") != "" || !strings.Contains(body, "redirect_uri") {
			t.Errorf("%s: %d %q, want the error page naming redirect_uri\n%s", redirect, code, hdr.Get("Location"), body)
		}
	}
}

// TestOAuthNoOpenRedirect: anyone may register https://evil.example, but
// an erroneous authorization request to it is answered on the host's
// error page, not with a 303 there (RFC 9700 §4.11.2): no sign-in, no
// consent, no redirect. A native app's loopback redirect URI, and the
// https one of a client a user has consented to, still get the error at
// their redirect URI (RFC 6749 §4.1.2.1).
func TestOAuthNoOpenRedirect(t *testing.T) {
	e := gateHost(t, build(t))
	e.startServe()
	hc := browse()
	bad := url.Values{"response_type": {"token"}}
	evil := e.register("https://evil.example/landing")
	code, hdr, body := fetch(t, hc, "GET", e.authorizeURL(evil, "https://evil.example/landing", bad), nil)
	if code == http.StatusSeeOther || hdr.Get("Location") != "" || !strings.Contains(body, `id="oauth-error"`) {
		t.Errorf("an error for a fresh https registration: %d %q, want the error page\n%s", code, hdr.Get("Location"), body)
	}
	// Nor a missing PKCE challenge, or a foreign resource.
	for _, extra := range []url.Values{{"code_challenge": {""}}, {"resource": {"https://other.example/mcp"}}} {
		if code, hdr, _ := fetch(t, hc, "GET", e.authorizeURL(evil, "https://evil.example/landing", extra), nil); code == http.StatusSeeOther {
			t.Errorf("%v for a fresh https registration: redirected to %q", extra, hdr.Get("Location"))
		}
	}

	// A native app on the user's machine gets its error back.
	native := e.register("http://127.0.0.1:33418/cb")
	code, hdr, _ = fetch(t, hc, "GET", e.authorizeURL(native, "http://127.0.0.1:40001/cb", bad), nil)
	if loc, _ := url.Parse(hdr.Get("Location")); code != http.StatusSeeOther || loc.Host != "127.0.0.1:40001" ||
		loc.Query().Get("error") != "unsupported_response_type" || loc.Query().Get("state") != "state-0123456789" {
		t.Errorf("an error for a loopback client: %d %q, want 303 to it with the error", code, hdr.Get("Location"))
	}

	// An https app bob consented to gets its errors back, too.
	good := e.register("https://app.example/cb")
	f := passphraseForm(t, hc, e.authorizeURL(good, "https://app.example/cb", nil))
	f.Set("passphrase", gatePassphrase)
	if code, hdr, _ := fetch(t, hc, "POST", e.url+"/oauth/authorize", f); code != http.StatusSeeOther ||
		!strings.HasPrefix(hdr.Get("Location"), "https://app.example/cb?code=") {
		t.Fatalf("consent to app.example: %d %q", code, hdr.Get("Location"))
	}
	code, hdr, _ = fetch(t, hc, "GET", e.authorizeURL(good, "https://app.example/cb", bad), nil)
	if loc, _ := url.Parse(hdr.Get("Location")); code != http.StatusSeeOther || loc.Host != "app.example" ||
		loc.Query().Get("error") != "unsupported_response_type" {
		t.Errorf("an error for a consented https client: %d %q, want 303 to it with the error", code, hdr.Get("Location"))
	}
}

// TestOAuthPassphraseBurst: a guess at the passphrase gate is counted
// before it is checked. After four wrong guesses (the lockout's limit is
// five), a burst of 100 concurrent posts of the right passphrase gets
// exactly one code: the other 99 are refused unchecked (they all passed
// the lock before any was recorded, and each won a code). Then the gate
// is locked, the right passphrase included.
func TestOAuthPassphraseBurst(t *testing.T) {
	e := gateHost(t, build(t))
	e.startServe()
	hc := browse()
	client := e.register("http://127.0.0.1:33418/cb")
	f := passphraseForm(t, hc, e.authorizeURL(client, "http://127.0.0.1:33418/cb", nil))
	post := func(pass string) (int, http.Header) {
		g := url.Values{}
		for k, v := range f {
			g[k] = v
		}
		g.Set("passphrase", pass)
		code, hdr, _ := fetch(t, hc, "POST", e.url+"/oauth/authorize", g)
		return code, hdr
	}
	for i := range 4 {
		if code, _ := post(fmt.Sprintf("wrong guess %d", i)); code != http.StatusUnauthorized {
			t.Fatalf("wrong guess %d: %d, want 401", i, code)
		}
	}
	codes := make([]int, 100)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range codes {
		wg.Go(func() {
			<-start
			codes[i], _ = post(gatePassphrase)
		})
	}
	close(start)
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusSeeOther] != 1 || count[http.StatusTooManyRequests] != 99 {
		t.Errorf("100 concurrent right passphrases after 4 wrong ones: %v, want {303: 1, 429: 99}", count)
	}
	code, hdr := post(gatePassphrase)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || hdr.Get("Location") != "" {
		t.Errorf("the right passphrase once locked out: %d %q, want 429 with Retry-After", code, hdr.Get("Location"))
	}
}

// TestOAuthRevokedTokenNotLockedOut: a revoked OAuth access token is
// answered 401 with the resource metadata, not 429, even while its
// address is locked out by others' failures (a stale header in an app's
// config is enough for that on loopback): the app must learn to sign in
// again. Unknown tokens are still counted and refused with 429. A
// refresh after the revoke says the grant was revoked, not "already
// used".
func TestOAuthRevokedTokenNotLockedOut(t *testing.T) {
	e := gateHost(t, build(t))
	e.startServe()
	hc := browse()
	const redirect = "http://127.0.0.1:33418/cb"
	client := e.register(redirect)
	f := passphraseForm(t, hc, e.authorizeURL(client, redirect, nil))
	f.Set("passphrase", gatePassphrase)
	_, hdr, _ := fetch(t, hc, "POST", e.url+"/oauth/authorize", f)
	loc, _ := url.Parse(hdr.Get("Location"))
	code, _, body := fetch(t, hc, "POST", e.url+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
		"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "client_id": {client}, "code_verifier": {pkceVerifier}})
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); code != http.StatusOK || err != nil || tok.RefreshToken == "" {
		t.Fatalf("tokens: %d %s", code, body)
	}
	mcp := func(token string) (int, http.Header) { return e.mcpPing(token) }
	if code, _, body := fetch(t, hc, "POST", e.url+"/oauth/revoke", url.Values{"token": {tok.AccessToken}, "client_id": {client}}); code != http.StatusOK {
		t.Fatalf("revoking: %d %s", code, body)
	}
	e.lockOutLoopback()
	code, hdr = mcp(tok.AccessToken)
	if code != http.StatusUnauthorized || !strings.Contains(hdr.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Errorf("the revoked token while loopback is locked out: %d %q, want 401 naming the resource metadata", code, hdr.Get("WWW-Authenticate"))
	}
	if code, _ := mcp("another-unknown-token"); code != http.StatusTooManyRequests {
		t.Errorf("an unknown token while locked out: %d, want 429", code)
	}
	code, _, body = fetch(t, hc, "POST", e.url+"/oauth/token", url.Values{"grant_type": {"refresh_token"},
		"refresh_token": {tok.RefreshToken}, "client_id": {client}})
	if code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") || !strings.Contains(body, "revoked") ||
		strings.Contains(body, "already used") {
		t.Errorf("a refresh after the revoke: %d %s, want invalid_grant saying revoked", code, body)
	}
}

// TestOAuthClientRoutesOwnHost: the host's OAuth client routes
// (/oauth/callback, /oauth/client-metadata.json) refuse a foreign Host on
// a loopback connection (DNS rebinding), as every other surface does.
func TestOAuthClientRoutesOwnHost(t *testing.T) {
	e := newEnv(t, build(t), nil)
	e.startServe()
	get := func(path, host string) int {
		req, _ := http.NewRequest("GET", e.url+path, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/oauth/client-metadata.json", ""); code != http.StatusOK {
		t.Errorf("the client metadata document at the host's own address: %d, want 200", code)
	}
	for _, path := range []string{"/oauth/client-metadata.json", "/oauth/callback?state=x&code=y"} {
		if code := get(path, "evil.example"); code != http.StatusForbidden {
			t.Errorf("%s with Host evil.example: %d, want 403", path, code)
		}
	}
}

// TestOAuthFloodPerAddress: registrations and client metadata document
// fetches are budgeted per client address first, then overall. One
// client flooding either (here behind the operator's trusted proxy, so
// that X-Forwarded-For names the client) is refused, while a real app
// from another address still registers, and still has its document
// fetched.
func TestOAuthFloodPerAddress(t *testing.T) {
	e := newEnv(t, build(t), nil, map[string]any{"trustedProxies": []string{"127.0.0.1/32"}})
	e.startServe()
	flooder := http.Header{"X-Forwarded-For": {"203.0.113.9"}}
	app := http.Header{"X-Forwarded-For": {"198.51.100.7"}}
	// 40 registrations sent at once: the budget holds under concurrency.
	codes := make(chan int, 40)
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			code, _ := e.registerFrom(flooder, "https://junk.example/cb")
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusCreated] > 10 || got[http.StatusCreated]+got[http.StatusTooManyRequests] != 40 {
		t.Errorf("40 registrations at once from one address: %v; want at most 10 created (its budget a minute), the rest 429", got)
	}
	if code, body := e.registerFrom(app, "https://app.example/cb"); code != http.StatusCreated {
		t.Errorf("a real app's registration from another address during the flood: %d %s, want 201", code, body)
	}

	// Documents at made-up private addresses: each is a fetch (refused at
	// dial time by the SSRF guard), each of another host.
	authorize := func(hdr http.Header, docURL string) string {
		req, _ := http.NewRequest("GET", e.authorizeURL(docURL, "https://app.example/cb", nil), nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := browse().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for i := range 70 {
		authorize(flooder, fmt.Sprintf("https://10.9.%d.%d/client.json", i/200, i%200+1))
	}
	if page := authorize(flooder, "https://10.8.0.1/client.json"); !strings.Contains(page, "from your address") {
		t.Errorf("the flooder's next document: want refused for its address\n%s", page)
	}
	page := authorize(app, "https://10.7.0.1/client.json")
	if strings.Contains(page, "too many") || !strings.Contains(page, "could not be fetched") {
		t.Errorf("a real app's document from another address after the flood: want fetched (and failing here)\n%s", page)
	}
}

// mcpPing posts a ping to /mcp with a bearer token.
func (e *env) mcpPing(token string) (int, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// lockOutLoopback sends unknown tokens (as a stale header in some app's
// config does) until loopback is locked out.
func (e *env) lockOutLoopback() {
	e.t.Helper()
	for i := range 10 {
		if code, _ := e.mcpPing(fmt.Sprintf("stale-token-%d", i)); code == http.StatusTooManyRequests {
			return
		}
	}
	e.t.Fatal("ten unknown tokens did not lock loopback out")
}

// TestRevokedHostTokenNotLockedOut: a revoked host token (ah_...) is
// answered 401, not 429, on /mcp and the JSON API even while its address
// is locked out: it was issued here, so it is no guess, and its client
// must learn to get a new one. Unknown tokens are still refused with 429.
func TestRevokedHostTokenNotLockedOut(t *testing.T) {
	e := newEnv(t, build(t), nil)
	e.startServe()
	tok, stderr, code := e.run("", "token", "create", "--user", "alice", "--name", "laptop")
	id := regexp.MustCompile(`tok_[0-9a-f]+`).FindString(stderr)
	if code != 0 || id == "" {
		t.Fatalf("token create: %d %s", code, stderr)
	}
	tok = strings.TrimSpace(tok)
	e.must("", "token", "revoke", id)
	e.lockOutLoopback()
	if code, hdr := e.mcpPing(tok); code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("/mcp with the revoked token while loopback is locked out: %d %q, want 401", code, hdr.Get("WWW-Authenticate"))
	}
	if code, body := e.api("GET", "/api/v1/tokens", tok, ""); code != http.StatusUnauthorized {
		t.Errorf("/api/v1 with the revoked token while loopback is locked out: %d %s, want 401", code, body)
	}
	if code, _ := e.mcpPing("ah_" + strings.Repeat("0", 43)); code != http.StatusTooManyRequests {
		t.Errorf("an unknown host token while locked out: %d, want 429", code)
	}
}
