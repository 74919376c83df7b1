package e2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// provider is the example OAuth server (examples/servers/oauth): an MCP
// endpoint behind its own authorization server, with test counters.
type provider struct {
	t    *testing.T
	base string
}

func startProvider(t *testing.T, bin string, args ...string) *provider {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-admin"}, args...)...)
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
	return &provider{t: t, base: strings.TrimSuffix(u, "/mcp")}
}

func (p *provider) get(path string, v any) {
	p.t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		p.t.Fatal(err)
	}
}

func (p *provider) refreshes() int {
	var st struct{ Refreshes, RefreshReuses int }
	p.get("/admin/stats", &st)
	if st.RefreshReuses != 0 {
		p.t.Errorf("a rotated refresh token was used again (%d times)", st.RefreshReuses)
	}
	return st.Refreshes
}

// signInAt plays the person at the provider: it opens the authorization
// URL, signs in as account login, allows, and returns where the provider
// sends the browser back (the host's callback, with the code).
func (p *provider) signInAt(authURL, login string) string {
	p.t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(authURL)
	if err != nil || resp.StatusCode != http.StatusOK {
		p.t.Fatalf("the provider's sign-in page: %v %v", resp, err)
	}
	resp.Body.Close()
	u, _ := url.Parse(authURL)
	form := u.Query()
	form.Set("login", login)
	form.Set("decision", "allow")
	resp, err = hc.PostForm(p.base+"/authorize", form)
	if err != nil || resp.StatusCode != http.StatusFound {
		p.t.Fatalf("allowing at the provider: %v %v", resp, err)
	}
	resp.Body.Close()
	return resp.Header.Get("Location")
}

// browse is a browser: cookies, no automatic redirects.
func browse() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func fetch(t *testing.T, hc *http.Client, method, u string, form url.Values) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

var csrfField = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	return m[1]
}

var followLink = regexp.MustCompile(`data-follow href="([^"]+)"`)

// connectAt clicks a Connect button (the form at action, on page, whose
// CSRF token it sends) and returns where the answer's link goes on: the
// provider's authorization URL, which must be under provider.
func connectAt(t *testing.T, hc *http.Client, action, page, provider string) string {
	t.Helper()
	c, _, answer := fetch(t, hc, "POST", action, url.Values{"_csrf": {csrfOf(t, page)}})
	m := followLink.FindStringSubmatch(answer)
	if c != http.StatusOK || m == nil || !strings.HasPrefix(html.UnescapeString(m[1]), provider+"/authorize?") {
		t.Fatalf("Connect at %s: %d, want a page leading to %s/authorize\n%s", action, c, provider, answer)
	}
	return html.UnescapeString(m[1])
}

// settingsBrowser is a browser signed in to the settings page as user,
// with a one-time link.
func (e *env) settingsBrowser(user string) *http.Client {
	e.t.Helper()
	hc := browse()
	link := strings.TrimSpace(e.must("", "login-link", "--user", user))
	_, _, page := fetch(e.t, hc, "GET", link, nil)
	lk, _ := url.Parse(link)
	if c, _, p := fetch(e.t, hc, "POST", e.url+"/settings/login", url.Values{"_csrf": {csrfOf(e.t, page)}, "code": {lk.Query().Get("code")}}); c != http.StatusSeeOther {
		e.t.Fatalf("%s's sign-in to the settings page: %d\n%s", user, c, p)
	}
	return hc
}

func canaryLogin(who string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "CANARY-" + who + "-" + hex.EncodeToString(b)
}

