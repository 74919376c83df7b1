package e2e_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Upgrades keep data (issue 18): each folder under testdata/upgrade holds
// a data folder written by the binaries of one version of agenthost, and
// what was stored in it (fixture.json). TestUpgradeFromFixtures serves a
// copy of each with this tree's binaries and checks that the user, their
// token, their settings, their secret and an OAuth grant issued to an app
// all still work. The first fixture was written by the binaries of the
// tree before the stores had a migration tool: the upgrade every install
// of that time makes.
//
// To add the fixture of a release (once, when it is tagged), run
//
//	AGENTHOST_WRITE_FIXTURE=v0.2.0 AGENTHOST_FIXTURE_COMMIT=$(git rev-parse HEAD) \
//		go test -run TestUpgradeFromFixtures ./examples/e2e/
//
// with that release's tree: it writes testdata/upgrade/v0.2.0, then checks
// it like the others. Commit the folder.

// fixturePort is where fixtures are served: an OAuth grant names the
// host's URL (issuer, resource), so a fixture is always served at the one
// it was written at.
const fixturePort = "47391"

// fixture is what a fixture's fixture.json records.
type fixture struct {
	// Commit is the tree whose binaries wrote the data folder.
	Commit string `json:"commit"`
	// User, Token and TokenName: a user and a host token of theirs.
	User      string `json:"user"`
	Token     string `json:"token"`
	TokenName string `json:"tokenName"`
	// Secret is the value of the user's mcp secret token:notes.
	Secret string `json:"secret"`
	// Servers is the user's "MCP servers" section as stored.
	Servers map[string]bool `json:"servers"`
	// An app's OAuth grant: its client, redirect URI and refresh token,
	// which lives until RefreshExpires (oauth.refreshTokenDays is 365 at
	// most); past it, the grant is still checked as listed.
	OAuthClient    string    `json:"oauthClient"`
	OAuthRedirect  string    `json:"oauthRedirect"`
	RefreshToken   string    `json:"refreshToken"`
	RefreshExpires time.Time `json:"refreshExpires"`
}

// fixtureEnv is the host a fixture is written and served with; dataDir
// is copied into its folder when given.
func fixtureEnv(t *testing.T, b bins, data string) *env {
	t.Helper()
	hash := strings.TrimSpace(newEnv(t, b, nil).must(gatePassphrase+"\n", "oauth", "hash-passphrase"))
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes":   map[string]any{"command": b.notes, "args": []string{"-reveal-token"}},
		"scratch": map[string]any{"command": b.notes, "availability": "opt-in"},
	}}, map[string]any{
		"listen": "127.0.0.1:" + fixturePort,
		"oauth":  map[string]any{"passphraseHash": hash, "passphraseUser": "alice", "refreshTokenDays": 365},
	})
	if data != "" {
		if err := copyData(data, filepath.Join(e.dir, "data")); err != nil {
			t.Fatalf("copying the fixture's data folder: %v", err)
		}
	}
	return e
}

// copyData copies a data folder's files (not its socket), owner-only as
// the host keeps them (git keeps no modes but the executable bit).
func copyData(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
}

func TestUpgradeFromFixtures(t *testing.T) {
	b := build(t)
	if name := os.Getenv("AGENTHOST_WRITE_FIXTURE"); name != "" {
		writeFixture(t, b, filepath.Join("testdata", "upgrade", name))
	}
	dirs, err := filepath.Glob(filepath.Join("testdata", "upgrade", "*", "fixture.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures under testdata/upgrade: %v", err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var f fixture
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			checkFixture(t, b, filepath.Join(dir, "data"), f)
		})
	}
}

// checkFixture serves a copy of data with this tree's binaries and checks
// that everything f records still works.
func checkFixture(t *testing.T, b bins, data string, f fixture) {
	e := fixtureEnv(t, b, data)
	e.startServe()
	checkServed(t, e, f)
}

