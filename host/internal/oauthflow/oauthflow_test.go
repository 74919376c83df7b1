package oauthflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/oauthflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// signer is an extension with the auth capability: its authorization URL
// carries the request's fields, and it records every completion.
type signer struct {
	mu       sync.Mutex
	n        int
	done     []ext.CompleteAuthRequest
	badURL   string // when set, BeginAuth answers it
	lifetime time.Duration
	gate     chan struct{} // when set, BeginAuth waits for it to close
	arrived  int           // BeginAuths that reached the gate
	// completing, when set, is sent a channel by each CompleteAuth, which
	// then waits for that channel to close.
	completing chan chan struct{}
}

// arrivals returns how many BeginAuths reached the gate.
func (s *signer) arrivals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrived
}

func (s *signer) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "sig", Capabilities: []ext.Capability{ext.CapabilityAuth}}, nil
}
func (s *signer) Configure(context.Context, *ext.ConfigureRequest) error { return nil }
func (s *signer) Shutdown(context.Context) error                         { return nil }

func (s *signer) BeginAuth(_ context.Context, req *ext.BeginAuthRequest) (*ext.BeginAuthResult, error) {
	if req.Name != "res" {
		return nil, ext.Errorf(ext.ErrNotFound, "no resource %q", req.Name)
	}
	s.mu.Lock()
	if gate := s.gate; gate != nil {
		s.arrived++
		s.mu.Unlock()
		<-gate
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	s.n++
	state := fmt.Sprintf("state-%d", s.n)
	u := "https://as.example/authorize?" + url.Values{"state": {state}, "redirect_uri": {req.RedirectURL},
		"client_id": {req.ClientMetadataURL}}.Encode()
	if s.badURL != "" {
		u = s.badURL
	}
	res := &ext.BeginAuthResult{URL: u, State: state}
	if s.lifetime > 0 {
		res.Expires = time.Now().Add(s.lifetime)
	}
	return res, nil
}

func (s *signer) CompleteAuth(_ context.Context, req *ext.CompleteAuthRequest) (*ext.CompleteAuthResult, error) {
	s.mu.Lock()
	completing := s.completing
	s.mu.Unlock()
	if completing != nil {
		release := make(chan struct{})
		completing <- release
		<-release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(s.done, *req)
	q, _ := url.ParseQuery(req.Query)
	if e := q.Get("error"); e != "" {
		return nil, fmt.Errorf("signing in to %s failed: the authorization server refused: %s: %w", req.Name, e, ext.ErrInvalidArgument)
	}
	return &ext.CompleteAuthResult{Message: "Connected to " + req.Name + "."}, nil
}

func (s *signer) completions() []ext.CompleteAuthRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ext.CompleteAuthRequest(nil), s.done...)
}

// rig is a real host with the signer in process, and the flows on a
// loopback server.
type rig struct {
	sig   *signer
	flows *oauthflow.Flows
	url   string
}

func newRig(t *testing.T, base string, maxAge time.Duration) *rig {
	t.Helper()
	sig := &signer{}
	h, err := host.New(context.Background(), &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"sig": {Extension: sig}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	r := &rig{sig: sig}
	srv := httptest.NewUnstartedServer(nil)
	r.url = "http://" + srv.Listener.Addr().String()
	if base == "" {
		base = r.url
	}
	r.flows = oauthflow.New(h, &oauthflow.Options{BaseURL: func() string { return base }, MaxAge: maxAge,
		// The settings session, for this test, is a header.
		SessionUser: func(_ http.ResponseWriter, req *http.Request) (string, bool) {
			u := req.Header.Get("X-Session-User")
			return u, u != ""
		}})
	mux := http.NewServeMux()
	mux.HandleFunc(oauthflow.CallbackPath, r.flows.ServeCallback)
	mux.HandleFunc(oauthflow.ClientMetadataPath, r.flows.ServeClientMetadata)
	mux.HandleFunc("/connect", func(w http.ResponseWriter, req *http.Request) {
		st, err := r.flows.BeginBrowser(w, req, "alice", "sig", "res")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, st.State)
	})
	srv.Config.Handler = mux
	srv.Start()
	t.Cleanup(srv.Close)
	return r
}