// TestOAuthEndToEnd runs the real agenthost and agenthost-ext-mcp binaries
// against a remote MCP server behind a real OAuth authorization server:
// before signing in, status and `agenthost tools` say "needs sign-in" with
// the link and the command (tools exits 1); alice signs in with
// `agenthost auth login` and bob with the settings page's Connect, each
// through the provider's sign-in and back to the host's /oauth/callback;
// their tools appear and each call carries the caller's own grant; twenty
// calls at the access token's expiry cause exactly one refresh; a grant
// revoked at the provider makes the next call fail with the link, the
// server show "needs sign-in" and tools exit 1 again; no token issued
// appears in the host's logs, status or API answers.
func TestOAuthEndToEnd(t *testing.T) {
	b := build(t)
	as := startProvider(t, b.oauth, "-access-ttl", "3s")
	port := freePort(t)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", port)})
	e.startServe("--log-level", "debug") // every log line is scanned for tokens
	host := e.url
	link := host + "/settings/connect/mcp/o"

	out := e.must("", "status", "--user", "alice")
	if !strings.Contains(out, "needs sign-in") || !strings.Contains(out, link) || !strings.Contains(out, "agenthost auth login --user alice o") {
		t.Errorf("status before signing in:\n%s", out)
	}
	stdout, stderr, code := e.run("", "tools", "--user", "alice")
	if code != 1 || !strings.Contains(stderr, "mcp/o needs sign-in") || !strings.Contains(stderr, link) {
		t.Errorf("tools before signing in: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// Alice signs in with the CLI, which waits for the browser.
	aliceLogin := canaryLogin("alice")
	cli := exec.Command(e.bin.agenthost, "--config", e.cfg, "auth", "login", "--user", "alice", "o")
	cliOut, _ := cli.StdoutPipe()
	var cliErr strings.Builder
	cli.Stderr = &cliErr
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(cliOut)
	var authURL string
	for authURL == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("auth login printed no URL: %v\n%s", err, cliErr.String())
		}
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "http") {
			authURL = s
		}
	}
	back := as.signInAt(authURL, aliceLogin)
	if !strings.HasPrefix(back, host+"/oauth/callback?") {
		t.Fatalf("the provider redirects to %q, want the host's callback", back)
	}
	if c, _, page := fetch(t, browse(), "GET", back, nil); c != http.StatusOK || !strings.Contains(page, "Connected to o.") {
		t.Errorf("the callback page: %d\n%s", c, page)
	}
	rest, _ := io.ReadAll(rd)
	if err := cli.Wait(); err != nil || !strings.Contains(string(rest), "Connected to o.") {
		t.Errorf("auth login: %v\n%s\n%s", err, rest, cliErr.String())
	}

	// Bob signs in on the settings page.
	bobLogin := canaryLogin("bob")
	br := e.settingsBrowser("bob")
	_, _, page := fetch(t, br, "GET", host+"/settings", nil)
	if !strings.Contains(page, `action="/settings/connect/mcp/o"`) {
		t.Fatalf("no Connect button for o on bob's settings page:\n%s", page)
	}
	back = as.signInAt(connectAt(t, br, host+"/settings/connect/mcp/o", page, as.base), bobLogin)
	// The callback in another browser (without the Connect's cookie) is
	// refused; bob's own browser would have completed it.
	if c, _, p := fetch(t, browse(), "GET", back, nil); c != http.StatusForbidden || !strings.Contains(p, "another browser") {
		t.Errorf("bob's callback in another browser: %d\n%s", c, p)
	}
	_, _, page = fetch(t, br, "GET", host+"/settings", nil)
	back = as.signInAt(connectAt(t, br, host+"/settings/connect/mcp/o", page, as.base), bobLogin)
	if c, _, p := fetch(t, br, "GET", back, nil); c != http.StatusOK || !strings.Contains(p, "Connected to o.") {
		t.Errorf("bob's callback: %d\n%s", c, p)
	}

	// Account-linking CSRF: a sign-in started for alice, whose answer is
	// opened in a browser signed in to the settings page as bob, is
	// refused and connects nothing.
	out = e.must("", "auth", "login", "--user", "alice", "--no-wait", "o")
	var csrfURL string
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "http") {
			csrfURL = s
		}
	}
	back = as.signInAt(csrfURL, canaryLogin("mallory"))
	if c, _, p := fetch(t, br, "GET", back, nil); c != http.StatusForbidden || !strings.Contains(p, "another user") {
		t.Errorf("alice's sign-in answered in bob's browser: %d\n%s", c, p)
	}

	// Both have their tools, and each call carries the caller's grant.
	for user, login := range map[string]string{"alice": aliceLogin, "bob": bobLogin} {
		eventually(t, user+"'s tools appear", func() bool {
			_, _, code := e.run("", "tools", "--user", user)
			return code == 0 && hasPrefix(e.toolNames(user), "o/whoami")
		})
		if out := e.must("", "call", "--user", user, "o/whoami", "{}"); !strings.Contains(out, login) {
			t.Errorf("%s's call carried another grant: %s", user, out)
		}
	}

	// Twenty calls of alice's agent at the access token's expiry: one
	// refresh.
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	mc, err := connect(t, host, tok)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := mc.call(t, "o__whoami", map[string]any{}); err != nil || res.IsError {
		t.Fatalf("alice's agent calls o__whoami: %v %+v", err, res)
	}
	before := as.refreshes()
	time.Sleep(3100 * time.Millisecond)
	var wg sync.WaitGroup
	fails := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := mc.call(t, "o__whoami", map[string]any{})
			if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), aliceLogin) {
				fails <- fmt.Sprintf("%v %+v", err, res)
			}
		}()
	}
	wg.Wait()
	close(fails)
	for f := range fails {
		t.Errorf("a call at expiry: %s", f)
	}
	if n := as.refreshes() - before; n != 1 {
		t.Errorf("twenty calls at expiry caused %d refreshes, want 1", n)
	}

	// Only alice's and bob's accounts ever reached the provider, and no
	// token it issued appears in what the host logs, shows or answers.
	var seen []struct{ Login string }
	as.get("/admin/seen", &seen)
	for _, s := range seen {
		if s.Login != aliceLogin && s.Login != bobLogin {
			t.Errorf("the provider saw a request of %q", s.Login)
		}
	}
	var issued map[string][]string
	as.get("/admin/tokens", &issued)
	answers := e.serveOut.String() + e.must("", "status", "--json") + e.must("", "settings", "get", "--user", "alice") +
		e.must("", "settings", "get", "--user", "bob")
	for _, p := range []string{"/api/v1/status", "/api/v1/secrets/mcp", "/api/v1/tools"} {
		_, _, body := fetch(t, &http.Client{Transport: bearerRT{tok}}, "GET", host+p, nil)
		answers += body
	}
	for login, toks := range issued {
		for _, s := range toks {
			if strings.Contains(answers, s) {
				t.Errorf("a token of %s appears in the host's logs or answers", login)
			}
		}
	}

	// Alice withdraws access at the provider. Her next call, from a client
	// (on a session) that declared URL elicitation, fails at once with the
	// URL elicitation required error carrying the sign-in link (the
	// client's handler is never asked: nothing waits for the person); the
	// server needs sign-in again; tools fails again.
	var elicited atomic.Int32
	completed := make(chan string, 4)
	ec, err := connectWith(t, host, tok, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			completed <- r.Params.ElicitationID
		},
	}, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	revoke := func(login string) {
		resp, err := http.Post(as.base+"/admin/revoke?login="+url.QueryEscape(login), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	revoke(aliceLogin)
	_, err = ec.call(t, "o__whoami", map[string]any{})
	var re *jsonrpc.Error
	var data struct{ Elicitations []*mcp.ElicitParams }
	if !errors.As(err, &re) || re.Code != mcp.CodeURLElicitationRequired || json.Unmarshal(re.Data, &data) != nil ||
		len(data.Elicitations) != 1 || data.Elicitations[0].Mode != "url" || data.Elicitations[0].URL != link ||
		data.Elicitations[0].ElicitationID == "" {
		t.Errorf("alice's call after the revocation: %v; want -32042 with the link %s", err, link)
	} else if answer := re.Message + string(re.Data); strings.Contains(answer, bobLogin) || strings.Contains(answer, aliceLogin) {
		t.Errorf("the elicitation names an account: %s", answer)
	}
	if n := elicited.Load(); n != 0 {
		t.Errorf("alice's client was asked to elicit %d time(s); want none", n)
	}
	eventually(t, "alice's server needs sign-in again", func() bool {
		return strings.Contains(e.must("", "status", "--user", "alice"), "needs sign-in")
	})
	if _, stderr, code := e.run("", "tools", "--user", "alice"); code != 1 || !strings.Contains(stderr, "agenthost auth login --user alice o") {
		t.Errorf("tools after the revocation: exit %d\n%s", code, stderr)
	}
	// Bob is untouched.
	if out := e.must("", "call", "--user", "bob", "o/whoami", "{}"); !strings.Contains(out, bobLogin) {
		t.Errorf("bob after alice's revocation: %s", out)
	}
	// Alice signs in again: her client hears that the elicitation it was
	// given is complete, and her calls work again.
	out = e.must("", "auth", "login", "--user", "alice", "--no-wait", "o")
	var againURL string
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "http") {
			againURL = s
		}
	}
	back = as.signInAt(againURL, aliceLogin)
	if c, _, p := fetch(t, browse(), "GET", back, nil); c != http.StatusOK || !strings.Contains(p, "Connected to o.") {
		t.Errorf("alice's second sign-in: %d\n%s", c, p)
	}
	if len(data.Elicitations) == 1 {
		select {
		case id := <-completed:
			if id != data.Elicitations[0].ElicitationID {
				t.Errorf("the completion names elicitation %q, want %q", id, data.Elicitations[0].ElicitationID)
			}
		case <-time.After(20 * time.Second):
			t.Error("alice's client never heard that the sign-in was done")
		}
	}
	eventually(t, "alice's calls work again", func() bool {
		res, err := ec.call(t, "o__whoami", map[string]any{})
		return err == nil && !res.IsError && strings.Contains(fmt.Sprint(res.StructuredContent), aliceLogin)
	})
	// Bob withdraws access too: his agent, which declared no URL
	// elicitation, gets the isError result that says so, with the link,
	// and nothing of alice's.
	bc, err := connect(t, host, strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := bc.call(t, "o__whoami", map[string]any{}); err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), bobLogin) {
		t.Fatalf("bob's agent calls o__whoami: %v %+v", err, res)
	}
	revoke(bobLogin)
	res, err := bc.call(t, "o__whoami", map[string]any{})
	if err != nil || !res.IsError || !strings.Contains(text(res), "revoked") || !strings.Contains(text(res), link) {
		t.Errorf("bob's call after the revocation: %v %+v; want an error naming the sign-in, with the link", err, res)
	} else if strings.Contains(text(res), aliceLogin) || strings.Contains(text(res), "alice") {
		t.Errorf("bob's error names alice: %q", text(res))
	}
}

