package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// userRow is a line of `agenthost user list --json`.
type userRow struct {
	Name       string
	Source     string
	Disabled   time.Time
	DisabledBy string
	Tokens     int
	Apps       int
	Groups     []string
}

func (e *env) users() map[string]userRow {
	e.t.Helper()
	var rows []userRow
	if err := json.Unmarshal([]byte(e.must("", "user", "list", "--json")), &rows); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]userRow{}
	for _, r := range rows {
		out[r.Name] = r
	}
	return out
}

// oauthApp connects an app for the passphrase gate's user (bob) and
// returns its access and refresh tokens.
func (e *env) oauthApp(client, redirect string) (access, refresh string) {
	e.t.Helper()
	hc := browse()
	f := passphraseForm(e.t, hc, e.authorizeURL(client, redirect, nil))
	f.Set("passphrase", gatePassphrase)
	_, hdr, page := fetch(e.t, hc, "POST", e.url+"/oauth/authorize", f)
	loc, _ := url.Parse(hdr.Get("Location"))
	if loc == nil || loc.Query().Get("code") == "" {
		e.t.Fatalf("no code from the passphrase gate: %v\n%s", hdr, page)
	}
	code, _, body := fetch(e.t, hc, "POST", e.url+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
		"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "client_id": {client}, "code_verifier": {pkceVerifier}})
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); code != http.StatusOK || err != nil || tok.RefreshToken == "" {
		e.t.Fatalf("tokens: %d %s", code, body)
	}
	return tok.AccessToken, tok.RefreshToken
}

