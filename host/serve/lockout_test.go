package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/serve"
)

type syncBuffer = hosttest.LogBuffer

// stack is a real host served by a real serve.Server on 127.0.0.1:0, its
// log captured.
type stack struct {
	s    *serve.Server
	logs *syncBuffer
	port string
}

func startStack(t *testing.T, cfg *host.Config) *stack {
	t.Helper()
	logs := &syncBuffer{}
	h := newHost(t, cfg)
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &stack{s: s, logs: logs, port: port}
}

// peer is an HTTP client whose connections come from one loopback source
// address (Linux routes all of 127/8 to lo), with a cookie jar and no
// redirects followed.
type peer struct {
	t    *testing.T
	st   *stack
	tr   *http.Transport
	c    *http.Client
	from string
}

func (st *stack) from(t *testing.T, src string) *peer {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	jar, _ := cookiejar.New(nil)
	return &peer{t: t, st: st, tr: tr, from: src, c: &http.Client{Transport: tr, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (p *peer) url(path string) string { return "http://127.0.0.1:" + p.st.port + path }

type answer struct {
	code int
	hdr  http.Header
	body string
}

func (p *peer) do(method, path, token, body string, hdr map[string]string) answer {
	p.t.Helper()
	req, _ := http.NewRequest(method, p.url(path), strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := p.c.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s from %s: %v", method, path, p.from, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, hdr: resp.Header, body: string(b)}
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`

var mcpHeaders = map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

// mcpSession opens an MCP session with token from p's address.
func (p *peer) mcpSession(ctx context.Context, token string) *mcp.ClientSession {
	p.t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: p.url("/mcp"), HTTPClient: &http.Client{Transport: bearer(p.tr, token)}, MaxRetries: -1}, nil)
	if err != nil {
		p.t.Fatalf("connecting to /mcp from %s: %v", p.from, err)
	}
	return cs
}

func callNow(ctx context.Context, cs *mcp.ClientSession) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "clock__now", Arguments: map[string]any{}})
	if err != nil {
		return err
	}
	if res.IsError || res.Content[0].(*mcp.TextContent).Text != "noon for alice" {
		return fmt.Errorf("unexpected result %+v", res)
	}
	return nil
}

var csrfField = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// signIn signs p's browser in with token on /settings and loads the page.
func (p *peer) signIn(token string) answer {
	p.t.Helper()
	page := p.do("GET", "/settings/login", "", "", nil)
	m := csrfField.FindStringSubmatch(page.body)
	if m == nil {
		p.t.Fatalf("no sign-in form from %s: %d %s", p.from, page.code, page.body)
	}
	form := url.Values{"_csrf": {m[1]}, "token": {token}}
	r := p.do("POST", "/settings/login", "", form.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if r.code != http.StatusSeeOther {
		return r
	}
	return p.do("GET", "/settings", "", "", nil)
}

// TestAttackLockoutSparesValidUsers reproduces the lockout attack on the
// real stack: an attacker on this machine fails sign-ins on every surface
// from 127.0.0.1 (cross-site GETs of login links too) and then from
// 127.0.0.2, 127.0.0.3, ...; alice's valid token still works from those
// same addresses on /mcp (her open session and a new one), /api/v1 and
// /settings, while the attacker's further guesses get 429 with
// Retry-After, however he rotates 127/8. No token reaches the log.
func TestAttackLockoutSparesValidUsers(t *testing.T) {
	st := startStack(t, nil)
	ctx := context.Background()
	alice, err := st.s.CreateToken(ctx, "alice", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	victim := st.from(t, "127.0.0.1")
	open := victim.mcpSession(ctx, alice)
	defer open.Close()
	if err := callNow(ctx, open); err != nil {
		t.Fatalf("before the attack: %v", err)
	}
	web := st.from(t, "127.0.0.1")
	if r := web.signIn(alice); r.code != 200 {
		t.Fatalf("signing in before the attack: %d %s", r.code, r.body)
	}

	const canary = "ah_CANARYguessCANARYguessCANARYguessCANARYgu" // well-formed, unknown
	mallory := st.from(t, "127.0.0.1")
	for i := range 3 {
		mallory.do("POST", "/mcp", fmt.Sprintf("%s%d", canary[:len(canary)-1], i), mcpInit, mcpHeaders)
	}
	mallory.do("GET", "/api/v1/me", canary, "", nil)
	for range 3 { // a page elsewhere makes browsers follow bogus links
		mallory.do("GET", "/settings/login?code=ahl_"+strings.Repeat("B", 43), "", "", map[string]string{"Sec-Fetch-Site": "cross-site"})
	}
	for i := 2; i <= 12; i++ {
		m := st.from(t, fmt.Sprintf("127.0.0.%d", i))
		for j := range 6 {
			m.do("GET", "/api/v1/me", fmt.Sprintf("%s%d%d", canary[:len(canary)-2], i%10, j), "", nil)
		}
	}

	for _, src := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.7"} {
		p := st.from(t, src)
		if r := p.do("GET", "/api/v1/me", alice, "", nil); r.code != 200 || !strings.Contains(r.body, `"user":"alice"`) {
			t.Errorf("alice's token on /api/v1 from %s: %d %s", src, r.code, r.body)
		}
		cs := p.mcpSession(ctx, alice)
		if err := callNow(ctx, cs); err != nil {
			t.Errorf("alice's new MCP session from %s: %v", src, err)
		}
		cs.Close()
		if r := p.signIn(alice); r.code != 200 || !strings.Contains(r.body, "<strong>alice</strong>") {
			t.Errorf("alice's sign-in on /settings from %s: %d %s", src, r.code, r.body)
		}
	}
	if err := callNow(ctx, open); err != nil {
		t.Errorf("alice's open MCP session after the attack: %v", err)
	}
	if r := web.do("GET", "/settings", "", "", nil); r.code != 200 {
		t.Errorf("alice's open web session after the attack: %d", r.code)
	}

	// The attacker stays throttled, from any loopback address.
	for _, src := range []string{"127.0.0.1", "127.0.0.99", "127.1.2.3"} {
		m := st.from(t, src)
		for name, r := range map[string]answer{
			"/mcp":    m.do("POST", "/mcp", canary, mcpInit, mcpHeaders),
			"/api/v1": m.do("GET", "/api/v1/me", canary, "", nil),
		} {
			if r.code != http.StatusTooManyRequests || r.hdr.Get("Retry-After") == "" {
				t.Errorf("a further guess on %s from %s: %d (Retry-After %q), want 429 with Retry-After", name, src, r.code, r.hdr.Get("Retry-After"))
			}
		}
		if r := m.signIn(canary); r.code != http.StatusTooManyRequests || r.hdr.Get("Retry-After") == "" {
			t.Errorf("a further sign-in guess from %s: %d (Retry-After %q), want 429", src, r.code, r.hdr.Get("Retry-After"))
		}
	}
	out := st.logs.String()
	if strings.Contains(out, canary[3:20]) || strings.Contains(out, alice[3:20]) {
		t.Errorf("a token reached the log:\n%s", out)
	}
}

// TestAttackSpoofedForwardedFor: without trustedProxies, X-Forwarded-For
// is the client's to write and is ignored, so rotating it does not escape
// the lockout. With the local proxy trusted, each client behind it is its
// own key: the locked-out attacker stays locked out whatever he puts in
// the header (the proxy appends his real address, the rightmost), and
// another client's guesses are its own.
func TestAttackSpoofedForwardedFor(t *testing.T) {
	guessFrom := func(p *peer, i int, xff string) answer {
		return p.do("GET", "/api/v1/me", fmt.Sprintf("ah_xff%038d", i), "", map[string]string{"X-Forwarded-For": xff})
	}
	t.Run("untrusted", func(t *testing.T) {
		st := startStack(t, nil)
		m := st.from(t, "127.0.0.1")
		var r answer
		for i := range 20 {
			r = guessFrom(m, i, fmt.Sprintf("198.51.100.%d", i))
		}
		if r.code != http.StatusTooManyRequests {
			t.Errorf("20 guesses with a fresh X-Forwarded-For each: the last got %d, want 429", r.code)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		st := startStack(t, &host.Config{TrustedProxies: []string{"127.0.0.1/32"}})
		proxy := st.from(t, "127.0.0.1")
		for i := range 5 {
			guessFrom(proxy, i, "203.0.113.5")
		}
		for name, xff := range map[string]string{
			"as sent":                  "203.0.113.5",
			"spoofed entry left of it": "198.51.100.7, 203.0.113.5",
			"spoofed proxy entry":      "127.0.0.1, 203.0.113.5",
		} {
			if r := guessFrom(proxy, 100, xff); r.code != http.StatusTooManyRequests {
				t.Errorf("the locked-out client, X-Forwarded-For %s (%q): %d, want 429", name, xff, r.code)
			}
		}
		if r := guessFrom(proxy, 200, "198.51.100.7"); r.code != http.StatusUnauthorized {
			t.Errorf("another client's first guess: %d, want 401", r.code)
		}
		// A peer that is not the trusted proxy is itself the client: its
		// header is ignored, and loopback is one key.
		other := st.from(t, "127.0.0.2")
		for i := range 5 {
			guessFrom(other, 300+i, fmt.Sprintf("192.0.2.%d", i))
		}
		if r := guessFrom(other, 400, "192.0.2.99"); r.code != http.StatusTooManyRequests {
			t.Errorf("an untrusted peer rotating X-Forwarded-For: %d, want 429", r.code)
		}
	})
}

// TestAttackLogFlood: a flood of refused requests (bad tokens on /mcp and
// /api/v1, bad sign-ins, foreign Origin and Host headers) writes a few
// lines per reason and a count of the rest, not one line per request; no
// token reaches the log.
func TestAttackLogFlood(t *testing.T) {
	st := startStack(t, nil)
	m := st.from(t, "127.0.0.1")
	const canary = "ah_FLOODcanaryFLOODcanaryFLOODcanaryFLOODcan"
	const n = 100
	for range n {
		m.do("POST", "/mcp", canary, mcpInit, mcpHeaders)
		m.do("GET", "/api/v1/me", canary, "", nil)
		m.do("POST", "/mcp", canary, mcpInit, map[string]string{"Content-Type": "application/json",
			"Accept": "application/json, text/event-stream", "Origin": "http://evil.example"})
		m.do("GET", "/mcp", "", "", map[string]string{"Host": "evil.example"})
	}
	for _, p := range []string{"/mcp", "/api/v1/me", "/settings"} {
		req, _ := http.NewRequest("GET", m.url(p), nil)
		req.Host = "evil.example"
		resp, err := m.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host evil.example on %s: %d, want 403", p, resp.StatusCode)
		}
	}
	if err := st.s.Close(); err != nil {
		t.Fatal(err)
	}
	out := st.logs.String()
	t.Logf("the log of %d refused requests:\n%s", 4*n, out)
	lines := strings.Count(out, "\n")
	if lines > 60 {
		t.Errorf("%d refused requests wrote %d log lines, want a few per reason:\n%s", 4*n, lines, out)
	}
	for _, want := range []string{"mcp: refused an invalid token", "bearer token refused", "foreign origin", "foreign Host header",
		"similar refusals suppressed", "address locked out"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, canary[3:20]) {
		t.Errorf("the canary token reached the log:\n%s", out)
	}
}

// TestAttackOAuthLogFlood: anyone may send the OAuth routes made-up
// requests (a redirect with a forged state; an authorization whose
// client_id is a metadata document the guard refuses), and each is
// refused: the log holds a few lines per reason, not one per request.
func TestAttackOAuthLogFlood(t *testing.T) {
	st := startStack(t, nil)
	m := st.from(t, "127.0.0.1")
	const n = 100
	for i := range n {
		m.do("GET", fmt.Sprintf("/oauth/callback?code=c&state=forged-%d", i), "", "", nil)
		q := url.Values{"client_id": {fmt.Sprintf("https://127.0.0.1:1/app-%d.json", i)}, "response_type": {"code"},
			"redirect_uri": {"http://127.0.0.1:9/cb"}, "state": {"state-0123456789"}, "code_challenge_method": {"S256"},
			"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}}
		m.do("GET", "/oauth/authorize?"+q.Encode(), "", "", nil)
	}
	if err := st.s.Close(); err != nil {
		t.Fatal(err)
	}
	out := st.logs.String()
	if lines := strings.Count(out, "\n"); lines > 40 {
		t.Errorf("%d refused OAuth requests wrote %d log lines, want a few per reason:\n%s", 2*n, lines, out)
	}
	for _, want := range []string{"no sign-in waits for this state", "refused a client", "similar refusals suppressed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}

// TestPublicHostBehindLocalProxy: behind a proxy on this machine, requests
// reach the loopback listener naming the publicURL's host: allowed on
// /mcp, /api/v1 and /settings; any other name still gets 403.
func TestPublicHostBehindLocalProxy(t *testing.T) {
	st := startStack(t, &host.Config{PublicURL: "https://agents.example.com"})
	alice, err := st.s.CreateToken(context.Background(), "alice", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	p := st.from(t, "127.0.0.1")
	for host, forbidden := range map[string]bool{"agents.example.com": false, "AGENTS.example.com:443": false, "evil.example": true} {
		for _, c := range []struct{ method, path, body string }{{"POST", "/mcp", mcpInit}, {"GET", "/api/v1/me", ""}, {"GET", "/settings/login", ""}} {
			req, _ := http.NewRequest(c.method, p.url(c.path), strings.NewReader(c.body))
			req.Host = host
			req.Header.Set("Authorization", "Bearer "+alice)
			for k, v := range mcpHeaders {
				req.Header.Set(k, v)
			}
			resp, err := p.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if (resp.StatusCode == http.StatusForbidden) != forbidden || (!forbidden && resp.StatusCode != 200) {
				t.Errorf("%s %s with Host %s: %d", c.method, c.path, host, resp.StatusCode)
			}
		}
	}
}
