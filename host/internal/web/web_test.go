package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/auth"
	"github.com/agenthost/agenthost/host/internal/hosttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock for the auth store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logBuffer collects logs safely.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// env is a handler on an httptest server, a fake host and a real auth
// store on a temp dir.
type env struct {
	t     *testing.T
	h     *hosttest.Host
	a     *auth.Store
	srv   *httptest.Server
	clock *clock
	logs  *logBuffer
	base  string
}

func newEnv(t *testing.T, opts *Options) *env {
	t.Helper()
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	a, err := auth.Open(filepath.Join(t.TempDir(), "auth.db"), &auth.Options{Now: c.Now, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if opts == nil {
		opts = &Options{}
	}
	opts.Logger = logger
	if opts.MCPURL == "" {
		opts.MCPURL = "http://127.0.0.1:7777/mcp"
	}
	if opts.MCPSessions == nil {
		opts.MCPSessions = func() int { return 7 }
	}
	h := newFakeHost()
	srv := httptest.NewServer(New(h, a, opts))
	t.Cleanup(srv.Close)
	return &env{t: t, h: h, a: a, srv: srv, clock: c, logs: logs, base: strings.TrimRight(opts.BasePath, "/")}
}

func (e *env) token(user string) string {
	e.t.Helper()
	plain, _, err := e.a.CreateToken(context.Background(), user, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	return plain
}

func (e *env) url(p string) string { return e.srv.URL + e.base + p }

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see them.
type browser struct {
	e    *env
	c    *http.Client
	csrf string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

type resp struct {
	code int
	hdr  http.Header
	body string
}

func (b *browser) do(req *http.Request) resp {
	b.e.t.Helper()
	r, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if m := csrfRE.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return resp{code: r.StatusCode, hdr: r.Header, body: string(body)}
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func (b *browser) get(p string) resp {
	req, _ := http.NewRequest("GET", b.e.url(p), nil)
	return b.do(req)
}

func (b *browser) post(p string, form url.Values) resp {
	req, _ := http.NewRequest("POST", b.e.url(p), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// postCSRF posts form with the page's CSRF token.
func (b *browser) postCSRF(p string, form url.Values) resp {
	if form == nil {
		form = url.Values{}
	}
	form.Set("_csrf", b.csrf)
	return b.post(p, form)
}

// signIn signs in with a fresh token of user and loads /settings.
func (e *env) signIn(user string) *browser {
	e.t.Helper()
	b := e.browser()
	b.get("/settings/login")
	r := b.postCSRF("/settings/login", url.Values{"token": {e.token(user)}})
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != e.base+"/settings" {
		e.t.Fatalf("sign-in: %d %s\n%s", r.code, r.hdr.Get("Location"), r.body)
	}
	if r := b.get("/settings"); r.code != 200 {
		e.t.Fatalf("settings page: %d\n%s", r.code, r.body)
	}
	return b
}

// api calls the JSON API with a bearer token.
func (e *env) api(method, p, token, body string) resp {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url(p), strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{code: r.StatusCode, hdr: r.Header, body: string(b)}
}

func TestSignInWithToken(t *testing.T) {
	e := newEnv(t, nil)
	b := e.browser()
	if r := b.get("/settings"); r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/settings/login" {
		t.Fatalf("signed-out /settings: %d %s", r.code, r.hdr.Get("Location"))
	}
	r := b.get("/settings/login")
	if r.code != 200 || !strings.Contains(r.body, `<label for="token">`) {
		t.Fatalf("login page: %d\n%s", r.code, r.body)
	}
	// Without the form's anti-forgery value: refused.
	tok := e.token("alice")
	if r := b.post("/settings/login", url.Values{"token": {tok}}); r.code != http.StatusForbidden {
		t.Errorf("sign-in without _csrf: %d", r.code)
	}
	b.get("/settings/login")
	if r := b.postCSRF("/settings/login", url.Values{"token": {tok + "x"}}); r.code != http.StatusUnauthorized ||
		!strings.Contains(r.body, "not valid, or it has been revoked") || !strings.Contains(r.body, `aria-invalid="true"`) {
		t.Errorf("bad token: %d\n%s", r.code, r.body)
	}
	r = b.postCSRF("/settings/login", url.Values{"token": {tok}})
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/settings" {
		t.Fatalf("sign-in: %d %s", r.code, r.hdr.Get("Location"))
	}
	var cookie string
	for _, c := range r.hdr.Values("Set-Cookie") {
		if strings.HasPrefix(c, "agenthost_session=") {
			cookie = c
		}
	}
	for _, attr := range []string{"Path=/", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(cookie, attr) {
			t.Errorf("session cookie %q lacks %s", cookie, attr)
		}
	}
	if strings.Contains(cookie, tok) {
		t.Error("the session cookie carries the token")
	}
	r = b.get("/settings")
	if r.code != 200 || !strings.Contains(r.body, "Signed in as <strong>alice</strong>") {
		t.Fatalf("settings: %d\n%s", r.code, r.body)
	}
	// Signed in, the login page sends you home.
	if r := b.get("/settings/login"); r.code != http.StatusSeeOther {
		t.Errorf("login page when signed in: %d", r.code)
	}
	// Sign out needs the CSRF token, then ends the session.
	if r := b.post("/settings/logout", url.Values{}); r.code != http.StatusForbidden {
		t.Errorf("sign-out without _csrf: %d", r.code)
	}
	if r := b.postCSRF("/settings/logout", nil); r.code != http.StatusSeeOther {
		t.Errorf("sign-out: %d", r.code)
	}
	if r := b.get("/settings"); r.code != http.StatusSeeOther {
		t.Errorf("after sign-out /settings: %d", r.code)
	}
	if r := b.get("/settings/login?signed-out=1"); !strings.Contains(r.body, "You are signed out.") {
		t.Errorf("no sign-out notice:\n%s", r.body)
	}
}

// TestSignInComesBack: a sign-in started from another page of this server
// (the OAuth authorization) goes back to it, also when already signed in;
// anything that is not a path of this server is ignored (no open
// redirect).
func TestSignInComesBack(t *testing.T) {
	e := newEnv(t, nil)
	const next = "/oauth/authorize?client_id=c&state=s"
	for target, want := range map[string]string{
		next:                     next,
		"//evil.example/x":       "/settings",
		"https://evil.example/x": "/settings",
		"/\\evil.example":        "/settings",
		"/ok\r\nSet-Cookie: a=b": "/settings",
	} {
		b := e.browser()
		r := b.get("/settings/login?next=" + url.QueryEscape(target))
		hasNext := strings.Contains(r.body, `name="next"`)
		if hasNext != (want == next) {
			t.Errorf("next=%q: the form carries it: %v", target, hasNext)
		}
		// Posted even when the form dropped it: refused all the same.
		form := url.Values{"token": {e.token("alice")}, "next": {target}}
		r = b.postCSRF("/settings/login", form)
		if r.code != http.StatusSeeOther || r.hdr.Get("Location") != want {
			t.Errorf("signing in with next=%q: %d to %q, want %q", target, r.code, r.hdr.Get("Location"), want)
		}
		if want == next {
			if r := b.get("/settings/login?next=" + url.QueryEscape(next)); r.code != http.StatusSeeOther || r.hdr.Get("Location") != next {
				t.Errorf("already signed in: %d to %q, want %q", r.code, r.hdr.Get("Location"), next)
			}
		}
	}
}

func TestSignInWithLink(t *testing.T) {
	e := newEnv(t, nil)
	code, err := e.a.CreateLoginLink(context.Background(), "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	r := b.get("/settings/login?code=" + url.QueryEscape(code))
	if r.code != 200 || !strings.Contains(r.body, "Sign in as alice") {
		t.Fatalf("link page: %d\n%s", r.code, r.body)
	}
	// Following the link signed nothing in yet: it asks first.
	if r := b.get("/settings"); r.code != http.StatusSeeOther {
		t.Fatalf("the link signed in without asking: %d", r.code)
	}
	b.get("/settings/login?code=" + url.QueryEscape(code))
	r = b.postCSRF("/settings/login", url.Values{"code": {code}})
	if r.code != http.StatusSeeOther {
		t.Fatalf("redeem: %d\n%s", r.code, r.body)
	}
	if r := b.get("/settings"); r.code != 200 || !strings.Contains(r.body, "<strong>alice</strong>") {
		t.Fatalf("settings after link: %d", r.code)
	}
	// Used once; a second browser cannot use it again.
	b2 := e.browser()
	r = b2.get("/settings/login?code=" + url.QueryEscape(code))
	if r.code != http.StatusUnauthorized || !strings.Contains(r.body, "already used, it has expired") {
		t.Errorf("reused link: %d\n%s", r.code, r.body)
	}
	r = b2.postCSRF("/settings/login", url.Values{"code": {code}})
	if r.code != http.StatusUnauthorized {
		t.Errorf("reused link posted: %d", r.code)
	}
	// Expired.
	code, _ = e.a.CreateLoginLink(context.Background(), "bob", 0)
	e.clock.Add(16 * time.Minute)
	if r := b2.get("/settings/login?code=" + url.QueryEscape(code)); r.code != http.StatusUnauthorized {
		t.Errorf("expired link: %d", r.code)
	}
	if out := e.logs.String(); strings.Contains(out, code) || !strings.Contains(out, "code_sha256=") {
		t.Errorf("link failures must be logged by fingerprint only:\n%s", out)
	}
}

func TestCSRFAndCrossOrigin(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	form := url.Values{"notes": {"true"}}
	for name, r := range map[string]resp{
		"no token":    b.post("/settings/mcp/servers", form),
		"wrong token": b.post("/settings/mcp/servers", url.Values{"_csrf": {strings.Repeat("A", 43)}}),
	} {
		if r.code != http.StatusForbidden || !strings.Contains(r.body, "did not come from this site") {
			t.Errorf("%s: %d\n%s", name, r.code, r.body)
		}
	}
	if got := e.h.Stored("alice", "mcp", "servers"); got != "" {
		t.Errorf("a forged post was stored: %s", got)
	}
	// Cross-origin browser posts are refused before anything else.
	for name, hdr := range map[string][2]string{
		"sec-fetch-site": {"Sec-Fetch-Site", "cross-site"},
		"origin":         {"Origin", "http://evil.example"},
	} {
		f := url.Values{"_csrf": {b.csrf}, "token": {"x"}}
		req, _ := http.NewRequest("POST", e.url("/settings/mcp/servers"), strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(hdr[0], hdr[1])
		if r := b.do(req); r.code != http.StatusForbidden {
			t.Errorf("%s: %d", name, r.code)
		}
	}
	// The CSRF token of one session does not work in another.
	b2 := e.signIn("alice")
	if r := b2.post("/settings/mcp/servers", url.Values{"_csrf": {b.csrf}}); r.code != http.StatusForbidden {
		t.Errorf("another session's CSRF token: %d", r.code)
	}
	// A session that ended cannot post.
	b.postCSRF("/settings/logout", nil)
	if r := b.postCSRF("/settings/mcp/servers", form); r.code != http.StatusUnauthorized {
		t.Errorf("post after sign-out: %d", r.code)
	}
}

// inputs maps each input's id to its tag, for checking labels.
var (
	controlRE = regexp.MustCompile(`<(input|textarea|select)\b[^>]*\bid="([^"]+)"[^>]*>`)
	labelRE   = regexp.MustCompile(`<label for="([^"]+)"`)
)

func TestRenderEveryNodeType(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	page := b.get("/settings").body
	for _, want := range []string{
		// toggles, with the default (search is opt-in) and the warning
		`name="notes" value="true" checked`,
		`name="search" value="true" aria-describedby`,
		`<p class="warning" id=`, "Warning:</strong> A shared server hands every permitted user",
		// secrets: never filled, with their state
		`type="password" id="f2" name="token:notes" value=""`, `id="f2-state">Not set</span>`,
		// longtext with JSON
		`data-syntax="json"`, `class="json-live"`,
		// text, longtext, select, number, group
		`name="nickname" value="" placeholder="how the agent calls you" maxlength="40"`,
		`<textarea id=`, `name="notes" rows="6"`,
		`<option value="fast" selected>Fast</option>`, `<option value="careful">careful</option>`, `(not set)`,
		`type="number"`, `name="retries" value="3" step="1" min="0" max="10"`, `name="advanced.ratio" value="" step="0.5"`,
		`<fieldset>`, `<legend>Advanced</legend>`, `name="advanced.verbose"`, `name="advanced.apikey"`,
		// status and tools
		`<th scope="row">team</th>`, `<th scope="row"><code>notes/add_note</code></th>`, `deferred`,
		"MCP endpoint: <code class=\"mcp-url\">http://127.0.0.1:7777/mcp</code>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "Operator only") || strings.Contains(page, "motd") {
		t.Error("a system section is shown to a user")
	}
	// Every control has a label.
	labels := map[string]bool{}
	for _, m := range labelRE.FindAllStringSubmatch(page, -1) {
		labels[m[1]] = true
	}
	controls := controlRE.FindAllStringSubmatch(page, -1)
	if len(controls) < 12 {
		t.Fatalf("found only %d controls", len(controls))
	}
	for _, m := range controls {
		if !labels[m[2]] && !strings.Contains(m[0], `type="hidden"`) {
			t.Errorf("control %s has no label: %s", m[2], m[0])
		}
	}
	// No inline script: the CSP forbids it, so none may be needed.
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>`).MatchString(page) || strings.Contains(page, " onclick=") {
		t.Error("the page has inline script")
	}
}

func TestSectionRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	r := b.postCSRF("/settings/demo/prefs", url.Values{
		"nickname": {"Ali <b>"}, "notes": {"line 1\r\nline 2"}, "mode": {"careful"}, "retries": {"7"},
		"advanced.verbose": {"true"}, "advanced.ratio": {"2.5"}, "advanced.apikey": {"KEY-123"},
	})
	if r.code != http.StatusSeeOther || !strings.HasPrefix(r.hdr.Get("Location"), "/settings?saved=demo%2Fprefs#s-demo-prefs") {
		t.Fatalf("save: %d %s\n%s", r.code, r.hdr.Get("Location"), r.body)
	}
	want := `{"advanced":{"ratio":2.5,"verbose":true},"mode":"careful","nickname":"Ali <b>","notes":"line 1\nline 2","retries":7}`
	if got := e.h.Stored("alice", "demo", "prefs"); got != want {
		t.Errorf("stored\n got %s\nwant %s", got, want)
	}
	if v, ok := e.h.Secret("alice", "demo", "advanced.apikey"); !ok || v != "KEY-123" {
		t.Errorf("secret = %q, %v", v, ok)
	}
	page := b.get(r.hdr.Get("Location")).body
	for _, want := range []string{
		"Saved “Preferences”.", `value="Ali &lt;b&gt;"`, "\nline 1\nline 2</textarea>", `<option value="careful" selected>`,
		`name="retries" value="7"`, `name="advanced.verbose" value="true" checked`, `name="advanced.ratio" value="2.5"`,
		`>Set</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("after saving, the page lacks %q", want)
		}
	}
	if strings.Contains(page, "KEY-123") {
		t.Error("the secret is echoed")
	}
	// Saving again with the secret left empty keeps it; unchecking a
	// toggle stores false; emptied fields are unset.
	b.postCSRF("/settings/demo/prefs", url.Values{"mode": {"fast"}, "retries": {"0"}})
	if got := e.h.Stored("alice", "demo", "prefs"); got != `{"advanced":{"verbose":false},"mode":"fast","retries":0}` {
		t.Errorf("second save stored %s", got)
	}
	if _, ok := e.h.Secret("alice", "demo", "advanced.apikey"); !ok {
		t.Error("an empty secret input cleared the secret")
	}
	// A value the form refuses shows the error next to the field and keeps
	// the others' posted values.
	r = b.postCSRF("/settings/demo/prefs", url.Values{"retries": {"11"}, "nickname": {"kept"}, "advanced.ratio": {"x"}})
	if r.code != http.StatusBadRequest || !strings.Contains(r.body, "must be a number") || !strings.Contains(r.body, `value="kept"`) {
		t.Errorf("bad number: %d\n%s", r.code, r.body)
	}
	r = b.postCSRF("/settings/demo/prefs", url.Values{"retries": {"11"}, "nickname": {"kept"}})
	if r.code != http.StatusBadRequest || !strings.Contains(r.body, "must be at most 10 (got 11)") {
		t.Errorf("out of range: %d\n%s", r.code, r.body)
	}
	// Clear the secret with its button's form.
	r = b.postCSRF("/settings/demo/prefs/clear", url.Values{"name": {"advanced.apikey"}})
	if r.code != http.StatusSeeOther {
		t.Errorf("clear: %d\n%s", r.code, r.body)
	}
	if _, ok := e.h.Secret("alice", "demo", "advanced.apikey"); ok {
		t.Error("clear left the secret")
	}
	if r := b.postCSRF("/settings/demo/prefs/clear", url.Values{"name": {"nickname"}}); r.code != http.StatusBadRequest {
		t.Errorf("clearing a non-secret field: %d", r.code)
	}
	if r := b.postCSRF("/settings/demo/admin", url.Values{"motd": {"x"}}); r.code != http.StatusNotFound {
		t.Errorf("posting a system section: %d", r.code)
	}
	if r := b.postCSRF("/settings/nope/prefs", nil); r.code != http.StatusNotFound {
		t.Errorf("posting an unknown section: %d", r.code)
	}
}

func TestInvalidJSONShownInline(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	bad := `{"mcpServers": {"mine": {"url": "https://x.example/mcp",}}}`
	r := b.postCSRF("/settings/mcp/user-servers", url.Values{"servers": {bad}})
	if r.code != http.StatusBadRequest {
		t.Fatalf("invalid JSON: %d", r.code)
	}
	// The error sits right after its textarea, which keeps the text, and
	// the textarea points at it.
	m := regexp.MustCompile(`(?s)<textarea id="(f\d+)" name="servers"[^>]*aria-describedby="([^"]*)" aria-invalid="true">\n(.*?)</textarea>\s*<p class="help"[^>]*>.*?</p>\s*<p class="field-error" id="(f\d+-error)">(.*?)</p>`).
		FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no textarea followed by its error:\n%s", r.body)
	}
	if want := strings.ReplaceAll(bad, `"`, "&#34;"); m[3] != want {
		t.Errorf("textarea holds %q, want the posted text %q", m[3], want)
	}
	if !strings.Contains(m[2], m[4]) || m[4] != m[1]+"-error" {
		t.Errorf("aria-describedby %q does not name the error %q", m[2], m[4])
	}
	if !strings.Contains(m[5], "must be valid JSON") {
		t.Errorf("error text %q", m[5])
	}
	if got := e.h.Stored("alice", "mcp", "user-servers"); got != "" {
		t.Errorf("invalid JSON was stored: %s", got)
	}
	// Valid JSON that breaks the schema: the schema's message, inline.
	r = b.postCSRF("/settings/mcp/user-servers", url.Values{"servers": {`{"mcpServers": {"mine": {"comand": "x"}}}`}})
	if r.code != http.StatusBadRequest || !regexp.MustCompile(`class="field-error" id="f\d+-error">[^<]*comand`).MatchString(r.body) {
		t.Errorf("schema error: %d\n%s", r.code, r.body)
	}
	// Valid: stored, and shown on the next page.
	good := `{"mcpServers": {"mine": {"url": "https://x.example/mcp"}}}`
	if r := b.postCSRF("/settings/mcp/user-servers", url.Values{"servers": {good}}); r.code != http.StatusSeeOther {
		t.Fatalf("valid JSON: %d\n%s", r.code, r.body)
	}
	if !strings.Contains(b.get("/settings").body, strings.ReplaceAll(good, `"`, "&#34;")) {
		t.Error("the saved JSON is not shown")
	}
}

func TestToggleOffRemovesTools(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	if !strings.Contains(b.get("/settings").body, "notes/add_note") {
		t.Fatal("notes tools missing before")
	}
	// notes unchecked (absent), team kept on.
	if r := b.postCSRF("/settings/mcp/servers", url.Values{"team": {"true"}}); r.code != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", r.code, r.body)
	}
	page := b.get("/settings").body
	if strings.Contains(page, "notes/add_note") || !strings.Contains(page, "team/ask") {
		t.Error("the tools did not follow the toggles")
	}
	if got := e.h.Stored("alice", "mcp", "servers"); got != `{"notes":false,"search":false,"team":true}` {
		t.Errorf("stored %s", got)
	}
}

func TestNamedSecrets(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	canary := "CANARY-alice-named-0123456789abcdef"
	if r := b.postCSRF("/settings/_secrets/mcp", url.Values{"name": {"token:u_mine"}, "value": {canary}}); r.code != http.StatusSeeOther {
		t.Fatalf("store: %d\n%s", r.code, r.body)
	}
	if v, _ := e.h.Secret("alice", "mcp", "token:u_mine"); v != canary {
		t.Errorf("stored %q", v)
	}
	page := b.get("/settings?secret=set").body
	if !strings.Contains(page, "<code>token:u_mine</code>") || strings.Contains(page, canary) || !strings.Contains(page, "The secret was stored.") {
		t.Errorf("the names list:\n%s", page)
	}
	if r := b.postCSRF("/settings/_secrets/mcp", url.Values{"name": {"bad name"}, "value": {"v"}}); r.code != http.StatusBadRequest ||
		!strings.Contains(r.body, "is not valid") {
		t.Errorf("bad name: %d", r.code)
	}
	if r := b.postCSRF("/settings/_secrets/mcp", url.Values{"name": {""}, "value": {"v"}}); r.code != http.StatusBadRequest {
		t.Errorf("empty name: %d", r.code)
	}
	if r := b.postCSRF("/settings/_secrets/nope", url.Values{"name": {"x"}, "value": {"v"}}); r.code != http.StatusNotFound {
		t.Errorf("unknown extension: %d", r.code)
	}
	if r := b.postCSRF("/settings/_secrets/mcp/delete", url.Values{"name": {"token:u_mine"}}); r.code != http.StatusSeeOther {
		t.Errorf("delete: %d", r.code)
	}
	if _, ok := e.h.Secret("alice", "mcp", "token:u_mine"); ok {
		t.Error("delete left the secret")
	}
}

// TestSecretsNeverEchoed stores canaries through every way in and scans
// every page and API answer for them.
func TestSecretsNeverEchoed(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	tok := e.token("alice")
	c1, c2, c3 := "CANARY-alice-form-1f2e3d4c5b6a7988", "CANARY-alice-api-aa11bb22cc33dd44", "CANARY-alice-bad-9f8e7d6c5b4a3921"
	b.postCSRF("/settings/mcp/servers", url.Values{"notes": {"true"}, "token:notes": {c1}})
	if r := e.api("PUT", "/api/v1/secrets/mcp/token:search", tok, `{"value":"`+c2+`"}`); r.code != http.StatusNoContent {
		t.Fatalf("PUT secret: %d %s", r.code, r.body)
	}
	// A refused save with a secret in it must not echo the secret either.
	r := b.postCSRF("/settings/demo/prefs", url.Values{"retries": {"99"}, "advanced.apikey": {c3}})
	if r.code != http.StatusBadRequest {
		t.Fatalf("refused save: %d", r.code)
	}
	bodies := []string{r.body, b.get("/settings").body, b.get("/settings?saved=mcp/servers").body}
	for _, p := range []string{"/api/v1/sections", "/api/v1/settings/mcp/servers", "/api/v1/secrets/mcp", "/api/v1/tools", "/api/v1/status", "/api/v1/me"} {
		r := e.api("GET", p, tok, "")
		if r.code != 200 {
			t.Errorf("GET %s: %d", p, r.code)
		}
		bodies = append(bodies, r.body)
	}
	bodies = append(bodies, e.api("PUT", "/api/v1/settings/mcp/servers", tok, `{"notes":true,"token:notes":"`+c1+`"}`).body)
	bodies = append(bodies, e.api("PUT", "/api/v1/settings/demo/prefs", tok, `{"retries":99,"advanced":{"apikey":"`+c3+`"}}`).body)
	for i, body := range bodies {
		for _, c := range []string{c1, c2, c3} {
			if strings.Contains(body, c) {
				t.Errorf("answer %d echoes a secret:\n%s", i, body)
			}
		}
	}
	if out := e.logs.String(); strings.Contains(out, c1) || strings.Contains(out, c2) || strings.Contains(out, c3) {
		t.Errorf("a secret is in the log:\n%s", out)
	}
	if r := e.api("GET", "/api/v1/settings/mcp/servers", tok, ""); !strings.Contains(r.body, `"secrets":{"token:notes":true,"token:search":true}`) {
		t.Errorf("secret states: %s", r.body)
	}
	if !strings.Contains(b.get("/settings").body, `class="secret-state is-set"`) {
		t.Error("no set state shown")
	}
}

// TestUsersIsolated gives each user canaries everywhere and checks that
// the other never sees them, on pages and in the API.
func TestUsersIsolated(t *testing.T) {
	e := newEnv(t, nil)
	users := []string{"alice", "bob"}
	browsers, tokens, canaries := map[string]*browser{}, map[string]string{}, map[string]string{}
	for _, u := range users {
		browsers[u], tokens[u] = e.signIn(u), e.token(u)
		canaries[u] = "CANARY-" + u + "-0011223344556677"
		b := browsers[u]
		b.postCSRF("/settings/demo/prefs", url.Values{"nickname": {canaries[u] + "-nick"}, "advanced.apikey": {canaries[u] + "-key"}})
		b.postCSRF("/settings/_secrets/mcp", url.Values{"name": {"token:u_" + u}, "value": {canaries[u] + "-tok"}})
	}
	// bob switches notes off: alice keeps it.
	browsers["bob"].postCSRF("/settings/mcp/servers", url.Values{})
	// A misbehaving status line of alice's sneaks into bob's answer.
	st, err := e.h.Status(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	// One named after a switch would be shown beside it.
	e.h.SetStatus("bob", append(st, api.StatusEntry{Extension: "mcp", User: "alice", Name: "leak-" + canaries["alice"], State: "connected"},
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "search", State: "quarantined", Reason: "refused " + canaries["alice"]})...)
	for _, u := range users {
		other := "bob"
		if u == "bob" {
			other = "alice"
		}
		var seen []string
		seen = append(seen, browsers[u].get("/settings").body)
		for _, p := range []string{"/api/v1/settings/demo/prefs", "/api/v1/secrets/mcp", "/api/v1/tools", "/api/v1/status", "/api/v1/me"} {
			seen = append(seen, e.api("GET", p, tokens[u], "").body)
		}
		for _, body := range seen {
			if strings.Contains(body, canaries[other]) || strings.Contains(body, "token:u_"+other) || strings.Contains(body, "Only for "+other) ||
				strings.Contains(body, "connection refused ("+other+")") {
				t.Errorf("%s sees %s's data:\n%s", u, other, body)
			}
		}
		if !strings.Contains(seen[0], canaries[u]+"-nick") {
			t.Errorf("%s does not see their own nickname", u)
		}
	}
	if strings.Contains(e.api("GET", "/api/v1/tools", tokens["bob"], "").body, "notes/add_note") ||
		!strings.Contains(e.api("GET", "/api/v1/tools", tokens["alice"], "").body, "notes/add_note") {
		t.Error("one user's toggle changed the other's tools")
	}
}

func TestRevokedTokenRefusedAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	tok, info, _ := e.a.CreateToken(ctx, "alice", "laptop")
	if r := e.api("GET", "/api/v1/tools", tok, ""); r.code != 200 {
		t.Fatalf("before: %d", r.code)
	}
	// A web session opened with the same token.
	b := e.browser()
	b.get("/settings/login")
	b.postCSRF("/settings/login", url.Values{"token": {tok}})
	if r := b.get("/settings"); r.code != 200 {
		t.Fatalf("web before: %d", r.code)
	}
	if err := e.a.RevokeToken(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if r := e.api("GET", "/api/v1/tools", tok, ""); r.code != http.StatusUnauthorized ||
		!strings.Contains(r.hdr.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("API after revoke: %d %q", r.code, r.hdr.Get("WWW-Authenticate"))
	}
	if r := b.get("/settings"); r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/settings/login" {
		t.Errorf("web session after revoke: %d", r.code)
	}
	if r := b.postCSRF("/settings/mcp/servers", url.Values{}); r.code != http.StatusUnauthorized || !strings.Contains(r.body, "was not saved") {
		t.Errorf("post after revoke: %d", r.code)
	}
}

// TestLockoutSparesValidTokens: five bad tokens from an address lock it
// out for guesses (429 with Retry-After, on the API and the sign-in form),
// yet alice's valid token and a valid sign-in link still work from that
// very address. On main the valid token got 429 too.
func TestLockoutSparesValidTokens(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token("alice")
	for i := 1; i <= 5; i++ {
		r := e.api("GET", "/api/v1/tools", "ah_wrong"+strings.Repeat("x", i), "")
		want := http.StatusUnauthorized
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if r.code != want {
			t.Fatalf("attempt %d: %d, want %d", i, r.code, want)
		}
	}
	if r := e.api("GET", "/api/v1/tools", tok, ""); r.code != 200 {
		t.Errorf("valid token from the locked-out address: %d %s", r.code, r.body)
	}
	r := e.api("GET", "/api/v1/tools", "ah_wrong-again", "")
	if r.code != http.StatusTooManyRequests || r.hdr.Get("Retry-After") != "900" || !strings.Contains(r.body, "too many failed attempts") {
		t.Errorf("a guess while locked out: %d %q %s", r.code, r.hdr.Get("Retry-After"), r.body)
	}
	// The web sign-in shares the lockout for guesses, says so, and keeps
	// its form.
	b := e.browser()
	b.get("/settings/login")
	r = b.postCSRF("/settings/login", url.Values{"token": {"ah_nope"}})
	if r.code != http.StatusTooManyRequests || r.hdr.Get("Retry-After") == "" ||
		!strings.Contains(r.body, "refused for 15 minutes") || !strings.Contains(r.body, `name="token"`) {
		t.Errorf("a bad web sign-in while locked out: %d\n%s", r.code, r.body)
	}
	if r := b.postCSRF("/settings/login", url.Values{"token": {tok}}); r.code != http.StatusSeeOther {
		t.Errorf("web sign-in with the valid token while locked out: %d\n%s", r.code, r.body)
	}
	code, _ := e.a.CreateLoginLink(context.Background(), "bob", 0)
	b2 := e.browser()
	if r := b2.get("/settings/login?code=" + url.QueryEscape(code)); r.code != 200 || !strings.Contains(r.body, "Sign in as bob") {
		t.Errorf("a valid link while locked out: %d\n%s", r.code, r.body)
	}
	if r := b2.postCSRF("/settings/login", url.Values{"code": {code}}); r.code != http.StatusSeeOther {
		t.Errorf("redeeming a valid link while locked out: %d\n%s", r.code, r.body)
	}
	e.clock.Add(15 * time.Minute)
	// Failed web sign-ins count too.
	b3 := e.browser()
	b3.get("/settings/login")
	for i := 1; i <= 5; i++ {
		r = b3.postCSRF("/settings/login", url.Values{"token": {"ah_nope" + strings.Repeat("x", i)}})
	}
	if r.code != http.StatusTooManyRequests || !strings.Contains(r.body, "Too many failed sign-in attempts") {
		t.Errorf("fifth bad sign-in: %d\n%s", r.code, r.body)
	}
	if out := e.logs.String(); strings.Contains(out, "ah_wrong") || strings.Contains(out, "ah_nope") || strings.Contains(out, tok[3:]) ||
		strings.Contains(out, code[4:]) || !strings.Contains(out, "locked out") {
		t.Errorf("logs:\n%s", out)
	}
}

// TestCrossSiteLoginLink: a page of another site makes browsers follow
// login links (bogus ones, and a real one it got hold of). Such a GET is
// not looked at: it neither counts towards the lockout nor touches the
// link; it asks to continue with a POST that only this site's pages can
// send. Continuing shows whom the link signs in, then signs in. On main
// each bogus GET counted (five locked the address out) and a real one
// was looked up.
func TestCrossSiteLoginLink(t *testing.T) {
	e := newEnv(t, &Options{TrustedOrigins: []string{"https://agents.example.com"}})
	code, _ := e.a.CreateLoginLink(context.Background(), "alice", 0)
	bogus := "ahl_" + strings.Repeat("B", 43)
	foreign := map[string][2]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site", "cross-site"},
		"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site", "same-site"},
		"Origin of another site":    {"Origin", "https://evil.example"},
		"Referer of another site":   {"Referer", "https://evil.example/page"},
		"Origin null":               {"Origin", "null"},
	}
	b := e.browser()
	get := func(c string, hdr [2]string) resp {
		req, _ := http.NewRequest("GET", e.url("/settings/login?code="+url.QueryEscape(c)), nil)
		if hdr[0] != "" {
			req.Header.Set(hdr[0], hdr[1])
		}
		return b.do(req)
	}
	for name, hdr := range foreign {
		for range 3 {
			if r := get(bogus, hdr); r.code != 200 || !strings.Contains(r.body, "Nothing has been done with it yet") ||
				!strings.Contains(r.body, `name="check" value="1"`) {
				t.Fatalf("%s: a bogus link: %d\n%s", name, r.code, r.body)
			}
		}
		if r := get(code, hdr); r.code != 200 || strings.Contains(r.body, "alice") || !strings.Contains(r.body, `id="continue"`) {
			t.Errorf("%s: the real link: %d (want the continue page, without looking it up)\n%s", name, r.code, r.body)
		}
	}
	if a, c := e.a.Limiter().Tracked(); a != 0 || c != 0 {
		t.Errorf("cross-site GETs were counted: %d addresses, %d credentials", a, c)
	}
	if u, err := e.a.LoginLinkUser(context.Background(), code); err != nil || u != "alice" {
		t.Errorf("the link after cross-site GETs: %q, %v; want it unused", u, err)
	}
	// A cross-site POST of the continue form is refused, and not counted.
	for name, hdr := range map[string][2]string{"Sec-Fetch-Site": {"Sec-Fetch-Site", "cross-site"}, "Origin": {"Origin", "https://evil.example"}} {
		f := url.Values{"_csrf": {b.csrf}, "code": {bogus}, "check": {"1"}}
		req, _ := http.NewRequest("POST", e.url("/settings/login"), strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(hdr[0], hdr[1])
		if r := b.do(req); r.code != http.StatusForbidden {
			t.Errorf("a cross-site POST (%s): %d", name, r.code)
		}
	}
	if a, c := e.a.Limiter().Tracked(); a != 0 || c != 0 {
		t.Errorf("cross-site POSTs were counted: %d addresses, %d credentials", a, c)
	}
	// Continuing from the page: whom it signs in, then the sign-in.
	get(code, foreign["Sec-Fetch-Site cross-site"])
	r := b.postCSRF("/settings/login", url.Values{"code": {code}, "check": {"1"}})
	if r.code != 200 || !strings.Contains(r.body, "Sign in as alice") || strings.Contains(r.body, `name="check"`) {
		t.Fatalf("continue: %d\n%s", r.code, r.body)
	}
	if r := b.postCSRF("/settings/login", url.Values{"code": {code}}); r.code != http.StatusSeeOther {
		t.Fatalf("sign in: %d\n%s", r.code, r.body)
	}
	if r := b.get("/settings"); r.code != 200 || !strings.Contains(r.body, "<strong>alice</strong>") {
		t.Errorf("settings after the link: %d", r.code)
	}
	// Continuing with a bogus code counts, as a same-site GET of it does;
	// so do this site's own, and direct, navigations.
	b2 := e.browser()
	b2.get("/settings/login")
	if r := b2.postCSRF("/settings/login", url.Values{"code": {bogus}, "check": {"1"}}); r.code != http.StatusUnauthorized {
		t.Errorf("continuing with a bogus link: %d", r.code)
	}
	for _, hdr := range [][2]string{{"Sec-Fetch-Site", "same-origin"}, {"Sec-Fetch-Site", "none"},
		{"Origin", e.srv.URL}, {"Referer", e.srv.URL + "/settings"}, {"Referer", "https://agents.example.com/x"}, {}} {
		if r := get(bogus, hdr); r.code != http.StatusUnauthorized && r.code != http.StatusTooManyRequests {
			t.Errorf("a same-site GET (%v) of a bogus link: %d, want it checked (401, or 429 from the fifth)", hdr, r.code)
		}
	}
	if a, c := e.a.Limiter().Tracked(); a != 1 || c != 1 {
		t.Errorf("tracked %d addresses, %d credentials; want the loopback key and the bogus code", a, c)
	}
	if out := e.logs.String(); strings.Contains(out, code[4:]) || strings.Contains(out, bogus[4:]) {
		t.Errorf("a code is in the log:\n%s", out)
	}
}

// TestHostHeader: a request that reached the loopback listener naming
// another host (DNS rebinding) gets 403 on /settings and /api/v1 before
// any cookie or token is looked at; the operator's public host is
// allowed.
func TestHostHeader(t *testing.T) {
	e := newEnv(t, &Options{AllowedHosts: []string{"agents.example.com"}})
	tok := e.token("alice")
	opTok, _, _ := e.a.CreateOperatorToken(context.Background(), "ops")
	for _, p := range []string{"/settings", "/settings/login", "/api/v1/me", "/status.json"} {
		for host, want := range map[string]int{"evil.example": 403, "evil.example:80": 403, "agents.example.com.evil": 403,
			"agents.example.com": 0, "localhost:1": 0} {
			req, _ := http.NewRequest("GET", e.url(p), nil)
			req.Host = host
			if p == "/status.json" {
				req.Header.Set("Authorization", "Bearer "+opTok)
			} else {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if got := r.StatusCode; (want == 403) != (got == 403) {
				t.Errorf("GET %s with Host %s: %d, want %v", p, host, got, map[bool]string{true: "403", false: "not 403"}[want == 403])
			}
		}
	}
	if a, c := e.a.Limiter().Tracked(); a != 0 || c != 0 {
		t.Errorf("refused Hosts reached the lockout: %d, %d", a, c)
	}
	if out := e.logs.String(); !strings.Contains(out, "foreign Host header") || strings.Contains(out, tok[3:]) || strings.Contains(out, opTok[3:]) {
		t.Errorf("logs:\n%s", out)
	}
}

// TestStateBesideSwitch checks the settings page as it is sent (the
// browser test, TestMCPServersSectionInABrowser, sees it drawn): the state
// of each server whose switch names its status entry is inside that
// switch's .field and described by it, the quarantine's retry time a
// <time> in UTC that app.js shows in local time, Connect a button tied to
// a form outside the section's form; the status panel lists only the
// entries no switch shows; an extension that keeps no secret (hello) gets
// no "Stored secrets" form; the page's icon is served.
func TestStateBesideSwitch(t *testing.T) {
	e := newEnv(t, &Options{SignIn: func(http.ResponseWriter, *http.Request, string, string, string) (string, error) {
		return "https://as.example/authorize", nil
	}})
	b := e.signIn("alice")
	b.get("/settings") // activates alice: her status follows her switches
	e.h.SetStatus("alice",
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "notes", State: ext.StateNeedsSignIn, Reason: "notes asks you to sign in"},
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "search", State: "quarantined", Reason: "connection refused",
			NextRetry: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "team", State: "connected", Tools: 1},
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "u_mine", State: "connected", Tools: 2})
	page := b.get("/settings").body
	field := func(name string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<div class="field field-toggle">\s*(?:<p class="warning"[^\n]*\n)?<input type="checkbox" id="(f\d+)" name="` + name + `"[^>]*>.*?\n</div>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no switch %s:\n%s", name, page)
		}
		return m[0]
	}
	notes, search := field("notes"), field("search")
	for _, want := range []string{`data-state="needs sign-in"`, "notes asks you to sign in", `<button type="submit" form="s-mcp-servers-connect-1">Connect`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes's switch lacks %q:\n%s", want, notes)
		}
	}
	if !strings.Contains(notes, `aria-describedby="f1-status"`) || !strings.Contains(notes, `id="f1-status"`) {
		t.Errorf("notes's state does not describe its switch:\n%s", notes)
	}
	if !strings.Contains(page, `<form id="s-mcp-servers-connect-1" method="post" action="/settings/connect/mcp/notes" hidden>`) {
		t.Error("no Connect form for notes")
	}
	for _, want := range []string{`data-state="quarantined"`, "connection refused", `<time datetime="2030-01-02T03:04:05Z">2030-01-02 03:04:05 UTC</time>`} {
		if !strings.Contains(search, want) {
			t.Errorf("search's switch lacks %q:\n%s", want, search)
		}
	}
	if strings.Contains(search, "Connect") || strings.Contains(field("team"), "data-state") {
		t.Error("a Connect for a quarantined server, or a state beside a switch that names none")
	}
	_, panel, _ := strings.Cut(page, `<section id="status"`)
	panel, _, _ = strings.Cut(panel, "</section>")
	if !strings.Contains(panel, `<th scope="row">team</th>`) || !strings.Contains(panel, `<th scope="row">u_mine</th>`) ||
		strings.Contains(panel, `<th scope="row">notes</th>`) || strings.Contains(panel, `<th scope="row">search</th>`) {
		t.Errorf("the status panel lists the entries shown beside switches, or lacks the others:\n%s", panel)
	}
	if strings.Contains(page, "Stored secrets (hello)") || !strings.Contains(page, "Stored secrets (mcp)") || !strings.Contains(page, "Stored secrets (demo)") {
		t.Error(`"Stored secrets" forms: want mcp's and demo's (they have secret fields), not hello's`)
	}
	if r := b.get("/static/favicon.svg"); r.code != http.StatusOK || r.hdr.Get("Content-Type") != "image/svg+xml" || !strings.Contains(page, `rel="icon" href="/static/favicon.svg"`) {
		t.Errorf("the page's icon: %d %q", r.code, r.hdr.Get("Content-Type"))
	}
}