// callback sends the browser's redirect and returns the status and page.
func (r *rig) callback(t *testing.T, query string, hdr http.Header, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.url+oauthflow.CallbackPath+"?"+query, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Referrer-Policy") != "no-referrer" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the callback page may leak its URL: Referrer-Policy %q, Cache-Control %q",
			resp.Header.Get("Referrer-Policy"), resp.Header.Get("Cache-Control"))
	}
	return resp.StatusCode, string(b)
}

// TestCallback follows sign-ins through the callback: the right answer
// completes once and says so; a wrong, reused or expired state, and a
// browser signed in as another user, are refused plainly, the code never
// shown; a waiter hears how each ended.
func TestCallback(t *testing.T) {
	r := newRig(t, "", 0)
	ctx := context.Background()
	st, err := r.flows.Begin(ctx, "alice", "sig", "res")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(st.URL)
	if got := u.Query().Get("redirect_uri"); got != r.url+"/oauth/callback" {
		t.Errorf("redirect URI %q", got)
	}
	if got := u.Query().Get("client_id"); got != "" {
		t.Errorf("a metadata document offered on plain http: %q", got)
	}
	waited := make(chan *oauthflow.Result, 1)
	go func() {
		res, err := r.flows.Wait(ctx, st.State)
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	const code = "the-code-8e1f"
	q := url.Values{"code": {code}, "state": {st.State}, "iss": {"https://as.example"}}.Encode()
	if c, page := r.callback(t, url.Values{"code": {code}, "state": {"forged"}}.Encode(), nil); c != http.StatusBadRequest ||
		!strings.Contains(page, "not valid here") || strings.Contains(page, code) {
		t.Errorf("a forged state: %d %s", c, page)
	}
	if c, page := r.callback(t, q, nil); c != http.StatusOK || !strings.Contains(page, "Connected to res.") || strings.Contains(page, code) {
		t.Errorf("the right answer: %d %s", c, page)
	}
	if res := <-waited; !res.OK || res.Message != "Connected to res." {
		t.Errorf("the waiter heard %+v", res)
	}
	if c, page := r.callback(t, q, nil); c != http.StatusBadRequest || !strings.Contains(page, "already used") {
		t.Errorf("a reused state: %d %s", c, page)
	}
	done := r.sig.completions()
	if len(done) != 1 || done[0].User != "alice" || done[0].Name != "res" || done[0].Query != q {
		t.Errorf("the extension completed %+v; want one, with the query untouched", done)
	}

	// Another user's settings session in the browser: refused, and the
	// extension's side of the sign-in ends too.
	st2, err := r.flows.Begin(ctx, "alice", "sig", "res")
	if err != nil {
		t.Fatal(err)
	}
	q2 := url.Values{"code": {code}, "state": {st2.State}}.Encode()
	if c, page := r.callback(t, q2, http.Header{"X-Session-User": {"mallory"}}); c != http.StatusForbidden || !strings.Contains(page, "another user") {
		t.Errorf("another user's session: %d %s", c, page)
	}
	if done := r.sig.completions(); len(done) != 2 || !strings.Contains(done[1].Query, "error=access_denied") {
		t.Errorf("the refused sign-in was not ended at the extension: %+v", done)
	}
	// The refusal killed the state.
	if c, _ := r.callback(t, q2, http.Header{"X-Session-User": {"alice"}}); c != http.StatusBadRequest {
		t.Errorf("a state after a refusal: %d", c)
	}
	// The provider's refusal reaches the page in the extension's words.
	st3, _ := r.flows.Begin(ctx, "alice", "sig", "res")
	if c, page := r.callback(t, url.Values{"error": {"access_denied"}, "state": {st3.State}}.Encode(), http.Header{"X-Session-User": {"alice"}}); c != http.StatusBadRequest ||
		!strings.Contains(page, "refused: access_denied") || strings.Contains(page, "invalid argument") || strings.Contains(page, `extension "sig"`) {
		t.Errorf("the provider's refusal: %d %s", c, page)
	}
	if _, err := r.flows.Begin(ctx, "bob", "sig", "nope"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("an unknown resource: %v", err)
	}
	if _, err := r.flows.Begin(ctx, "../bob", "sig", "res"); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("a malformed user: %v", err)
	}
	if _, err := r.flows.Begin(ctx, "bob", "nosuch", "res"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("an unknown extension: %v", err)
	}
}

