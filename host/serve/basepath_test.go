package serve_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/agenthost/agenthost/host/internal/hosttest"
)

// pathProxy is a reverse proxy at the root of its own server that
// forwards /agenthost/* to the host, stripping nothing, and, when wide,
// the root's /.well-known/* too. It records the paths the host got.
type pathProxy struct {
	srv    *httptest.Server
	target atomic.Pointer[httputil.ReverseProxy]
	wide   atomic.Bool
	mu     sync.Mutex
	paths  []string
}

func newPathProxy(t *testing.T) *pathProxy {
	p := &pathProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp := p.target.Load()
		if rp == nil || !(strings.HasPrefix(r.URL.Path, "/agenthost/") || p.wide.Load() && strings.HasPrefix(r.URL.Path, "/.well-known/")) {
			http.NotFound(w, r)
			return
		}
		p.mu.Lock()
		p.paths = append(p.paths, r.URL.Path)
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *pathProxy) forwardTo(hostURL string) {
	u, _ := url.Parse(hostURL)
	p.target.Store(httputil.NewSingleHostReverseProxy(u))
}

// forwarded reports whether the host got a request for path.
func (p *pathProxy) forwarded(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.paths, path)
}

var loginHrefRE = regexp.MustCompile(`<a href="([^"]*)" id="sign-in">`)