// checkServed checks that everything f records works on the serving host
// of e.
func checkServed(t *testing.T, e *env, f fixture) {
	t.Helper()

	// The token: listed by name, and it authenticates its user.
	if out := e.must("", "token", "list", "--user", f.User); !strings.Contains(out, f.TokenName) {
		t.Errorf("token list after the upgrade:\n%s", out)
	}
	if code, body := e.api("GET", "/api/v1/me", f.Token, ""); code != http.StatusOK || !strings.Contains(body, `"user":"`+f.User+`"`) {
		t.Errorf("the token after the upgrade: HTTP %d %s", code, body)
	}
	// The settings, as stored.
	code, body := e.api("GET", "/api/v1/settings/mcp/servers", f.Token, "")
	var v struct {
		Values  map[string]bool
		Secrets map[string]bool
	}
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil {
		t.Fatalf("settings after the upgrade: HTTP %d %v %s", code, err, body)
	}
	for k, want := range f.Servers {
		if v.Values[k] != want {
			t.Errorf("setting %s after the upgrade: %v, want %v (%s)", k, v.Values[k], want, body)
		}
	}
	// The secret reaches the user's server (notes -reveal-token says it).
	if !v.Secrets["token:notes"] {
		t.Errorf("the secret token:notes is not set after the upgrade: %s", body)
	}
	if out := e.must("", "call", "--user", f.User, "notes/whoami", "{}"); !strings.Contains(out, f.Secret) {
		t.Errorf("notes/whoami after the upgrade does not carry the stored secret:\n%s", out)
	}
	if names := e.toolNames(f.User); !hasPrefix(names, "scratch/") {
		t.Errorf("the opt-in server the user switched on is off after the upgrade: %v", names)
	}
	// The app's grant: listed among the user's connected apps; while its
	// refresh token lives, it still refreshes, and the new access token
	// opens a session on /mcp.
	if code, body := e.api("GET", "/api/v1/grants", f.Token, ""); code != http.StatusOK || !strings.Contains(body, f.OAuthClient) {
		t.Errorf("the app's grant is not listed after the upgrade: HTTP %d %s", code, body)
	}
	if time.Now().After(f.RefreshExpires.Add(-time.Hour)) {
		t.Logf("the fixture's refresh token expired on %s: checked the grant as listed only", f.RefreshExpires.Format(time.DateOnly))
		return
	}
	code, _, body = fetch(t, browse(), "POST", e.url+"/oauth/token", url.Values{"grant_type": {"refresh_token"},
		"refresh_token": {f.RefreshToken}, "client_id": {f.OAuthClient}})
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); code != http.StatusOK || err != nil || tok.AccessToken == "" {
		t.Fatalf("refreshing the app's grant after the upgrade: %d %s", code, body)
	}
	if code := mcpInitialize(t, e.url, tok.AccessToken); code != http.StatusOK {
		t.Errorf("initialize with the refreshed access token: HTTP %d", code)
	}
}

// mcpInitialize opens an MCP session with token and returns the status.
func mcpInitialize(t *testing.T, base, token string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"upgrade","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// writeFixture writes a fixture with this tree's binaries into dir: a
// user with a token, settings, a secret and an app's OAuth grant.
func writeFixture(t *testing.T, b bins, dir string) {
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists: a fixture is written once", dir)
	}
	e := fixtureEnv(t, b, "")
	e.startServe()
	f := makeFixture(t, e)
	e.stopServe()

	if err := copyData(filepath.Join(e.dir, "data"), filepath.Join(dir, "data")); err != nil {
		t.Fatalf("copying the data folder: %v", err)
	}
	raw, _ := json.MarshalIndent(f, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "fixture.json"), append(raw, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote the fixture %s", dir)
}

// makeFixture stores, through the serving host of e, a user with a token,
// settings, a secret and an app's OAuth grant, and returns what it stored.
func makeFixture(t *testing.T, e *env) fixture {
	t.Helper()
	f := fixture{User: "alice", TokenName: "fixture", Secret: "alice-fixture-secret-7f3a",
		Servers: map[string]bool{"notes": true, "scratch": true}, OAuthRedirect: "http://127.0.0.1:33419/cb"}
	f.Commit = strings.TrimSpace(os.Getenv("AGENTHOST_FIXTURE_COMMIT"))
	f.Token = strings.TrimSpace(e.must("", "token", "create", "--user", f.User, "--name", f.TokenName))
	e.must("", "settings", "set", "--user", f.User, "--ext", "mcp", "servers", `{"notes":true,"scratch":true}`)
	e.must(f.Secret, "secret", "set", "--user", f.User, "--ext", "mcp", "token:notes")

	hc := browse()
	f.OAuthClient = e.register(f.OAuthRedirect)
	form := passphraseForm(t, hc, e.authorizeURL(f.OAuthClient, f.OAuthRedirect, nil))
	form.Set("passphrase", gatePassphrase)
	_, hdr, _ := fetch(t, hc, "POST", e.url+"/oauth/authorize", form)
	loc, err := url.Parse(hdr.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("no code from the passphrase gate: %q", hdr.Get("Location"))
	}
	code, _, body := fetch(t, hc, "POST", e.url+"/oauth/token", url.Values{"grant_type": {"authorization_code"},
		"code": {loc.Query().Get("code")}, "redirect_uri": {f.OAuthRedirect}, "client_id": {f.OAuthClient}, "code_verifier": {pkceVerifier}})
	var tok struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); code != http.StatusOK || err != nil || tok.RefreshToken == "" {
		t.Fatalf("the app's tokens: %d %s", code, body)
	}
	f.RefreshToken = tok.RefreshToken
	f.RefreshExpires = time.Now().Add(365 * 24 * time.Hour).UTC().Truncate(time.Second)
	if out := e.must("", "call", "--user", f.User, "notes/whoami", "{}"); !strings.Contains(out, f.Secret) {
		t.Fatalf("the secret does not reach notes:\n%s", out)
	}
	return f
}
