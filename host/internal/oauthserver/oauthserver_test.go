package oauthserver_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/oauthserver"
	"github.com/agenthost/agenthost/host/internal/web"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an authorization server on an httptest server, with the real
// web sign-in (auth store, web.Sessions) and a real SQLite store.
type env struct {
	t    *testing.T
	srv  *httptest.Server
	oa   *oauthserver.Server
	a    *auth.Store
	path string // the OAuth database
	logs *logBuffer
}

// logBuffer collects a server's log for canary scans.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// noneOf fails the test if the log holds any of the secrets.
func (l *logBuffer) noneOf(t *testing.T, secrets ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range secrets {
		if s != "" && strings.Contains(l.b.String(), s) {
			t.Errorf("the log holds a secret (%.8s...)", s)
		}
	}
}

func newEnv(t *testing.T, opts *oauthserver.Options) *env {
	t.Helper()
	dir := t.TempDir()
	a, err := auth.Open(filepath.Join(dir, "auth.db"), &auth.Options{Limiter: auth.NewLimiter(&auth.LimiterOptions{MaxFailures: 3})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	e := &env{t: t, a: a, path: filepath.Join(dir, oauthserver.FileName), logs: &logBuffer{}}
	mux := http.NewServeMux()
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	e.oa = e.open(opts)
	e.oa.Mount(mux)
	return e
}

// open opens another server on the same database.
func (e *env) open(opts *oauthserver.Options) *oauthserver.Server {
	e.t.Helper()
	st, err := oauthserver.OpenSQLite(e.path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	var o oauthserver.Options
	if opts != nil {
		o = *opts
	}
	if o.BaseURL == nil {
		o.BaseURL = func() string { return e.srv.URL }
	}
	o.Sessions = web.NewSessions(e.a, nil)
	o.Limiter = e.a.Limiter()
	o.Logger = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	oa, err := oauthserver.New(st, &o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { oa.Close() })
	return oa
}

// browser signed in as user (or not, for "").
type browser struct {
	t *testing.T
	c *http.Client
}

func (e *env) browser(user string) *browser {
	jar, _ := cookiejar.New(nil)
	if user != "" {
		id, _, err := e.a.CreateSession(context.Background(), auth.Principal{User: user})
		if err != nil {
			e.t.Fatal(err)
		}
		u, _ := url.Parse(e.srv.URL)
		jar.SetCookies(u, []*http.Cookie{{Name: "agenthost_session", Value: id, Path: "/"}})
	}
	return &browser{t: e.t, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	code int
	hdr  http.Header
	body string
}

func (b *browser) get(u string) page { return b.do("GET", u, nil) }

func (b *browser) do(method, u string, form url.Values) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(raw)}
}

const redirect = "http://127.0.0.1:9/callback"

// register registers a public client and returns its oauth2 config.
func (e *env) register(meta string) *oauth2.Config {
	e.t.Helper()
	resp, err := http.Post(e.srv.URL+"/oauth/register", "application/json", strings.NewReader(meta))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct {
		ClientID string `json:"client_id"`
		Error    string `json:"error_description"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("registering %s: %d %s", meta, resp.StatusCode, reg.Error)
	}
	return e.config(reg.ClientID)
}

func (e *env) config(clientID string) *oauth2.Config {
	return &oauth2.Config{ClientID: clientID, RedirectURL: redirect, Scopes: []string{"mcp", "offline_access"},
		Endpoint: oauth2.Endpoint{AuthURL: e.srv.URL + "/oauth/authorize", TokenURL: e.srv.URL + "/oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
}

// allow runs an authorization through consent and returns the redirect's
// query.
func (b *browser) allow(authURL string) url.Values {
	b.t.Helper()
	p := b.get(authURL)
	f := hosttest.HiddenFields(p.body, "consent")
	if p.code != http.StatusOK || f == nil {
		b.t.Fatalf("no consent page: %d\n%s", p.code, p.body)
	}
	f.Set("action", "allow")
	u, _ := url.Parse(authURL)
	r := b.do("POST", u.Scheme+"://"+u.Host+u.Path, f)
	loc, err := url.Parse(r.hdr.Get("Location"))
	if r.code != http.StatusSeeOther || err != nil {
		b.t.Fatalf("consent: %d %q", r.code, r.hdr.Get("Location"))
	}
	return loc.Query()
}

// tokens authorizes cfg as the browser's user and exchanges the code.
func (b *browser) tokens(cfg *oauth2.Config) *oauth2.Token {
	b.t.Helper()
	v := oauth2.GenerateVerifier()
	q := b.allow(cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(v)))
	tok, err := cfg.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		b.t.Fatalf("exchange: %v", err)
	}
	return tok
}

const dcrMeta = `{"client_name":"Test app","redirect_uris":["` + redirect + `"],"grant_types":["authorization_code","refresh_token"]}`

// TestVerify: only this server's unexpired access tokens for this very
// resource pass; a refresh token is no bearer token; a store that is
// gone is "unavailable", not "invalid".
func TestVerify(t *testing.T) {
	e := newEnv(t, nil)
	b := e.browser("alice")
	tok := b.tokens(e.register(dcrMeta))
	ctx := context.Background()
	p, err := e.oa.Verify(ctx, tok.AccessToken)
	if err != nil || p.User != "alice" || p.GrantID == "" || p.Expires.Before(time.Now()) {
		t.Fatalf("Verify = %+v, %v", p, err)
	}
	for name, bad := range map[string]string{
		"refresh token":    tok.RefreshToken,
		"garbage":          "not-a-token",
		"host token shape": "ah_" + strings.Repeat("x", 43),
		"forged signature": tok.AccessToken[:strings.LastIndex(tok.AccessToken, ".")+1] + "AAAA",
	} {
		if _, err := e.oa.Verify(ctx, bad); !errors.Is(err, oauthserver.ErrInvalidToken) {
			t.Errorf("%s: %v, want ErrInvalidToken", name, err)
		}
	}
	// The same database behind another public URL: another resource.
	moved := e.open(&oauthserver.Options{BaseURL: func() string { return "https://moved.example" }})
	if _, err := moved.Verify(ctx, tok.AccessToken); !errors.Is(err, oauthserver.ErrInvalidToken) {
		t.Errorf("a token for another audience: %v, want ErrInvalidToken", err)
	}
	_ = moved.Close()
	if _, err := moved.Verify(ctx, tok.AccessToken); !errors.Is(err, oauthserver.ErrUnavailable) {
		t.Errorf("a closed store: %v, want ErrUnavailable", err)
	}
	e.logs.noneOf(t, tok.AccessToken, tok.RefreshToken)
}

// TestExpired: an expired access token is refused as one (not a guess).
func TestExpired(t *testing.T) {
	e := newEnv(t, &oauthserver.Options{AccessTokenTTL: time.Second})
	tok := e.browser("alice").tokens(e.register(dcrMeta))
	time.Sleep(1600 * time.Millisecond) // fosite rounds the expiry to a second
	_, err := e.oa.Verify(context.Background(), tok.AccessToken)
	if !errors.Is(err, oauthserver.ErrExpired) || !errors.Is(err, oauthserver.ErrInvalidToken) {
		t.Errorf("an expired token: %v, want ErrExpired and ErrInvalidToken", err)
	}
}

// TestRevocations: the subscribers hear of a grant once its tokens are
// revoked (by its user, or by the reuse of a refresh token), and a user
// cannot revoke another's grant.
func TestRevocations(t *testing.T) {
	e := newEnv(t, nil)
	var (
		mu    sync.Mutex
		heard []string
	)
	stop := e.oa.OnRevoke(func(id string) { mu.Lock(); heard = append(heard, id); mu.Unlock() })
	defer stop()
	ctx := context.Background()
	cfg := e.register(dcrMeta)
	tok := e.browser("alice").tokens(cfg)
	p, _ := e.oa.Verify(ctx, tok.AccessToken)
	if err := e.oa.RevokeGrant(ctx, "bob", p.GrantID); !errors.Is(err, oauthserver.ErrNotFound) || !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("bob revoking alice's grant: %v, want not found", err)
	}
	if gs, _ := e.oa.Grants(ctx, "bob"); len(gs) != 0 {
		t.Errorf("bob sees grants: %+v", gs)
	}
	gs, err := e.oa.Grants(ctx, "alice")
	if err != nil || len(gs) != 1 || gs[0].Client != "Test app" || gs[0].ID != p.GrantID {
		t.Fatalf("alice's grants: %+v, %v", gs, err)
	}
	if err := e.oa.RevokeGrant(ctx, "alice", p.GrantID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.oa.Verify(ctx, tok.AccessToken); !errors.Is(err, oauthserver.ErrInvalidToken) {
		t.Errorf("a revoked grant's token: %v", err)
	}

	// Reuse of a rotated refresh token revokes the grant, heard once
	// committed.
	tok = e.browser("alice").tokens(cfg)
	p2, _ := e.oa.Verify(ctx, tok.AccessToken)
	fresh, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Fatal("a reused refresh token was accepted")
	}
	if _, err := e.oa.Verify(ctx, fresh.AccessToken); !errors.Is(err, oauthserver.ErrInvalidToken) {
		t.Errorf("the grant's newest access token after the reuse: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) < 2 || heard[0] != p.GrantID || heard[len(heard)-1] != p2.GrantID {
		t.Errorf("heard %v, want %s then %s", heard, p.GrantID, p2.GrantID)
	}
}

// TestClientDocuments: a client ID metadata document is fetched through
// the SSRF guard, checked, and refused with a reason on the page when it
// does not describe the client.
func TestClientDocuments(t *testing.T) {
	var (
		mu   sync.Mutex
		docs = map[string]func(w http.ResponseWriter, self string){}
	)
	doc := func(mutate func(m map[string]any)) func(http.ResponseWriter, string) {
		return func(w http.ResponseWriter, self string) {
			m := map[string]any{"client_id": self, "client_name": "Doc app", "redirect_uris": []string{redirect},
				"grant_types": []string{"authorization_code"}, "token_endpoint_auth_method": "none"}
			if mutate != nil {
				mutate(m)
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m)
		}
	}
	ds := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		h := docs[r.URL.Path]
		mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, "https://"+r.Host+r.URL.Path)
	}))
	defer ds.Close()
	cases := map[string]struct {
		serve func(http.ResponseWriter, string)
		want  string // on the error page; "" means accepted
	}{
		"good":               {doc(nil), ""},
		"other client_id":    {doc(func(m map[string]any) { m["client_id"] = "https://evil.example/app.json" }), "not its own URL"},
		"redirect not there": {doc(func(m map[string]any) { m["redirect_uris"] = []string{"http://127.0.0.1:9/other"} }), "redirect_uri"},
		"confidential":       {doc(func(m map[string]any) { m["token_endpoint_auth_method"] = "private_key_jwt" }), "public clients only"},
		"http redirect":      {doc(func(m map[string]any) { m["redirect_uris"] = []string{"http://evil.example/cb"} }), "loopback"},
		"too large":          {doc(func(m map[string]any) { m["client_name"] = strings.Repeat("x", 6000) }), "larger than"},
		"not JSON": {func(w http.ResponseWriter, _ string) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<p>hi</p>")
		}, "not JSON"},
		"redirected": {func(w http.ResponseWriter, _ string) {
			w.Header().Set("Location", "https://evil.example/app.json")
			w.WriteHeader(http.StatusFound)
		}, "HTTP 302"},
		"missing": {nil, "HTTP 404"},
	}
	tlsConf := ds.Client().Transport.(*http.Transport).TLSClientConfig
	e := newEnv(t, &oauthserver.Options{DocumentAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DocumentTLS: tlsConf})
	b := e.browser("alice")
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := "/" + strings.ReplaceAll(name, " ", "-") + ".json"
			if c.serve != nil {
				mu.Lock()
				docs[p] = c.serve
				mu.Unlock()
			}
			cfg := e.config(ds.URL + p)
			r := b.get(cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
			switch {
			case c.want == "" && (r.code != http.StatusOK || !strings.Contains(r.body, "Doc app") || strings.Contains(r.body, "name not verified")):
				t.Errorf("a good document: %d, want the consent page naming a verified client\n%s", r.code, r.body)
			case c.want != "" && (r.code != http.StatusBadRequest && r.code != http.StatusUnauthorized || !strings.Contains(html.UnescapeString(r.body), c.want)):
				t.Errorf("%d, want a refusal saying %q\n%s", r.code, c.want, r.body)
			case c.want != "" && r.hdr.Get("Location") != "":
				t.Errorf("a refused client was redirected to %s", r.hdr.Get("Location"))
			}
		})
	}
	// Without the test's allowance the guard refuses the loopback server;
	// the page (anyone's to see) does not tell what the name resolves to
	// or why it was refused (an oracle of the host's network), the log
	// does.
	guarded := newEnv(t, &oauthserver.Options{DocumentTLS: tlsConf})
	_, port, _ := strings.Cut(strings.TrimPrefix(ds.URL, "https://"), ":")
	r := guarded.browser("alice").get(guarded.config("https://localhost:"+port+"/good.json").AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	if r.code == http.StatusOK || !strings.Contains(r.body, "could not be fetched") {
		t.Errorf("a document on loopback without an allowance: %d\n%s", r.code, r.body)
	}
	for _, leak := range []string{"127.0.0.1", "::1", "loopback", "not allowed"} {
		if strings.Contains(r.body, leak) {
			t.Errorf("the refusal page tells %q of the host's network:\n%s", leak, r.body)
		}
	}
	if !strings.Contains(guarded.logs.String(), "not allowed") {
		t.Errorf("the log lacks why the document was refused:\n%s", guarded.logs.String())
	}
	// Not https, or no path: refused before any fetch.
	for _, id := range []string{"https://127.0.0.1", "https://127.0.0.1/", "https://127.0.0.1/a/../b.json"} {
		r := b.get(e.config(id).AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
		if r.code == http.StatusOK {
			t.Errorf("client_id %s was accepted", id)
		}
	}
}

// TestConsentPage: the page names the client (its name unverified for a
// registration), where it sends the user back, the scopes; it cannot be
// framed and posts only here and to the client.
func TestConsentPage(t *testing.T) {
	e := newEnv(t, nil)
	cfg := e.register(`{"client_name":"No refresh","client_uri":"https://app.example","redirect_uris":["` + redirect + `"]}`)
	r := e.browser("alice").get(cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	csp := r.hdr.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "form-action 'self' http://127.0.0.1:9"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if r.hdr.Get("X-Frame-Options") != "DENY" || r.hdr.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", r.hdr)
	}
	for _, want := range []string{"No refresh", "name not verified", "https://app.example", `class="return-host">127.0.0.1:9<`, "<code>mcp</code>", "Signed in as <strong class=\"user\">alice</strong>"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the consent page lacks %q", want)
		}
	}
	// offline_access asked, but the client may not refresh: not offered.
	if strings.Contains(r.body, "<code>offline_access</code>") {
		t.Error("offline_access offered to a client without the refresh_token grant")
	}
	// Not signed in: the sign-in offer comes back here.
	r = e.browser("").get(cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	m := regexp.MustCompile(`href="([^"]+)" id="sign-in"`).FindStringSubmatch(r.body)
	if m == nil || !strings.HasPrefix(html.UnescapeString(m[1]), "/settings/login?next=%2Foauth%2Fauthorize%3F") {
		t.Errorf("the sign-in offer: %v", m)
	}
}

// TestPassphraseGate: the operator's passphrase lets whoever knows it
// connect an app as its user; wrong ones count towards the sign-in
// lockout.
func TestPassphraseGate(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("correct horse battery"), bcrypt.MinCost)
	e := newEnv(t, &oauthserver.Options{Passphrase: &oauthserver.Passphrase{Hash: string(hash), User: "bob"}})
	cfg := e.register(dcrMeta)
	b := e.browser("")
	v := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(v))
	post := func(pass string) page {
		p := b.get(authURL)
		f := hosttest.HiddenFields(p.body, "passphrase-form")
		if f == nil {
			t.Fatalf("no passphrase form: %d\n%s", p.code, p.body)
		}
		f.Set("passphrase", pass)
		return b.do("POST", e.srv.URL+"/oauth/authorize", f)
	}
	if r := post("wrong one"); r.code != http.StatusUnauthorized || r.hdr.Get("Location") != "" {
		t.Errorf("a wrong passphrase: %d", r.code)
	}
	// No form token: refused before the passphrase is looked at.
	f := hosttest.HiddenFields(b.get(authURL).body, "passphrase-form")
	f.Set("_csrf", "forged")
	f.Set("passphrase", "correct horse battery")
	if r := b.do("POST", e.srv.URL+"/oauth/authorize", f); r.code != http.StatusForbidden {
		t.Errorf("a forged form token: %d, want 403", r.code)
	}
	r := post("correct horse battery")
	loc, _ := url.Parse(r.hdr.Get("Location"))
	if r.code != http.StatusSeeOther || loc.Query().Get("code") == "" {
		t.Fatalf("the right passphrase: %d %q", r.code, r.hdr.Get("Location"))
	}
	tok, err := cfg.Exchange(context.Background(), loc.Query().Get("code"), oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := e.oa.Verify(context.Background(), tok.AccessToken); err != nil || p.User != "bob" {
		t.Errorf("the passphrase's grant: %+v, %v, want bob's", p, err)
	}
	// Three failures (this test's limit) lock the address out, the right
	// passphrase included.
	post("wrong 1")
	post("wrong 2")
	if r := post("wrong 3"); r.code != http.StatusTooManyRequests {
		t.Errorf("the third failure: %d, want 429", r.code)
	}
	if r := post("correct horse battery"); r.code != http.StatusTooManyRequests || r.hdr.Get("Location") != "" {
		t.Errorf("the right passphrase while locked out: %d, want 429", r.code)
	}
	e.logs.noneOf(t, "correct horse battery", "wrong one", "wrong 1", tok.AccessToken, tok.RefreshToken, loc.Query().Get("code"))
}