// TestUserDisableAndDelete (issue 19): bob holds an open MCP session
// (go-sdk client, his token), a connected app (OAuth, the passphrase
// gate) and a running server process. `agenthost user disable bob`
// stops all of it by the time it returns: the session's next request
// fails, the token and the app's access token are refused and its refresh
// token too, his process is gone, and he cannot sign in (no login link,
// no new grant). alice is untouched. enable lets him sign in again, his
// old token staying revoked; delete removes him keeping his data folder,
// and --delete-data removes alice's.
func TestUserDisableAndDelete(t *testing.T) {
	b := build(t)
	mark := fmt.Sprintf("E2E_USERS_MARK=u19-%d", os.Getpid())
	e := gateHost(t, b, map[string]any{"extensions": map[string]any{"mcp": map[string]any{"path": b.extMCP, "config": map[string]any{
		"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes,
			"env": map[string]string{"E2E_USERS_MARK": strings.TrimPrefix(mark, "E2E_USERS_MARK=") + "-${user}", "NOTES_HOME": "${userDir}"}}},
	}}}})
	e.startServe()
	procs := func(user string) []int { return pidsWithEnv(mark + "-" + user) }

	tokenOf := func(user string) (string, string) {
		tok, stderr, code := e.run("", "token", "create", "--user", user, "--name", "laptop")
		if code != 0 {
			t.Fatalf("token create --user %s: %d %s", user, code, stderr)
		}
		return strings.TrimSpace(tok), regexp.MustCompile(`tok_[0-9a-f]+`).FindString(stderr)
	}
	bobTok, _ := tokenOf("bob")
	aliceTok, _ := tokenOf("alice")
	bobSess, err := connect(t, e.url, bobTok)
	if err != nil {
		t.Fatal(err)
	}
	aliceSess, err := connect(t, e.url, aliceTok)
	if err != nil {
		t.Fatal(err)
	}
	if !hasPrefix(bobSess.names(t), "notes__") || !hasPrefix(aliceSess.names(t), "notes__") {
		t.Fatalf("bob or alice has no notes tools: %v %v", bobSess.names(t), aliceSess.names(t))
	}
	if len(procs("bob")) != 1 || len(procs("alice")) != 1 {
		t.Fatalf("processes: bob %v, alice %v; want one each", procs("bob"), procs("alice"))
	}
	const redirect = "http://127.0.0.1:33419/cb"
	client := e.register(redirect)
	access, refresh := e.oauthApp(client, redirect)
	// A ping outside a session is 400; what matters is that the token
	// passes (not 401).
	if code, _ := e.mcpPing(access); code == http.StatusUnauthorized {
		t.Fatalf("the app's access token before: %d", code)
	}
	if u := e.users()["bob"]; u.Tokens != 1 || u.Apps != 1 || !u.Disabled.IsZero() {
		t.Errorf("bob before = %+v, want 1 token, 1 app, enabled", u)
	}

	out := e.must("", "user", "disable", "bob")
	if !strings.Contains(out, "disabled bob") {
		t.Errorf("user disable said %q", out)
	}
	// Everything of bob's is over now.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = bobSess.cs.ListTools(ctx, nil)
	cancel()
	if err == nil {
		t.Error("bob's open MCP session still answers after disable")
	}
	if code, _ := e.mcpPing(bobTok); code != http.StatusUnauthorized {
		t.Errorf("bob's token after disable: %d, want 401", code)
	}
	if code, _ := e.mcpPing(access); code != http.StatusUnauthorized {
		t.Errorf("bob's app's access token after disable: %d, want 401", code)
	}
	if code, _, body := fetch(t, browse(), "POST", e.url+"/oauth/token", url.Values{"grant_type": {"refresh_token"},
		"refresh_token": {refresh}, "client_id": {client}}); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
		t.Errorf("bob's app's refresh after disable: %d %s, want invalid_grant", code, body)
	}
	if p := procs("bob"); len(p) != 0 {
		t.Errorf("bob's server processes after disable: %v, want none", p)
	}
	// Sign-in refused: no login link, no new grant through the gate.
	if _, errOut, code := e.run("", "login-link", "--user", "bob"); code == 0 || !strings.Contains(errOut, "disabled") {
		t.Errorf("login-link for disabled bob: exit %d %q, want a refusal saying disabled", code, errOut)
	}
	hc := browse()
	f := passphraseForm(t, hc, e.authorizeURL(client, redirect, nil))
	f.Set("passphrase", gatePassphrase)
	if _, hdr, _ := fetch(t, hc, "POST", e.url+"/oauth/authorize", f); !strings.Contains(hdr.Get("Location"), "error=access_denied") {
		t.Errorf("a new grant for disabled bob: Location %q, want error=access_denied", hdr.Get("Location"))
	}
	// alice is untouched.
	if !hasPrefix(aliceSess.names(t), "notes__") || len(procs("alice")) != 1 {
		t.Error("alice's session or process suffered from bob's disable")
	}
	if u := e.users()["bob"]; u.Disabled.IsZero() || u.DisabledBy != "operator" || u.Tokens != 0 || u.Apps != 0 {
		t.Errorf("bob after disable = %+v, want disabled by the operator, nothing held", u)
	}

	// Enabled: he may sign in again; what was revoked stays revoked.
	e.must("", "user", "enable", "bob")
	if out := e.must("", "login-link", "--user", "bob"); !strings.Contains(out, "/settings/login?code=") {
		t.Errorf("login-link after enable: %q", out)
	}
	if code, _ := e.mcpPing(bobTok); code != http.StatusUnauthorized {
		t.Errorf("bob's old token after enable: %d, want 401", code)
	}
	newTok, _ := tokenOf("bob")
	if code, _ := e.mcpPing(newTok); code == http.StatusUnauthorized {
		t.Errorf("bob's new token after enable: %d, want it accepted", code)
	}

	// Delete keeps the data folder unless told.
	bobDir := filepath.Join(e.dir, "data", "users", "bob")
	if _, err := os.Stat(bobDir); err != nil {
		t.Fatalf("bob has no data folder to keep: %v", err)
	}
	out = e.must("", "user", "delete", "bob")
	if !strings.Contains(out, "kept") || !strings.Contains(out, bobDir) {
		t.Errorf("user delete bob said %q, want the kept folder %s", out, bobDir)
	}
	if _, err := os.Stat(bobDir); err != nil {
		t.Errorf("bob's data folder after delete without --delete-data: %v", err)
	}
	if code, _ := e.mcpPing(newTok); code != http.StatusUnauthorized {
		t.Errorf("bob's token after delete: %d, want 401", code)
	}
	if _, ok := e.users()["bob"]; ok {
		t.Error("bob is still listed after delete")
	}
	aliceDir := filepath.Join(e.dir, "data", "users", "alice")
	out = e.must("", "user", "delete", "alice", "--delete-data")
	if !strings.Contains(out, "data folder") {
		t.Errorf("user delete alice --delete-data said %q", out)
	}
	if _, err := os.Stat(aliceDir); !os.IsNotExist(err) {
		t.Errorf("alice's data folder after --delete-data: %v, want gone", err)
	}
	if p := procs("alice"); len(p) != 0 {
		t.Errorf("alice's processes after delete: %v", p)
	}
	if _, errOut, code := e.run("", "user", "disable", "nobody"); code == 0 || !strings.Contains(errOut, "nobody") {
		t.Errorf("disabling an unknown user: exit %d %q, want a refusal naming it", code, errOut)
	}
}