func TestAPI(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token("alice")
	opTok, _, _ := e.a.CreateOperatorToken(context.Background(), "ops")

	r := e.api("GET", "/api/v1/sections", tok, "")
	var secs []api.Section
	if err := json.Unmarshal([]byte(r.body), &secs); err != nil || len(secs) != 4 {
		t.Fatalf("sections: %v %s", err, r.body)
	}
	r = e.api("GET", "/api/v1/settings/demo/prefs", tok, "")
	if r.code != 200 || !strings.Contains(r.body, `"values":{}`) || !strings.Contains(r.body, `"defaults":{"mode":"fast","retries":3}`) {
		t.Errorf("GET settings: %d %s", r.code, r.body)
	}
	r = e.api("PUT", "/api/v1/settings/demo/prefs", tok, `{"nickname":"al","advanced":{"verbose":true}}`)
	if r.code != 200 || !strings.Contains(r.body, `"values":{"advanced":{"verbose":true},"nickname":"al"}`) {
		t.Errorf("PUT settings: %d %s", r.code, r.body)
	}
	r = e.api("PUT", "/api/v1/settings/demo/prefs", tok, `{"retries":"many","bogus":1}`)
	var ae apiError
	if err := json.Unmarshal([]byte(r.body), &ae); err != nil || r.code != 400 || len(ae.Fields) != 2 {
		t.Errorf("bad values: %d %s", r.code, r.body)
	} else if ae.Fields[1].Field != "retries" || !strings.Contains(ae.Fields[1].Message, "must be a number") {
		t.Errorf("fields = %+v", ae.Fields)
	}
	if r := e.api("PUT", "/api/v1/settings/demo/prefs", tok, `not json`); r.code != 400 {
		t.Errorf("not JSON: %d", r.code)
	}
	if r := e.api("PUT", "/api/v1/settings/mcp/user-servers", tok, `{"servers":"{oops"}`); r.code != 400 ||
		!strings.Contains(r.body, `"field":"servers","message":"must be valid JSON`) {
		t.Errorf("invalid JSON in a longtext: %d %s", r.code, r.body)
	}
	for name, c := range map[string]struct {
		method, path, token, body string
		code                      int
	}{
		"no token":          {"GET", "/api/v1/tools", "", "", 401},
		"operator token":    {"GET", "/api/v1/tools", opTok, "", 403},
		"system section":    {"GET", "/api/v1/settings/demo/admin", tok, "", 404},
		"unknown section":   {"GET", "/api/v1/settings/demo/nope", tok, "", 404},
		"unknown ext":       {"PUT", "/api/v1/secrets/nope/x", tok, `{"value":"v"}`, 404},
		"empty secret":      {"PUT", "/api/v1/secrets/mcp/x", tok, `{"value":""}`, 400},
		"secret unknown fi": {"PUT", "/api/v1/secrets/mcp/x", tok, `{"value":"v","x":1}`, 400},
		"delete missing":    {"DELETE", "/api/v1/secrets/mcp/x", tok, "", 404},
		"unknown route":     {"GET", "/api/v1/nope", tok, "", 404},
		"wrong method":      {"POST", "/api/v1/tools", tok, "", 405},
		"status.json user":  {"GET", "/status.json", tok, "", 403},
		"status.json none":  {"GET", "/status.json", "", "", 401},
	} {
		r := e.api(c.method, c.path, c.token, c.body)
		if r.code != c.code {
			t.Errorf("%s: %d, want %d: %s", name, r.code, c.code, r.body)
		}
		if !strings.HasPrefix(r.hdr.Get("Content-Type"), "application/json") || !strings.Contains(r.body, `"error":`) {
			t.Errorf("%s: not a JSON error: %q %s", name, r.hdr.Get("Content-Type"), r.body)
		}
		if c.code == 401 && !strings.HasPrefix(r.hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate = %q", name, r.hdr.Get("WWW-Authenticate"))
		}
	}
	// Other Authorization schemes are refused as invalid.
	req, _ := http.NewRequest("GET", e.url("/api/v1/tools"), nil)
	req.Header.Set("Authorization", "Basic "+tok)
	if r, _ := http.DefaultClient.Do(req); r.StatusCode != 401 {
		t.Errorf("Basic scheme: %d", r.StatusCode)
	} else {
		r.Body.Close()
	}
	r = e.api("PUT", "/api/v1/secrets/mcp/token:notes", tok, `{"value":"v1"}`)
	if r.code != 204 {
		t.Errorf("PUT secret: %d", r.code)
	}
	if r := e.api("GET", "/api/v1/secrets/mcp", tok, ""); r.body != `{"names":["token:notes"]}`+"\n" {
		t.Errorf("names: %s", r.body)
	}
	if r := e.api("DELETE", "/api/v1/secrets/mcp/token:notes", tok, ""); r.code != 204 {
		t.Errorf("DELETE secret: %d", r.code)
	}
	// Tools in their one JSON shape, every field kept (output schema and
	// annotations too).
	r = e.api("GET", "/api/v1/tools", tok, "")
	var tools []api.Tool
	if err := json.Unmarshal([]byte(r.body), &tools); err != nil {
		t.Fatalf("tools: %v: %s", err, r.body)
	}
	want := map[string]api.Tool{
		"demo/hidden_gem": {Extension: "demo", Tool: ext.Tool{Name: "demo/hidden_gem", Description: "Only for alice.",
			InputSchema: json.RawMessage(`{"type":"object"}`), Exposure: ext.ExposureDeferred, Replay: ext.ReplayUnsafe}},
		"team/ask": {Extension: "mcp", Tool: ext.Tool{Name: "team/ask", Description: "MCP tool ask on server team.",
			InputSchema:  json.RawMessage(`{"type":"object"}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}}}`),
			Annotations:  json.RawMessage(`{"readOnlyHint":true}`), Exposure: ext.ExposureDirect, Replay: ext.ReplayUnsafe}},
	}
	for _, tl := range tools {
		if w, ok := want[tl.Name]; ok {
			if diff := cmp.Diff(w, tl); diff != "" {
				t.Errorf("tool %s (-want +got):\n%s", tl.Name, diff)
			}
			delete(want, tl.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tools missing %v: %s", want, r.body)
	}
	r = e.api("GET", "/api/v1/status", tok, "")
	if !strings.Contains(r.body, `"name":"search","state":"retiring"`) {
		t.Errorf("status: %s", r.body)
	}
	if r := e.api("GET", "/api/v1/me", tok, ""); !strings.Contains(r.body, `"user":"alice"`) {
		t.Errorf("me: %s", r.body)
	}
}

func TestBodyLimit(t *testing.T) {
	e := newEnv(t, &Options{MaxBodyBytes: 4096})
	tok := e.token("alice")
	big := `{"nickname":"` + strings.Repeat("x", 5000) + `"}`
	if r := e.api("PUT", "/api/v1/settings/demo/prefs", tok, big); r.code != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, `"error"`) {
		t.Errorf("API: %d %s", r.code, r.body)
	}
	b := e.signIn("alice")
	if r := b.postCSRF("/settings/demo/prefs", url.Values{"nickname": {strings.Repeat("x", 5000)}}); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("form: %d", r.code)
	}
	// Without a Content-Length (chunked), the limit still holds.
	req, _ := http.NewRequest("PUT", e.url("/api/v1/settings/demo/prefs"), io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.ContentLength = -1
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	tok := e.token("alice")
	check := func(name string, h http.Header) {
		t.Helper()
		for k, want := range map[string]string{
			"X-Frame-Options":        "DENY",
			"X-Content-Type-Options": "nosniff",
			"Referrer-Policy":        "no-referrer",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("%s: %s = %q, want %q", name, k, got, want)
			}
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", name, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP allows inline code", name)
		}
	}
	for _, p := range []string{"/settings", "/settings/login", "/status", "/nope", "/static/app.js"} {
		r := b.get(p)
		check(p, r.hdr)
		if p == "/settings" && r.hdr.Get("Cache-Control") != "no-store" {
			t.Errorf("/settings is cacheable: %q", r.hdr.Get("Cache-Control"))
		}
	}
	check("api", e.api("GET", "/api/v1/tools", tok, "").hdr)
	r := b.get("/static/app.js")
	if r.code != 200 || r.hdr.Get("Content-Type") != "text/javascript; charset=utf-8" || !strings.Contains(r.body, "JSON.parse") {
		t.Errorf("app.js: %d %q", r.code, r.hdr.Get("Content-Type"))
	}
	if r := b.get("/static/../web.go"); r.code == 200 {
		t.Error("static serves outside its folder")
	}
	if r := b.get("/static/nope.js"); r.code != 404 {
		t.Errorf("missing static file: %d", r.code)
	}
	// Over TLS: Secure, __Host- cookie and HSTS.
	s := newEnv(t, &Options{Secure: true})
	bb := s.browser()
	bb.get("/settings/login")
	r = bb.postCSRF("/settings/login", url.Values{"token": {s.token("alice")}})
	if c := strings.Join(r.hdr.Values("Set-Cookie"), "\n"); !strings.Contains(c, "__Host-agenthost_session=") || !strings.Contains(c, "Secure") {
		t.Errorf("secure cookie: %s", c)
	}
	if r.hdr.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS over TLS")
	}
}

