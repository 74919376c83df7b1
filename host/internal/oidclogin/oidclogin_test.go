package oidclogin

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// keyProvider serves a discovery document and a JWKS of keys the test
// makes, so that go-oidc's verifier checks tokens the test signs.
type keyProvider struct {
	srv  *httptest.Server
	mu   sync.Mutex
	keys []jose.JSONWebKey // public keys served
	// idToken is what the token endpoint answers; userinfo what the
	// userinfo endpoint does.
	idToken  string
	userinfo map[string]any
}

func newKeyProvider(t *testing.T) *keyProvider {
	kp := &keyProvider{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": kp.srv.URL, "authorization_endpoint": kp.srv.URL + "/auth", "token_endpoint": kp.srv.URL + "/token",
			"jwks_uri": kp.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
			"userinfo_endpoint": kp.srv.URL + "/userinfo",
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: kp.keys})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 60, "id_token": kp.idToken})
	})
	mux.HandleFunc("/userinfo", func(w http.ResponseWriter, r *http.Request) {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(kp.userinfo)
	})
	kp.srv = httptest.NewServer(mux)
	t.Cleanup(kp.srv.Close)
	return kp
}

// newKey makes a key; published adds its public half to the JWKS.
func (kp *keyProvider) newKey(t *testing.T, kid string, published bool) jose.Signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if published {
		kp.mu.Lock()
		kp.keys = append(kp.keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
		kp.mu.Unlock()
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k, KeyID: kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sign(t *testing.T, s jose.Signer, c map[string]any) string {
	raw, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

type noUsers struct{}

func (noUsers) Admitted(context.Context, Identity) error            { return nil }
func (noUsers) NotAdmitted(context.Context, Identity, string) error { return nil }

func newTestLogin(t *testing.T, issuer string) *Login {
	l, err := New(Config{Issuer: issuer, ClientID: "agenthost",
		ClientSecret: func(context.Context) (string, error) { return "s", nil },
		RedirectURL:  func() string { return "http://127.0.0.1/settings/oidc/callback" },
		Users:        noUsers{}, AllowedDomains: []string{"example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestVerifyIDToken: go-oidc's verifier, with keys the test makes, takes
// a good ID token and refuses each broken one (wrong audience, expired,
// wrong nonce, wrong issuer, a signature by a key the provider does not
// publish); after the provider rotates to a new key, a token signed with
// it verifies (the key set is fetched again for an unknown key ID).
func TestVerifyIDToken(t *testing.T) {
	kp := newKeyProvider(t)
	key1 := kp.newKey(t, "k1", true)
	rogue := kp.newKey(t, "k1", false) // same key ID, not published
	l := newTestLogin(t, kp.srv.URL)
	ctx := context.Background()
	p, err := l.discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := func() map[string]any {
		return map[string]any{"iss": kp.srv.URL, "aud": "agenthost", "sub": "s1", "nonce": "n1",
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "email": "alice@example.com", "email_verified": true}
	}
	claims, sub, err := l.verify(ctx, p, sign(t, key1, good()), "n1")
	if err != nil || sub != "s1" || claims["email"] != "alice@example.com" {
		t.Fatalf("a good token: %v %q %v", claims, sub, err)
	}
	for name, tc := range map[string]struct {
		edit   func(map[string]any)
		signer jose.Signer
		nonce  string
		want   string
	}{
		"wrong audience": {edit: func(c map[string]any) { c["aud"] = "another-client" }, want: "audience"},
		"expired":        {edit: func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }, want: "expired"},
		"wrong nonce":    {nonce: "n2", want: "nonce"},
		"no nonce":       {edit: func(c map[string]any) { delete(c, "nonce") }, want: "nonce"},
		"wrong issuer":   {edit: func(c map[string]any) { c["iss"] = "https://evil.example" }, want: "different provider"},
		"bad signature":  {signer: rogue, want: "signature"},
	} {
		c := good()
		if tc.edit != nil {
			tc.edit(c)
		}
		s := key1
		if tc.signer != nil {
			s = tc.signer
		}
		nonce := "n1"
		if tc.nonce != "" {
			nonce = tc.nonce
		}
		if _, _, err := l.verify(ctx, p, sign(t, s, c), nonce); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error about %q", name, err, tc.want)
		}
	}
	key2 := kp.newKey(t, "k2", true) // the provider rotates
	if _, _, err := l.verify(ctx, p, sign(t, key2, good()), "n1"); err != nil {
		t.Fatalf("a token signed with the rotated-in key: %v", err)
	}
}

// TestIdentityAndAdmission: the user's ID from the claim (a verified,
// lowercased email by default), groups from the groups claim, and the
// rule's refusals naming why.
func TestIdentityAndAdmission(t *testing.T) {
	l := newTestLogin(t, "https://idp.example")
	l.cfg.AllowedGroups = []string{"staff"}
	l.cfg.AllowedUsers = []string{"zed@other.org"}
	l.cfg.ValidUser = func(s string) bool { return !strings.ContainsAny(s, " /") }
	for _, tc := range []struct {
		claims  map[string]any
		user    string
		refused string // part of the refusal's reason; "" admits
	}{
		{map[string]any{"email": "Alice@Example.com", "email_verified": true}, "alice@example.com", ""},
		{map[string]any{"email": "alice@example.com", "email_verified": false}, "", "verified email"},
		{map[string]any{"email": "alice@example.com"}, "", "verified email"},
		{map[string]any{"email": "bob@other.org", "email_verified": "true", "groups": []any{"staff"}}, "bob@other.org", ""},
		{map[string]any{"email": "bob@other.org", "email_verified": true, "groups": "staff"}, "bob@other.org", ""},
		{map[string]any{"email": "zed@other.org", "email_verified": true}, "zed@other.org", ""},
		{map[string]any{"email": "carol@other.org", "email_verified": true, "groups": []any{"guests"}}, "carol@other.org",
			"carol@other.org is not in an allowed domain; you are not in an allowed group; carol@other.org is not on the list"},
		{map[string]any{"email": "a b@example.com", "email_verified": true}, "", "cannot be a user name"},
	} {
		id, err := l.identity(tc.claims, "sub")
		if err == nil {
			if reason := l.admit(id); reason != "" {
				err = &Refusal{User: id.User, Reason: reason}
			}
		}
		var r *Refusal
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%v: refused: %v", tc.claims, err)
		case tc.refused != "" && (!errors.As(err, &r) || !strings.Contains(r.Reason, tc.refused)):
			t.Errorf("%v: got %v, want a refusal with %q", tc.claims, err, tc.refused)
		case tc.user != "" && id.User != tc.user:
			t.Errorf("%v: user %q, want %q", tc.claims, id.User, tc.user)
		}
	}
	// Another claim as the user's ID: taken as it is, no email needed.
	l.cfg.UserClaim = "preferred_username"
	if id, err := l.identity(map[string]any{"preferred_username": "dave"}, "s"); err != nil || id.User != "dave" {
		t.Errorf("preferred_username: %+v %v", id, err)
	}
	if _, err := l.identity(map[string]any{}, "s"); err == nil || !strings.Contains(err.Error(), "no preferred_username claim") {
		t.Errorf("no claim: %v", err)
	}
}

// TestFinishUserinfo: the claims an ID token lacks come from the userinfo
// endpoint, but only for the same subject; a callback whose state is not
// the browser's is refused before anything is exchanged.
func TestFinishUserinfo(t *testing.T) {
	kp := newKeyProvider(t)
	key := kp.newKey(t, "k1", true)
	l := newTestLogin(t, kp.srv.URL)
	ctx := context.Background()
	_, st, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	kp.mu.Lock()
	kp.idToken = sign(t, key, map[string]any{"iss": kp.srv.URL, "aud": "agenthost", "sub": "s1", "nonce": st.Nonce,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()})
	kp.userinfo = map[string]any{"sub": "s1", "email": "alice@example.com", "email_verified": true}
	kp.mu.Unlock()
	q := map[string][]string{"code": {"c"}, "state": {st.State}}
	if user, err := l.Finish(ctx, st, q); err != nil || user != "alice@example.com" {
		t.Errorf("the email from userinfo: %q %v", user, err)
	}
	kp.mu.Lock()
	kp.userinfo["sub"] = "s2"
	kp.mu.Unlock()
	if _, err := l.Finish(ctx, st, q); err == nil || !strings.Contains(err.Error(), "another subject") {
		t.Errorf("userinfo of another subject: %v", err)
	}
	if _, err := l.Finish(ctx, st, map[string][]string{"code": {"c"}, "state": {"other"}}); !errors.Is(err, ErrBadState) {
		t.Errorf("another state: %v", err)
	}
	if _, err := l.Finish(ctx, State{}, map[string][]string{"code": {"c"}, "state": {""}}); !errors.Is(err, ErrBadState) {
		t.Errorf("no pending sign-in: %v", err)
	}
	var pe *ProviderError
	if _, err := l.Finish(ctx, st, map[string][]string{"error": {"access_denied"}}); !errors.As(err, &pe) || pe.Code != "access_denied" {
		t.Errorf("the provider's refusal: %v", err)
	}
}