// TestOAuthSignInAskedFromToolsList runs the real binaries against a
// server that lets initialize through without a token and asks for one
// from tools/list on (the example provider's -open-initialize): the
// server needs sign-in, and both `agenthost auth login` (alice) and the
// settings page's Connect (bob) start the sign-in from the challenge of
// tools/list, complete it, and the tool answers as each one's account.
func TestOAuthSignInAskedFromToolsList(t *testing.T) {
	b := build(t)
	as := startProvider(t, b.oauth, "-open-initialize")
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	e.startServe()
	host := e.url
	eventually(t, "o needs alice's sign-in", func() bool {
		return strings.Contains(e.must("", "status", "--user", "alice"), "needs sign-in")
	})

	aliceLogin := canaryLogin("alice")
	out, errOut, code := e.run("", "auth", "login", "--user", "alice", "--no-wait", "o")
	var authURL string
	for _, l := range strings.Split(out, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, as.base+"/authorize?") {
			authURL = s
		}
	}
	if code != 0 || authURL == "" {
		t.Fatalf("auth login: exit %d, no authorization URL\n%s\n%s", code, out, errOut)
	}
	if c, _, p := fetch(t, browse(), "GET", as.signInAt(authURL, aliceLogin), nil); c != http.StatusOK || !strings.Contains(p, "Connected to o.") {
		t.Errorf("alice's callback: %d\n%s", c, p)
	}

	bobLogin := canaryLogin("bob")
	br := e.settingsBrowser("bob")
	_, _, page := fetch(t, br, "GET", host+"/settings", nil)
	back := as.signInAt(connectAt(t, br, host+"/settings/connect/mcp/o", page, as.base), bobLogin)
	if c, _, p := fetch(t, br, "GET", back, nil); c != http.StatusOK || !strings.Contains(p, "Connected to o.") {
		t.Errorf("bob's callback: %d\n%s", c, p)
	}

	for user, login := range map[string]string{"alice": aliceLogin, "bob": bobLogin} {
		eventually(t, user+"'s tools appear", func() bool {
			_, _, code := e.run("", "tools", "--user", user)
			return code == 0 && hasPrefix(e.toolNames(user), "o/whoami")
		})
		if out := e.must("", "call", "--user", user, "o/whoami", "{}"); !strings.Contains(out, login) {
			t.Errorf("%s's call carried another grant: %s", user, out)
		}
	}
}

