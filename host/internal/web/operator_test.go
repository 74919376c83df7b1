package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestOperatorUsersPageGuarded: the users page and its actions are the
// operator's: a user's session gets 403 and changes nothing; the
// operator's forms need the session's CSRF token (403 and nothing changed
// without it); the operator API refuses a user's token (403) and no token
// (401).
func TestOperatorUsersPageGuarded(t *testing.T) {
	adm := &TokenAdmin{}
	e := newEnv(t, &Options{Users: adm})
	adm.Store = e.a
	ctx := context.Background()
	bobTok := e.token("bob")

	alice := e.signIn("alice")
	if r := alice.get("/users"); r.code != http.StatusForbidden {
		t.Errorf("alice's GET /users: %d, want 403", r.code)
	}
	if r := alice.postCSRF("/users/bob/disable", nil); r.code != http.StatusForbidden {
		t.Errorf("alice's POST /users/bob/disable: %d, want 403", r.code)
	}

	opTok, _, _ := e.a.CreateOperatorToken(ctx, "ops")
	op := e.browser()
	op.get("/settings/login")
	if r := op.postCSRF("/settings/login", url.Values{"token": {opTok}}); r.code != http.StatusSeeOther {
		t.Fatalf("operator sign-in: %d", r.code)
	}
	r := op.get("/users")
	if r.code != 200 || !strings.Contains(r.body, `id="user-alice"`) || !strings.Contains(r.body, `id="user-bob"`) {
		t.Fatalf("operator's /users: %d\n%s", r.code, r.body)
	}
	if r := op.post("/users/bob/disable", url.Values{"_csrf": {"forged"}}); r.code != http.StatusForbidden {
		t.Errorf("a forged disable: %d, want 403", r.code)
	}
	if u, _ := e.a.User(ctx, "bob"); u.IsDisabled() {
		t.Fatal("bob was disabled by a user's or a forged form")
	}
	if r := op.postCSRF("/users/bob/disable", nil); r.code != http.StatusSeeOther || !strings.HasPrefix(r.hdr.Get("Location"), "/users?done=") {
		t.Errorf("the operator's disable: %d %s", r.code, r.hdr.Get("Location"))
	}
	if u, _ := e.a.User(ctx, "bob"); !u.IsDisabled() || u.DisabledBy != "operator" {
		t.Errorf("bob after the operator's disable: %+v", u)
	}
	if _, err := e.a.Verify(ctx, bobTok); err == nil {
		t.Error("bob's token works after the page disabled him")
	}

	// Revoking a token from the page: only under its own user's row.
	daveTok, daveInfo, _ := e.a.CreateToken(ctx, "dave", "laptop")
	if r := op.postCSRF("/users/alice/tokens/revoke", url.Values{"id": {daveInfo.ID}}); r.code != http.StatusNotFound {
		t.Errorf("revoking dave's token under alice: %d, want 404", r.code)
	}
	if _, err := e.a.Verify(ctx, daveTok); err != nil {
		t.Errorf("dave's token after a revoke under another user: %v", err)
	}
	if r := op.postCSRF("/users/dave/tokens/revoke", url.Values{"id": {daveInfo.ID}}); r.code != http.StatusSeeOther {
		t.Errorf("revoking dave's token: %d %s", r.code, r.body)
	}
	if _, err := e.a.Verify(ctx, daveTok); err == nil {
		t.Error("dave's token works after the operator revoked it")
	}

	if r := e.api("GET", "/api/operator/v1/users", e.token("carol"), ""); r.code != http.StatusForbidden {
		t.Errorf("operator API with a user's token: %d, want 403", r.code)
	}
	if r := e.api("GET", "/api/operator/v1/users", "", ""); r.code != http.StatusUnauthorized {
		t.Errorf("operator API without a token: %d, want 401", r.code)
	}
	if r := e.api("POST", "/api/operator/v1/users/bob/enable", opTok, ""); r.code != 200 {
		t.Errorf("operator API enable: %d %s", r.code, r.body)
	}
	if u, _ := e.a.User(ctx, "bob"); u.IsDisabled() {
		t.Error("bob still disabled after the API's enable")
	}
}
