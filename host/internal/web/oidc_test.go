package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/host/internal/oidclogin"
)

type noUsers struct{}

func (noUsers) Admitted(context.Context, oidclogin.Identity) error            { return nil }
func (noUsers) NotAdmitted(context.Context, oidclogin.Identity, string) error { return nil }

// TestOIDCSignInPage: without a provider the sign-in page has no provider
// button and the OIDC routes are not there; with one, the button comes
// first and carries next (a path here only); a provider that cannot be
// reached gets a page saying so, not a redirect.
func TestOIDCSignInPage(t *testing.T) {
	e := newEnv(t, nil)
	b := e.browser()
	if r := b.get("/settings/login"); r.code != http.StatusOK || strings.Contains(r.body, "oidc-signin") {
		t.Errorf("without a provider: %d, button shown %v", r.code, strings.Contains(r.body, "oidc-signin"))
	}
	if r := b.get(OIDCStartPath); r.code != http.StatusNotFound {
		t.Errorf("the start without a provider: %d", r.code)
	}

	l, err := oidclogin.New(oidclogin.Config{Name: "ACME SSO", Issuer: "http://127.0.0.1:1", ClientID: "c",
		ClientSecret: func(context.Context) (string, error) { return "s", nil },
		RedirectURL:  func() string { return "http://127.0.0.1/settings/oidc/callback" }, Users: noUsers{}})
	if err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, &Options{OIDC: l})
	b = e.browser()
	r := b.get("/settings/login?next=" + "%2Foauth%2Fauthorize%3Fclient_id%3Dc")
	if r.code != http.StatusOK || !strings.Contains(r.body, `href="/settings/oidc/start?next=%2foauth%2fauthorize%3fclient_id%3dc">Sign in with ACME SSO</a>`) ||
		strings.Index(r.body, "oidc-signin") > strings.Index(r.body, `name="token"`) {
		t.Errorf("the sign-in page with a provider: %d\n%s", r.code, r.body)
	}
	if r := b.get("/settings/login?next=https://evil.example/"); strings.Contains(r.body, "evil") {
		t.Errorf("a foreign next reached the button:\n%s", r.body)
	}
	sess := NewSessions(e.a, &Options{OIDC: l})
	if name, u := sess.ProviderLogin("/oauth/authorize?x=1"); name != "ACME SSO" || u != "/settings/oidc/start?next=%2Foauth%2Fauthorize%3Fx%3D1" {
		t.Errorf("ProviderLogin for the consent page: %q %q", name, u)
	}
	if _, u := sess.ProviderLogin("https://evil.example/"); u != "/settings/oidc/start" {
		t.Errorf("ProviderLogin with a foreign next: %q", u)
	}
	if name, u := NewSessions(e.a, nil).ProviderLogin("/x"); name != "" || u != "" {
		t.Errorf("ProviderLogin without a provider: %q %q", name, u)
	}
	if r := b.get(OIDCStartPath); r.code != http.StatusBadGateway || !strings.Contains(r.body, "could not be reached") {
		t.Errorf("the start with the provider down: %d\n%s", r.code, r.body)
	}
}

// TestOIDCRecheckEndsSession: Options.Recheck is asked about every
// request of a user's web session; a refusal ends that session (the user
// signs in again, or not), another error is logged and the session goes
// on; the operator's session is not asked about.
func TestOIDCRecheckEndsSession(t *testing.T) {
	var (
		mu     sync.Mutex
		asked  []string
		refuse bool
	)
	e := newEnv(t, &Options{Recheck: func(_ context.Context, user string) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, user)
		switch user {
		case "bob":
			if refuse {
				return &oidclogin.Refusal{User: user, Reason: "removed at the provider"}
			}
		case "carol":
			return errors.New("provider unreachable")
		}
		return nil
	}})
	alice, bob, carol := e.signIn("alice"), e.signIn("bob"), e.signIn("carol")
	op := e.browser()
	op.get("/settings/login")
	tok, _, err := e.a.CreateOperatorToken(context.Background(), "op")
	if err != nil {
		t.Fatal(err)
	}
	if r := op.postCSRF("/settings/login", url.Values{"token": {tok}}); r.code != http.StatusSeeOther {
		t.Fatalf("the operator's sign-in: %d", r.code)
	}
	mu.Lock()
	refuse = true
	mu.Unlock()
	if r := alice.get("/settings"); r.code != http.StatusOK {
		t.Errorf("alice: %d", r.code)
	}
	if r := carol.get("/settings"); r.code != http.StatusOK || !strings.Contains(e.logs.String(), "provider unreachable") {
		t.Errorf("carol, the provider unreachable: %d; want her session kept and the error logged", r.code)
	}
	if r := bob.get("/settings"); r.code != http.StatusSeeOther || !strings.Contains(r.hdr.Get("Location"), "/settings/login") {
		t.Errorf("bob, refused: %d %s; want sent to sign in", r.code, r.hdr.Get("Location"))
	}
	if r := bob.get("/settings"); r.code != http.StatusSeeOther {
		t.Errorf("bob's ended session again: %d", r.code)
	}
	if r := op.get("/status"); r.code != http.StatusOK {
		t.Errorf("the operator's status page: %d", r.code)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(asked, ","); !strings.Contains(got, "alice") || strings.Contains(got, "@operator") || strings.Count(got, "bob") < 2 ||
		!strings.Contains(e.logs.String(), "removed at the provider") {
		t.Errorf("asked about %q; log:\n%s", got, e.logs.String())
	}
}