func TestStatusPage(t *testing.T) {
	e := newEnv(t, nil)
	opTok, _, _ := e.a.CreateOperatorToken(context.Background(), "ops")
	// Bearer.
	r := e.api("GET", "/status.json", opTok, "")
	var got statusBody
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.code != 200 {
		t.Fatalf("status.json: %d %s", r.code, r.body)
	}
	if got.Version != "v9.9.9-test" || got.MCPSessions != 7 || got.ActiveUsers != 2 || got.ServiceProcesses != 3 ||
		len(got.Extensions) != 2 || got.Extensions[1].PID != 4242 || got.SecretsBackend != "memory" {
		t.Errorf("status = %+v", got)
	}
	req, _ := http.NewRequest("GET", e.url("/status"), nil)
	req.Header.Set("Authorization", "Bearer "+opTok)
	b := e.browser()
	if r := b.do(req); r.code != 200 || !strings.Contains(r.body, `<dd id="mcp-sessions">7</dd>`) {
		t.Errorf("status with bearer: %d", r.code)
	}
	// An operator's web session.
	b.get("/settings/login")
	r = b.postCSRF("/settings/login", url.Values{"token": {opTok}})
	if r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/status" {
		t.Fatalf("operator sign-in: %d %s", r.code, r.hdr.Get("Location"))
	}
	r = b.get("/status")
	for _, want := range []string{`<dd id="version">v9.9.9-test</dd>`, `<dd id="active-users">2</dd>`, `<dd id="processes">3</dd>`,
		`<dd id="secrets-backend">memory</dd>`, "<th scope=\"row\">mcp</th>", "4242", "in process"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	if page := b.get("/settings").body; !strings.Contains(page, "signed in as the operator") {
		t.Errorf("operator's /settings:\n%s", page)
	}
	// A user is refused, signed out asks for sign-in.
	if r := e.signIn("alice").get("/status"); r.code != http.StatusForbidden {
		t.Errorf("user on /status: %d", r.code)
	}
	if r := e.browser().get("/status"); r.code != http.StatusUnauthorized || !strings.Contains(r.body, "operator token") {
		t.Errorf("signed out /status: %d", r.code)
	}
}