// TestExpiry checks that a sign-in nobody finished expires: the waiter
// hears so, and the late redirect is refused.
func TestExpiry(t *testing.T) {
	r := newRig(t, "", 300*time.Millisecond)
	st, err := r.flows.Begin(context.Background(), "alice", "sig", "res")
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.flows.Wait(context.Background(), st.State)
	if err != nil || res.OK || !strings.Contains(res.Message, "expired") {
		t.Errorf("waiting for an abandoned sign-in: %+v %v", res, err)
	}
	if c, page := r.callback(t, url.Values{"code": {"c"}, "state": {st.State}}.Encode(), nil); c != http.StatusBadRequest || !strings.Contains(page, "expired") {
		t.Errorf("a late redirect: %d %s", c, page)
	}
	if n := len(r.sig.completions()); n != 0 {
		t.Errorf("an expired sign-in reached the extension %d time(s)", n)
	}
}

// TestBrowserBinding checks that a sign-in started on the settings page
// completes only in that browser.
func TestBrowserBinding(t *testing.T) {
	r := newRig(t, "", 0)
	resp, err := http.Get(r.url + "/connect")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	state := string(b)
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "agenthost_signin_") {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("the binding cookie: %+v", cookie)
	}
	q := url.Values{"code": {"c"}, "state": {state}}.Encode()
	if c, page := r.callback(t, q, nil, &http.Cookie{Name: cookie.Name, Value: "someone-else"}); c != http.StatusForbidden || !strings.Contains(page, "another browser") {
		t.Errorf("another browser: %d %s", c, page)
	}
	// A fresh one, in the right browser.
	resp, err = http.Get(r.url + "/connect")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "agenthost_signin_") {
			cookie = c
		}
	}
	if c, page := r.callback(t, url.Values{"code": {"c"}, "state": {string(b)}}.Encode(), nil, cookie); c != http.StatusOK {
		t.Errorf("the right browser: %d %s", c, page)
	}
}

// TestRefusedAuthorizationURL checks that an extension's authorization
// URL that a browser must not open (javascript:, data:, plain http beyond
// loopback) is refused before anyone sees it.
func TestRefusedAuthorizationURL(t *testing.T) {
	r := newRig(t, "", 0)
	for _, bad := range []string{"javascript:alert(1)", "data:text/html,hi", "http://as.example/authorize?state=x", "file:///etc/passwd"} {
		r.sig.mu.Lock()
		r.sig.badURL = bad
		r.sig.mu.Unlock()
		if st, err := r.flows.Begin(context.Background(), "alice", "sig", "res"); !errors.Is(err, ext.ErrInvalidArgument) {
			t.Errorf("authorization URL %q: %+v %v; want refused", bad, st, err)
		}
	}
}

// TestClientMetadata checks the host's client ID metadata document, and
// that an https host offers it to the extension.
func TestClientMetadata(t *testing.T) {
	r := newRig(t, "https://agents.example.com", 0)
	resp, err := http.Get(r.url + oauthflow.ClientMetadataPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("the document: %v %q", err, resp.Header.Get("Content-Type"))
	}
	want := map[string]any{
		"client_id": "https://agents.example.com/oauth/client-metadata.json", "client_name": "agenthost",
		"client_uri": "https://agents.example.com", "redirect_uris": []any{"https://agents.example.com/oauth/callback"},
		"grant_types": []any{"authorization_code", "refresh_token"}, "response_types": []any{"code"},
		"token_endpoint_auth_method": "none", "application_type": "web",
	}
	if fmt.Sprint(doc) != fmt.Sprint(want) {
		t.Errorf("document\n%v\nwant\n%v", doc, want)
	}
	st, err := r.flows.Begin(context.Background(), "alice", "sig", "res")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(st.URL)
	if got := u.Query().Get("client_id"); got != "https://agents.example.com/oauth/client-metadata.json" {
		t.Errorf("the extension was offered client metadata %q", got)
	}
}