// TestPassphraseGateSpread: wrong passphrases spread over many clients
// lock the gate for all of them: guesses are not checked, not even a
// right one, until the lockout ends (the settings sign-in still works).
func TestPassphraseGateSpread(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("correct horse battery"), bcrypt.MinCost)
	e := newEnv(t, &oauthserver.Options{Passphrase: &oauthserver.Passphrase{Hash: string(hash), User: "bob"},
		// Each test client is its own key, as behind a trusted proxy.
		AddrKey: func(r *http.Request) string { return r.Header.Get("X-Test-Client") }})
	cfg := e.register(dcrMeta)
	authURL := cfg.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
	try := func(client, pass string) int {
		b := e.browser("")
		p := b.get(authURL)
		f := hosttest.HiddenFields(p.body, "passphrase-form")
		f.Set("passphrase", pass)
		req, _ := http.NewRequest("POST", e.srv.URL+"/oauth/authorize", strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Test-Client", client)
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, c := range []string{"a", "b"} {
		if code := try(c, "guess"); code != http.StatusUnauthorized {
			t.Errorf("guess %d: %d, want 401", i, code)
		}
	}
	if code := try("c", "guess"); code != http.StatusTooManyRequests {
		t.Errorf("the third guess, from a third client: %d, want 429 (the gate is locked)", code)
	}
	if code := try("d", "correct horse battery"); code != http.StatusTooManyRequests {
		t.Errorf("the right passphrase from a fresh client while the gate is locked: %d, want 429 (not checked)", code)
	}
}

// TestRegistration: what a registration may ask for.
func TestRegistration(t *testing.T) {
	e := newEnv(t, &oauthserver.Options{AllowedRedirectHosts: []string{"claude.ai"}})
	for name, c := range map[string]struct {
		body, want string
	}{
		"allowed host":          {`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback"]}`, ""},
		"loopback always":       {`{"redirect_uris":["http://localhost:1234/cb"]}`, ""},
		"secret asked, none":    {`{"redirect_uris":["https://claude.ai/cb"],"token_endpoint_auth_method":"client_secret_basic"}`, ""},
		"host not allowed":      {`{"redirect_uris":["https://evil.example/cb"]}`, "invalid_redirect_uri"},
		"control in the name":   {`{"redirect_uris":["https://claude.ai/cb"],"client_name":"a\u0007b"}`, "invalid_client_metadata"},
		"too many URIs":         {`{"redirect_uris":[` + strings.Repeat(`"https://claude.ai/cb",`, 10) + `"https://claude.ai/cb"]}`, "invalid_redirect_uri"},
		"token response type":   {`{"redirect_uris":["https://claude.ai/cb"],"response_types":["token"]}`, "invalid_client_metadata"},
		"not JSON":              {`redirect_uris=x`, "invalid_client_metadata"},
		"javascript client_uri": {`{"redirect_uris":["https://claude.ai/cb"],"client_uri":"javascript:alert(1)"}`, "invalid_client_metadata"},
	} {
		resp, err := http.Post(e.srv.URL+"/oauth/register", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		switch {
		case c.want == "" && (resp.StatusCode != http.StatusCreated || out["token_endpoint_auth_method"] != "none" || out["client_secret"] != nil):
			t.Errorf("%s: %d %v, want a public client", name, resp.StatusCode, out)
		case c.want != "" && (resp.StatusCode != http.StatusBadRequest || out["error"] != c.want):
			t.Errorf("%s: %d %v, want %s", name, resp.StatusCode, out, c.want)
		}
	}
}

// TestMetadata: the resource's and the server's metadata, as JSON.
func TestMetadata(t *testing.T) {
	e := newEnv(t, nil)
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"} {
		resp, err := http.Get(e.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: %d %v %v", p, resp.StatusCode, resp.Header, err)
		}
		if _, ok := m["jwks_uri"]; ok {
			t.Errorf("%s names a jwks_uri: %v", p, m)
		}
	}
	if got := e.oa.ResourceMetadataURL(); got != e.srv.URL+"/.well-known/oauth-protected-resource/mcp" {
		t.Errorf("ResourceMetadataURL = %q", got)
	}
	// DNS rebinding: a loopback connection naming another host is refused
	// on every route.
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/oauth/authorize", "/oauth/token", "/oauth/register"} {
		req, _ := http.NewRequest("GET", e.srv.URL+p, nil)
		req.Host = "evil.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with Host evil.example: %d, want 403", p, resp.StatusCode)
		}
	}
}