func TestBasePath(t *testing.T) {
	e := newEnv(t, &Options{BasePath: "/ah/"})
	b := e.browser()
	if r := b.get("/settings"); r.code != http.StatusSeeOther || r.hdr.Get("Location") != "/ah/settings/login" {
		t.Fatalf("redirect: %d %s", r.code, r.hdr.Get("Location"))
	}
	b = e.signIn("alice")
	page := b.get("/settings").body
	if !strings.Contains(page, `action="/ah/settings/mcp/servers"`) || !strings.Contains(page, `src="/ah/static/app.js"`) {
		t.Errorf("links lack the base path:\n%s", page)
	}
	if r := b.postCSRF("/settings/mcp/servers", url.Values{}); r.code != http.StatusSeeOther || !strings.HasPrefix(r.hdr.Get("Location"), "/ah/settings?saved=") {
		t.Errorf("save: %d %s", r.code, r.hdr.Get("Location"))
	}
	if r := e.api("GET", "/api/v1/tools", e.token("alice"), ""); r.code != 200 {
		t.Errorf("API under the base path: %d", r.code)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/settings", nil)
	if r := b.do(req); r.code != 404 {
		t.Errorf("outside the base path: %d", r.code)
	}
}

func TestTokenAdmin(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	ta := &TokenAdmin{Store: e.a, BaseURL: func() string { return e.srv.URL + "/" }}
	plain, info, err := ta.CreateToken(ctx, "alice", "laptop", false)
	if err != nil || info.User != "alice" || !strings.HasPrefix(plain, auth.TokenPrefix) {
		t.Fatalf("CreateToken = %q %+v %v", plain, info, err)
	}
	if _, _, err := ta.CreateToken(ctx, "alice", "x", true); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("operator token with a user: %v", err)
	}
	if _, _, err := ta.CreateToken(ctx, "-bad", "x", false); !errors.Is(err, ext.ErrInvalidArgument) || strings.Contains(err.Error(), "\n") {
		t.Errorf("bad user: %v", err)
	}
	_, op, _ := ta.CreateToken(ctx, "", "ops", true)
	if !op.Operator {
		t.Errorf("operator token = %+v", op)
	}
	if l, _ := ta.ListTokens(ctx, ""); len(l) != 2 {
		t.Errorf("ListTokens = %+v", l)
	}
	if err := ta.RevokeToken(ctx, "tok_nope"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("revoke unknown: %v", err)
	}
	link, err := ta.CreateLoginLink(ctx, "alice")
	if err != nil || !strings.HasPrefix(link, e.srv.URL+"/settings/login?code=ahl_") {
		t.Fatalf("link = %q, %v", link, err)
	}
	b := e.browser()
	r := b.get(strings.TrimPrefix(link, e.srv.URL))
	if r.code != 200 || !strings.Contains(r.body, "Sign in as alice") {
		t.Errorf("the link's page: %d", r.code)
	}
}