// TestOAuthUnderPath: a host whose publicURL has a path
// (http://proxy/agenthost) behind a reverse proxy that forwards
// /agenthost/* as it is: the 401, the metadata and the pages name URLs
// under the path; go-sdk's discovery finds the authorization server
// through the proxy, whether it forwards only /agenthost/* (the MCP
// spec's last location, <issuer>/.well-known/openid-configuration) or the
// root's well-known locations too (RFC 8414 §3.1's
// /.well-known/oauth-authorization-server/agenthost, RFC 9728's
// /.well-known/oauth-protected-resource/agenthost/mcp); the host answers
// as well without the path (a proxy that strips it); and go-sdk's client
// signs in, registers, and calls a tool through the proxy.
func TestOAuthUnderPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	px := newPathProxy(t)
	public := px.srv.URL + "/agenthost"
	st := startOAuthStack(t, stackOptions{publicURL: public})
	px.forwardTo(st.url)
	client := &http.Client{Timeout: 10 * time.Second}

	// The 401 names the metadata under the path, which names the resource
	// and the issuer with it.
	code, challenge := mcpStatus(t, public, "")
	wantRM := public + "/.well-known/oauth-protected-resource/mcp"
	if code != http.StatusUnauthorized || !strings.Contains(challenge, `resource_metadata="`+wantRM+`"`) {
		t.Fatalf("401 through the proxy: %d %q, want resource_metadata=%q", code, challenge, wantRM)
	}
	prm, err := oauthex.GetProtectedResourceMetadata(ctx, wantRM, public+"/mcp", client)
	if err != nil || !slices.Equal(prm.AuthorizationServers, []string{public}) {
		t.Fatalf("the advertised resource metadata: %+v, %v", prm, err)
	}
	checkASM := func(how string) {
		t.Helper()
		asm, err := auth.GetAuthServerMetadata(ctx, public, client)
		if err != nil || asm == nil {
			t.Fatalf("%s: go-sdk's discovery of issuer %s: %v, %v", how, public, asm, err)
		}
		if asm.Issuer != public || asm.AuthorizationEndpoint != public+"/oauth/authorize" || asm.TokenEndpoint != public+"/oauth/token" ||
			asm.RegistrationEndpoint != public+"/oauth/register" || asm.RevocationEndpoint != public+"/oauth/revoke" {
			t.Errorf("%s: the metadata's URLs are not under the public URL: %+v", how, asm)
		}
	}
	// Only /agenthost/* forwarded: found at the last location go-sdk tries.
	checkASM("only /agenthost/* forwarded")
	if !px.forwarded("/agenthost/.well-known/openid-configuration") {
		t.Errorf("discovery did not go through the path: %v", px.paths)
	}
	// The root's well-known locations forwarded too: RFC 8414's and RFC
	// 9728's.
	px.wide.Store(true)
	checkASM("the root's /.well-known/* forwarded")
	if !px.forwarded("/.well-known/oauth-authorization-server/agenthost") {
		t.Errorf("discovery did not use RFC 8414's location: %v", px.paths)
	}
	rootURL := px.srv.URL + "/.well-known/oauth-protected-resource/agenthost/mcp"
	if prm, err := oauthex.GetProtectedResourceMetadata(ctx, rootURL, public+"/mcp", client); err != nil || prm.Resource != public+"/mcp" {
		t.Errorf("RFC 9728's location %s: %+v, %v", rootURL, prm, err)
	}
	px.wide.Store(false)
	// A proxy that strips the path: the host's routes at its root.
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/mcp"} {
		var m map[string]any
		if resp := getJSON(t, st.url+p, "", &m); resp.StatusCode != http.StatusOK || (m["issuer"] != public && m["resource"] != public+"/mcp") {
			t.Errorf("%s without the path: %d %v", p, resp.StatusCode, m)
		}
	}
	// Another path is not this issuer's.
	for _, p := range []string{"/.well-known/oauth-authorization-server/other", "/.well-known/oauth-protected-resource/other/mcp"} {
		resp, err := client.Get(st.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	// The outbound client's document (ext-mcp's sign-ins) under the path.
	var cimd struct {
		ClientID     string   `json:"client_id"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	getJSON(t, public+"/oauth/client-metadata.json", "", &cimd)
	if cimd.ClientID != public+"/oauth/client-metadata.json" || !slices.Equal(cimd.RedirectURIs, []string{public + "/oauth/callback"}) {
		t.Errorf("the host's client metadata document under the path: %+v", cimd)
	}

	// A browser not signed in is offered the settings sign-in under the
	// path, which comes back to the authorization page.
	b := newBrowser(t)
	q := url.Values{"response_type": {"code"}, "redirect_uri": {redirectURI}, "state": {"state-0123456789"},
		"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}}
	q.Set("client_id", regClient(t, public))
	_, page, err := b.do("GET", public+"/oauth/authorize?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := loginHrefRE.FindStringSubmatch(page)
	if m == nil || !strings.HasPrefix(html.UnescapeString(m[1]), "/agenthost/settings/login?next=%2Fagenthost%2Foauth%2Fauthorize") {
		t.Fatalf("the sign-in link of the authorization page is not under the path: %v\n%s", m, page)
	}
	resp, login, err := b.do("GET", px.srv.URL+html.UnescapeString(m[1]), nil)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(login, `value="/agenthost/oauth/authorize?`) {
		t.Fatalf("the sign-in page through the proxy: %v %v, want it to come back to the authorization page\n%s", resp, err, login)
	}

	// Signed in through the proxy, go-sdk's client connects at
	// <publicURL>/mcp: discovery, registration, consent, PKCE, a call.
	link, err := st.s.LoginLink(ctx, "alice")
	if err != nil || !strings.HasPrefix(link, public+"/settings/login?code=") {
		t.Fatalf("LoginLink = %q, %v", link, err)
	}
	if _, page, err = b.do("GET", link, nil); err != nil {
		t.Fatal(err)
	}
	if resp, _, err := b.do("POST", public+"/settings/login", hosttest.HiddenFields(page, "")); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing in through the proxy: %v %v", resp, err)
	}
	through := *st
	through.url = public
	cs := connect(t, ctx, &through, &auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "path client", RedirectURIs: []string{redirectURI}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}}},
		// Access tokens live 2 s here, less than oauth2's expiry margin.
		AuthorizationCodeFetcher: b.fetcher, RequestRefreshToken: true, Client: client,
	})
	cs.Close()
}

// regClient registers a public client at base and returns its ID.
func regClient(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Post(base+"/oauth/register", "application/json", strings.NewReader(
		`{"client_name":"raw","redirect_uris":["`+redirectURI+`"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct {
		ClientID string `json:"client_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil || reg.ClientID == "" {
		t.Fatalf("registering at %s: %d %v", base, resp.StatusCode, err)
	}
	return reg.ClientID
}