// TestPendingBounded checks that the sign-ins waiting are bounded per
// user even when they all start at once: no more than eight of one
// user's reach the extension, the others are refused at once saying why,
// and another user still starts one.
func TestPendingBounded(t *testing.T) {
	r := newRig(t, "", 0)
	gate := make(chan struct{})
	r.sig.mu.Lock()
	r.sig.gate = gate
	r.sig.mu.Unlock()
	const n = 20
	var mu sync.Mutex
	ok, refused := 0, 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.flows.Begin(context.Background(), "alice", "sig", "res")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ext.ErrUnavailable) && strings.Contains(err.Error(), "too many sign-ins"):
				refused++
			default:
				t.Errorf("a sign-in start: %v", err)
			}
		}()
	}
	// Every start is either refused or waiting in the extension.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		settled := refused + r.sig.arrivals()
		mu.Unlock()
		if settled >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	wg.Wait()
	if ok != 8 || refused != n-8 {
		t.Errorf("%d sign-ins of one user started at once: %d started, %d refused; want 8 and %d", n, ok, refused, n-8)
	}
	if _, err := r.flows.Begin(context.Background(), "bob", "sig", "res"); err != nil {
		t.Errorf("another user while alice is at her bound: %v", err)
	}
}

// TestBrowserBindingTwoSignIns checks that one browser may have two
// sign-ins under way (two servers' Connect buttons, in two tabs): the
// second's binding does not take the first's place, and each completes
// in that browser.
func TestBrowserBindingTwoSignIns(t *testing.T) {
	r := newRig(t, "", 0)
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar}
	connect := func() string {
		resp, err := b.Get(r.url + "/connect")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		state, _ := io.ReadAll(resp.Body)
		return string(state)
	}
	first, second := connect(), connect()
	for _, state := range []string{first, second} {
		resp, err := b.Get(r.url + oauthflow.CallbackPath + "?" + url.Values{"code": {"c"}, "state": {state}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("sign-in %s in the browser that started it: %d %s", state, resp.StatusCode, page)
		}
	}
}

// TestWaitCancelled checks that a waiter whose context ends stops
// waiting, also when the sign-in expired while its redirect was being
// completed (the extension still at work).
func TestWaitCancelled(t *testing.T) {
	r := newRig(t, "", time.Second)
	completing := make(chan chan struct{})
	r.sig.mu.Lock()
	r.sig.completing = completing
	r.sig.mu.Unlock()
	// The waiter must hold the sign-in before the redirect takes it: a
	// round whose waiter came too late (not found) is played again.
	for round := 1; ; round++ {
		start := time.Now()
		st, err := r.flows.Begin(context.Background(), "alice", "sig", "res")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		waited := make(chan error, 1)
		go func() {
			_, err := r.flows.Wait(ctx, st.State)
			waited <- err
		}()
		time.Sleep(100 * time.Millisecond)
		called := make(chan struct{})
		go func() {
			defer close(called)
			r.callback(t, url.Values{"code": {"c"}, "state": {st.State}}.Encode(), nil)
		}()
		release := <-completing                                    // the redirect came; the extension works on it
		time.Sleep(time.Until(start.Add(1300 * time.Millisecond))) // past the sign-in's expiry
		cancel()
		var got error
		select {
		case got = <-waited:
		case <-time.After(10 * time.Second):
			t.Error("Wait went on after its context ended")
		}
		close(release)
		<-called
		if got == nil {
			got = <-waited
		}
		if errors.Is(got, ext.ErrNotFound) && round < 5 {
			continue
		}
		if !errors.Is(got, context.Canceled) {
			t.Errorf("Wait after its context ended: %v, want context.Canceled", got)
		}
		return
	}
}