func TestUserTokens(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	r := b.postCSRF("/settings/_tokens", url.Values{"name": {"my agent"}})
	m := regexp.MustCompile(`id="new-token" value="(ah_[A-Za-z0-9_-]{43})" readonly`).FindStringSubmatch(r.body)
	if r.code != 200 || m == nil || !strings.Contains(r.body, "shown only this once") {
		t.Fatalf("create: %d\n%s", r.code, r.body)
	}
	tok := m[1]
	if r := e.api("GET", "/api/v1/me", tok, ""); !strings.Contains(r.body, `"user":"alice"`) {
		t.Fatalf("the new token does not work: %s", r.body)
	}
	page := b.get("/settings").body
	if strings.Contains(page, tok) || !strings.Contains(page, "<th scope=\"row\">my agent</th>") {
		t.Errorf("the token list shows the token again, or lacks it")
	}
	if r := b.postCSRF("/settings/_tokens", url.Values{"name": {"bad\nname"}}); r.code != 400 || !strings.Contains(r.body, `id="token-name-error"`) {
		t.Errorf("bad name: %d", r.code)
	}
	// Another user's token cannot be revoked from here.
	_, bobTok, _ := e.a.CreateToken(context.Background(), "bob", "phone")
	if r := b.postCSRF("/settings/_tokens/revoke", url.Values{"id": {bobTok.ID}}); r.code != 404 {
		t.Errorf("revoking bob's token: %d", r.code)
	}
	if strings.Contains(b.get("/settings").body, bobTok.ID) {
		t.Error("alice sees bob's token")
	}
	toks, _ := e.a.ListTokens(context.Background(), "alice")
	var agentID, sessionID string
	for _, tk := range toks {
		if tk.Name == "my agent" {
			agentID = tk.ID
		} else {
			sessionID = tk.ID
		}
	}
	if r := b.postCSRF("/settings/_tokens/revoke", url.Values{"id": {agentID}}); r.code != http.StatusSeeOther {
		t.Errorf("revoke: %d", r.code)
	}
	if r := e.api("GET", "/api/v1/me", tok, ""); r.code != 401 {
		t.Errorf("revoked token: %d", r.code)
	}
	if !strings.Contains(b.get("/settings?token=revoked").body, "The token was revoked.") {
		t.Error("no notice")
	}
	// Revoking the token this session came from signs it out.
	if r := b.postCSRF("/settings/_tokens/revoke", url.Values{"id": {sessionID}}); r.code != http.StatusSeeOther ||
		!strings.Contains(r.hdr.Get("Location"), "signed-out") {
		t.Errorf("revoke own session's token: %d %s", r.code, r.hdr.Get("Location"))
	}
	if r := b.get("/settings"); r.code != http.StatusSeeOther {
		t.Errorf("still signed in: %d", r.code)
	}

	// The same through the API.
	apiTok := e.token("carol")
	r = e.api("POST", "/api/v1/tokens", apiTok, `{"name":"ci"}`)
	var created struct {
		Token, ID, Name, User string
	}
	if err := json.Unmarshal([]byte(r.body), &created); err != nil || r.code != 201 || !strings.HasPrefix(created.Token, "ah_") || created.User != "carol" {
		t.Fatalf("POST tokens: %d %s", r.code, r.body)
	}
	r = e.api("GET", "/api/v1/tokens", apiTok, "")
	if r.code != 200 || strings.Contains(r.body, created.Token) || strings.Contains(r.body, "ah_") || !strings.Contains(r.body, created.ID) || strings.Contains(r.body, bobTok.ID) {
		t.Errorf("GET tokens: %s", r.body)
	}
	if r := e.api("DELETE", "/api/v1/tokens/"+bobTok.ID, apiTok, ""); r.code != 404 {
		t.Errorf("DELETE bob's token: %d", r.code)
	}
	if r := e.api("POST", "/api/v1/tokens", apiTok, `{"name":""}`); r.code != 400 {
		t.Errorf("empty name: %d", r.code)
	}
	if r := e.api("DELETE", "/api/v1/tokens/"+created.ID, apiTok, ""); r.code != 204 {
		t.Errorf("DELETE: %d", r.code)
	}
	if r := e.api("GET", "/api/v1/me", created.Token, ""); r.code != 401 {
		t.Errorf("deleted token still works: %d", r.code)
	}
}