// TestOAuthLoginWithoutRunningHost checks `agenthost auth login` when no
// host runs: it serves the host itself on the configured address until
// the browser came back, and the grant it stored serves the next
// commands.
func TestOAuthLoginWithoutRunningHost(t *testing.T) {
	b := build(t)
	as := startProvider(t, b.oauth)
	port := freePort(t)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", port)})
	login := canaryLogin("carol")
	cli := exec.Command(e.bin.agenthost, "--config", e.cfg, "auth", "login", "--user", "carol", "o")
	out, _ := cli.StdoutPipe()
	var errOut strings.Builder
	cli.Stderr = &errOut
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(out)
	var authURL string
	for authURL == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("auth login printed no URL: %v\n%s", err, errOut.String())
		}
		if s := strings.TrimSpace(line); strings.HasPrefix(s, "http") {
			authURL = s
		}
	}
	back := as.signInAt(authURL, login)
	if c, _, page := fetch(t, browse(), "GET", back, nil); c != http.StatusOK {
		t.Errorf("the callback of the CLI's own host: %d\n%s", c, page)
	}
	rest, _ := io.ReadAll(rd)
	if err := cli.Wait(); err != nil || !strings.Contains(string(rest), "Connected to o.") || !strings.Contains(errOut.String(), "No agenthost is running") {
		t.Errorf("auth login without a running host: %v\n%s\n%s", err, rest, errOut.String())
	}
	if got := e.must("", "call", "--user", "carol", "o/whoami", "{}"); !strings.Contains(got, login) {
		t.Errorf("carol's call after signing in: %s", got)
	}
	if _, stderr, code := e.run("", "auth", "login", "--user", "carol", "--no-wait", "o"); code != 2 || !strings.Contains(stderr, "needs a running host") {
		t.Errorf("--no-wait without a running host: exit %d %s", code, stderr)
	}
}