// TestClientDocumentOutage: when a metadata-document client's document
// cannot be fetched for a while (its host answers 503, or cannot be
// reached), the document fetched last keeps serving, so that the
// client's refresh is not refused as invalid_client (which makes apps
// drop the connection); a document never fetched is refused all the same.
func TestClientDocumentOutage(t *testing.T) {
	var down atomic.Bool
	ds := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": "https://" + r.Host + r.URL.Path, "client_name": "Doc app",
			"redirect_uris": []string{redirect}, "grant_types": []string{"authorization_code", "refresh_token"}, "token_endpoint_auth_method": "none"})
	}))
	defer ds.Close()
	tlsConf := ds.Client().Transport.(*http.Transport).TLSClientConfig
	e := newEnv(t, &oauthserver.Options{DocumentAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, DocumentTLS: tlsConf,
		DocumentTTL: time.Millisecond})
	cfg := e.config(ds.URL + "/app.json")
	tok := e.browser("alice").tokens(cfg)
	down.Store(true)
	time.Sleep(10 * time.Millisecond) // the cached document is past its time
	if _, err := cfg.TokenSource(context.Background(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err != nil {
		t.Errorf("a refresh while the client's document host is down: %v", err)
	}
	other := e.config(ds.URL + "/other.json")
	if r := e.browser("alice").get(other.AuthCodeURL("state-0123456789", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))); r.code == http.StatusOK {
		t.Errorf("a document never fetched was accepted while its host is down")
	}
}