// TestScopedUserTokens: the settings page and the JSON API make scoped,
// expiring tokens and list them with their scope and expiry; a bad glob
// or tools without servers is the field's error; the scoped token itself
// opens neither the page's API nor a sign-in.
func TestScopedUserTokens(t *testing.T) {
	e := newEnv(t, nil)
	b := e.signIn("alice")
	r := b.postCSRF("/settings/_tokens", url.Values{"name": {"notes agent"}, "servers": {"notes, files"}, "tools": {"notes/list_*"}, "expires": {"1h"}})
	m := regexp.MustCompile(`id="new-token" value="(ah_[A-Za-z0-9_-]{43})" readonly`).FindStringSubmatch(r.body)
	if r.code != 200 || m == nil {
		t.Fatalf("create: %d\n%s", r.code, r.body)
	}
	if !strings.Contains(r.body, "MCP only: servers files,notes; tools notes/list_*") {
		t.Errorf("the list lacks the token's scope")
	}
	toks, _ := e.a.ListTokens(context.Background(), "alice")
	var scoped auth.Token
	for _, tk := range toks {
		if tk.Name == "notes agent" {
			scoped = tk
		}
	}
	if scoped.Scope == nil || time.Until(scoped.Expires) < 59*time.Minute || time.Until(scoped.Expires) > time.Hour {
		t.Errorf("stored token = %+v, want scoped, expiring in 1h", scoped)
	}
	if r := e.api("GET", "/api/v1/me", m[1], ""); r.code != 401 || !strings.Contains(r.body, "opens /mcp only") {
		t.Errorf("the scoped token on the JSON API: %d %s, want 401 saying why", r.code, r.body)
	}
	for field, form := range map[string]url.Values{
		"servers": {"name": {"x"}, "servers": {"notes"}, "tools": {"notes/["}},
		"tools":   {"name": {"x"}, "tools": {"notes/*"}},
		"expires": {"name": {"x"}, "expires": {"5s"}},
	} {
		if r := b.postCSRF("/settings/_tokens", form); r.code != 400 || !strings.Contains(r.body, `id="token-`+field+`-error"`) {
			t.Errorf("%v: %d, want the %s field's error", form, r.code, field)
		}
	}

	apiTok := e.token("carol")
	r = e.api("POST", "/api/v1/tokens", apiTok, `{"name":"ci","scope":{"servers":["notes"],"tools":["notes/*"]},"expires":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`"}`)
	if r.code != 201 || !strings.Contains(r.body, `"scope":{"servers":["notes"],"tools":["notes/*"]}`) || !strings.Contains(r.body, `"expires":`) {
		t.Fatalf("POST a scoped token: %d %s", r.code, r.body)
	}
	if r := e.api("GET", "/api/v1/tokens", apiTok, ""); !strings.Contains(r.body, `"servers":["notes"]`) {
		t.Errorf("GET tokens lacks the scope: %s", r.body)
	}
	if r := e.api("POST", "/api/v1/tokens", apiTok, `{"name":"ci","scope":{"servers":[]}}`); r.code != 400 || !strings.Contains(r.body, `"scope"`) {
		t.Errorf("a scope without servers: %d %s", r.code, r.body)
	}
}

// TestConcurrentUsers runs several users' browsers and API clients at once
// (under -race in CI): each sees only their own values.
func TestConcurrentUsers(t *testing.T) {
	e := newEnv(t, nil)
	var wg sync.WaitGroup
	for i := range 6 {
		user := "user" + string(rune('a'+i))
		b := e.signIn(user)
		tok := e.token(user)
		wg.Go(func() {
			for j := range 5 {
				nick := user + "-nick-" + string(rune('0'+j))
				if r := b.postCSRF("/settings/demo/prefs", url.Values{"nickname": {nick}}); r.code != http.StatusSeeOther {
					t.Errorf("%s save: %d", user, r.code)
					return
				}
				r := e.api("GET", "/api/v1/settings/demo/prefs", tok, "")
				if !strings.Contains(r.body, `"nickname":"`+nick+`"`) {
					t.Errorf("%s reads %s", user, r.body)
				}
				if strings.Count(r.body, "-nick-") != 1 {
					t.Errorf("%s sees others: %s", user, r.body)
				}
			}
		})
	}
	wg.Wait()
}

// TestMCPURL: the settings page shows the configured MCP URL, else /mcp at
// the address the request came to (a server on port 0 knows its URL only
// once it listens).
func TestMCPURL(t *testing.T) {
	for name, c := range map[string]struct {
		opts Options
		tls  bool
		want string
	}{
		"configured":  {Options{MCPURL: "https://agents.example.com/mcp"}, false, "https://agents.example.com/mcp"},
		"request":     {Options{}, false, "http://127.0.0.1:41234/mcp"},
		"request tls": {Options{}, true, "https://127.0.0.1:41234/mcp"},
		"secure":      {Options{Secure: true}, false, "https://127.0.0.1:41234/mcp"},
	} {
		t.Run(name, func(t *testing.T) {
			target := "http://127.0.0.1:41234/settings"
			if c.tls {
				target = "https://127.0.0.1:41234/settings" // sets r.TLS
			}
			r := httptest.NewRequest("GET", target, nil)
			if got := (&server{opts: c.opts}).mcpURL(r); got != c.want {
				t.Errorf("mcpURL = %q, want %q", got, c.want)
			}
		})
	}
}

// TestConnect checks the settings page's Connect: a server that needs a
// sign-in gets a button; the link of its status line asks before it
// starts; the button (with the session's CSRF token) starts the sign-in
// for the session's user alone and sends the browser to the provider.
func TestConnect(t *testing.T) {
	type call struct{ user, ext, name string }
	var calls []call
	e := newEnv(t, &Options{SignIn: func(w http.ResponseWriter, r *http.Request, user, extName, name string) (string, error) {
		calls = append(calls, call{user, extName, name})
		if name == "broken" {
			return "", fmt.Errorf(`extension "mcp": starting a sign-in of %s to "broken": MCP server "broken" does not ask for a sign-in: %w`, user, ext.ErrInvalidArgument)
		}
		if name == "js" {
			return "javascript:alert(1)", nil
		}
		return "https://as.example/authorize?state=s1", nil
	}})
	b := e.signIn("alice")
	e.h.SetStatus("alice",
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "o", State: ext.StateNeedsSignIn, Reason: "MCP server \"o\" asks you to sign in"},
		api.StatusEntry{Extension: "mcp", User: "alice", Name: "notes", State: "connected", Tools: 2})
	page := b.get("/settings")
	if !strings.Contains(page.body, `action="/settings/connect/mcp/o"`) || strings.Contains(page.body, `action="/settings/connect/mcp/notes"`) {
		t.Errorf("the status panel's Connect buttons:\n%s", page.body)
	}
	if r := b.get("/settings/connect/mcp/o"); r.code != http.StatusOK || !strings.Contains(r.body, "Connect o") || len(calls) != 0 {
		t.Errorf("the connect link: %d, %d sign-ins started\n%s", r.code, len(calls), r.body)
	}
	if r := b.post("/settings/connect/mcp/o", url.Values{}); r.code != http.StatusForbidden || len(calls) != 0 {
		t.Errorf("Connect without the CSRF token: %d, %d sign-ins", r.code, len(calls))
	}
	// Not a redirect, which the page's form-action would block: a page of
	// ours whose link (followed by app.js) goes on to the provider.
	r := b.postCSRF("/settings/connect/mcp/o", nil)
	if r.code != http.StatusOK || r.hdr.Get("Location") != "" ||
		!strings.Contains(r.body, `data-follow href="https://as.example/authorize?state=s1"`) ||
		!strings.Contains(r.body, "Continue to sign in at as.example") {
		t.Errorf("Connect: %d %q\n%s", r.code, r.hdr.Get("Location"), r.body)
	}
	if len(calls) != 1 || calls[0] != (call{"alice", "mcp", "o"}) {
		t.Errorf("sign-ins started: %+v", calls)
	}
	b.get("/settings")
	if r := b.postCSRF("/settings/connect/mcp/broken", nil); r.code != http.StatusBadRequest ||
		!strings.Contains(r.body, `MCP server &#34;broken&#34; does not ask for a sign-in`) || strings.Contains(r.body, "invalid argument") {
		t.Errorf("a sign-in that cannot start: %d\n%s", r.code, r.body)
	}
	b.get("/settings")
	if r := b.postCSRF("/settings/connect/mcp/js", nil); r.code != http.StatusBadGateway || strings.Contains(r.body, "javascript:") {
		t.Errorf("a sign-in whose address is no web address: %d\n%s", r.code, r.body)
	}
	b.get("/settings")
	if r := b.postCSRF("/settings/connect/nosuch/o", nil); r.code != http.StatusNotFound {
		t.Errorf("an unknown extension: %d", r.code)
	}
	// The link followed from another site (an agent's web app) arrives
	// without the SameSite=Strict session cookie: a page of this site
	// leads to the same URL, which the cookie then comes with; a signed-out
	// browser gets there to the sign-in page.
	crossSite := func(b *browser) resp {
		req, _ := http.NewRequest("GET", e.url("/settings/connect/mcp/o"), nil)
		for k, v := range map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"} {
			req.Header.Set(k, v)
		}
		return b.do(req)
	}
	out, started := e.browser(), len(calls)
	if r := crossSite(out); r.code != http.StatusOK || !strings.Contains(r.body, `id="continue" data-follow href=""`) || len(calls) != started {
		t.Errorf("the link from another site: %d, %d sign-ins started\n%s", r.code, len(calls)-started, r.body)
	}
	if r := out.get("/settings/connect/mcp/o"); r.code != http.StatusSeeOther || !strings.HasSuffix(r.hdr.Get("Location"), "/settings/login") {
		t.Errorf("the same link from this site, signed out: %d %q", r.code, r.hdr.Get("Location"))
	}
	// Without sign-ins, no buttons and no page.
	e2 := newEnv(t, nil)
	b2 := e2.signIn("alice")
	e2.h.SetStatus("alice", api.StatusEntry{Extension: "mcp", User: "alice", Name: "o", State: ext.StateNeedsSignIn})
	if p := b2.get("/settings"); strings.Contains(p.body, "/settings/connect/") {
		t.Error("a Connect button without sign-ins")
	}
	if r := b2.get("/settings/connect/mcp/o"); r.code != http.StatusNotFound {
		t.Errorf("the connect page without sign-ins: %d", r.code)
	}
}