// TestGroupLendsSharedServer (issue 19): a shared server lent to
// "group:eng" is lent to its members only. alice, whom the operator puts
// in eng, switches it on and gets its tools; bob, not in eng, is refused
// (400 naming it) and never sees them; alice taken out of eng loses them.
func TestGroupLendsSharedServer(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"team": map[string]any{"command": b.notes, "credentials": "shared", "users": []string{"group:eng"},
			"sharedAuthority": "the team's account"},
	}})
	e.startServe()
	e.must("operator-team-token", "secret", "set", "--operator", "--ext", "mcp", "token:team")
	tok := func(u string) string {
		return strings.TrimSpace(e.must("", "token", "create", "--user", u, "--name", "e2e"))
	}
	alice, bob := tok("alice"), tok("bob")
	if out := e.must("", "user", "set-groups", "alice", "eng,ops"); !strings.Contains(out, "eng,ops") {
		t.Errorf("set-groups said %q", out)
	}
	if g := e.users()["alice"].Groups; strings.Join(g, ",") != "eng,ops" {
		t.Errorf("alice's groups listed %v", g)
	}
	hasTeam := func(token string) bool {
		_, tools := e.api("GET", "/api/v1/tools", token, "")
		return strings.Contains(tools, `"team/`)
	}
	// alice, not active yet, switches it on: lent through her group.
	if code, body := e.api("PUT", "/api/v1/settings/mcp/servers", alice, `{"team": true}`); code/100 != 2 {
		t.Fatalf("alice (in eng) switching team on: HTTP %d %s", code, body)
	}
	eventually(t, "alice gets team's tools", func() bool { return hasTeam(alice) })
	if code, body := e.api("PUT", "/api/v1/settings/mcp/servers", bob, `{"team": true}`); code != http.StatusBadRequest || !strings.Contains(body, "team") {
		t.Errorf("bob (not in eng) switching team on: HTTP %d %s; want 400 naming team", code, body)
	}
	if hasTeam(bob) {
		t.Error("bob, not in eng, has team's tools")
	}
	// Out of the group: her next request activates her without it.
	e.must("", "user", "set-groups", "alice", "ops")
	eventually(t, "alice loses team's tools", func() bool { return !hasTeam(alice) })
	if _, errOut, code := e.run("", "user", "set-groups", "alice", "bad,,x\x01"); code == 0 {
		t.Errorf("set-groups with a control character: exit 0 %q", errOut)
	}
}

// TestUserDisableWithoutRunningHost: with no host running, `agenthost
// user disable` (served in-process by the CLI) revokes the user's OAuth
// grants in oauth.db too, so that once the host is back the app's refresh
// token is refused; the data folder's users are listed, those of an
// install from before the users table included.
func TestUserDisableWithoutRunningHost(t *testing.T) {
	e := gateHost(t, build(t), map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	e.startServe()
	const redirect = "http://127.0.0.1:33420/cb"
	client := e.register(redirect)
	_, refresh := e.oauthApp(client, redirect)
	e.must("", "settings", "set", "--user", "carol", "servers", `{}`)
	e.stopServe()

	if out := e.must("", "user", "disable", "bob"); !strings.Contains(out, "disabled bob") {
		t.Errorf("user disable without a host: %q", out)
	}
	users := e.users()
	if u := users["bob"]; u.Disabled.IsZero() || u.Apps != 0 {
		t.Errorf("bob = %+v, want disabled, no apps", u)
	}
	if _, ok := users["carol"]; !ok {
		t.Errorf("carol, who has only settings, is not listed: %v", users)
	}
	e.startServe()
	if code, _, body := fetch(t, browse(), "POST", e.url+"/oauth/token", url.Values{"grant_type": {"refresh_token"},
		"refresh_token": {refresh}, "client_id": {client}}); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
		t.Errorf("bob's app's refresh after an offline disable: %d %s, want invalid_grant", code, body)
	}
}
