package web

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestAgentSnippets: each app's snippet is valid in its format and carries
// the URL and, where the app takes one, the token in the header the app's
// documentation names; a snippet no token was made for has the
// placeholder.
func TestAgentSnippets(t *testing.T) {
	const u, tok = "https://agents.example.com/mcp", "ah_TESTTOKEN"
	byID := func(apps []agentApp) map[string]agentApp {
		m := map[string]agentApp{}
		for _, a := range apps {
			m[a.ID] = a
		}
		return m
	}
	for _, id := range []string{"claude-desktop", "claude-code", "vscode", "cursor", "http"} {
		apps := byID(agentApps(u, id, tok))
		for other, a := range apps {
			if other != id && strings.Contains(a.Snippet, tok) {
				t.Errorf("%s's token is in %s's snippet", id, other)
			}
			if other != id && a.Token && !strings.Contains(a.Snippet, tokenPlaceholder) {
				t.Errorf("%s: no placeholder: %s", other, a.Snippet)
			}
		}
		if !apps[id].HasToken {
			t.Errorf("%s: HasToken not set", id)
		}
	}
	apps := byID(agentApps(u, "", ""))
	if a := apps["claude-connector"]; a.Snippet != u || a.Token {
		t.Errorf("connector: %+v", a)
	}
	for id, a := range byID(agentApps(u, "x", tok)) {
		if !strings.Contains(a.Snippet, u) || a.Source == "" {
			t.Errorf("%s: no URL or source: %+v", id, a)
		}
	}

	get := func(id string) agentApp { return byID(agentApps(u, id, tok))[id] }
	var desktop struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
			Env     map[string]string
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(get("claude-desktop").Snippet), &desktop); err != nil {
		t.Fatal(err)
	}
	d := desktop.MCPServers[agentServerName]
	if d.Command != "npx" || strings.Join(d.Args, " ") != "-y mcp-remote "+u+" --header Authorization:${AGENTHOST_AUTH}" ||
		d.Env["AGENTHOST_AUTH"] != "Bearer "+tok {
		t.Errorf("claude desktop: %+v", d)
	}
	var vscode struct {
		Servers map[string]struct {
			Type, URL string
			Headers   map[string]string
		}
	}
	if err := json.Unmarshal([]byte(get("vscode").Snippet), &vscode); err != nil {
		t.Fatal(err)
	}
	if v := vscode.Servers[agentServerName]; v.Type != "http" || v.URL != u || v.Headers["Authorization"] != "Bearer "+tok {
		t.Errorf("vscode: %+v", v)
	}
	var cursor struct {
		MCPServers map[string]struct {
			URL     string
			Headers map[string]string
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(get("cursor").Snippet), &cursor); err != nil {
		t.Fatal(err)
	}
	if c := cursor.MCPServers[agentServerName]; c.URL != u || c.Headers["Authorization"] != "Bearer "+tok {
		t.Errorf("cursor: %+v", c)
	}
	// The OAuth variants carry no header.
	for _, id := range []string{"vscode", "cursor", "claude-code"} {
		a := get(id)
		if a.OAuth == "" || strings.Contains(a.OAuth, "Authorization") || !strings.Contains(a.OAuth, u) {
			t.Errorf("%s OAuth: %q", id, a.OAuth)
		}
		if id != "claude-code" && !json.Valid([]byte(a.OAuth)) {
			t.Errorf("%s OAuth is not JSON: %s", id, a.OAuth)
		}
	}
	if got, want := get("claude-code").Snippet, `claude mcp add --transport http agenthost `+u+` --header "Authorization: Bearer `+tok+`"`; got != want {
		t.Errorf("claude code:\n got %s\nwant %s", got, want)
	}
	if got := get("http").Snippet; got != "URL: "+u+"\nAuthorization: Bearer "+tok {
		t.Errorf("http: %q", got)
	}
	// mcp-remote refuses plain http beyond localhost without --allow-http;
	// a URL the shell would split is quoted.
	if a := byID(agentApps("http://10.0.0.5:8080/mcp", "", ""))["claude-desktop"]; !strings.Contains(a.Snippet, `"--allow-http"`) {
		t.Errorf("no --allow-http: %s", a.Snippet)
	}
	if a := byID(agentApps("http://127.0.0.1:8080/mcp", "", ""))["claude-desktop"]; strings.Contains(a.Snippet, "allow-http") {
		t.Errorf("--allow-http on loopback: %s", a.Snippet)
	}
	if a := byID(agentApps("https://h.example/a b/mcp", "", ""))["claude-code"]; !strings.Contains(a.Snippet, `'https://h.example/a b/mcp'`) {
		t.Errorf("not quoted: %s", a.Snippet)
	}
}

// TestAgentsPage: the signed-in user's "Connect your agent" shows every
// app's set-up for the MCP URL; the button (CSRF-checked) makes a token
// named for the app, shows it once in that app's snippet, and it works.
func TestAgentsPage(t *testing.T) {
	e := newEnv(t, &Options{MCPURL: "https://agents.example.com/mcp"})
	b := e.signIn("alice")
	if !strings.Contains(b.get("/settings").body, `href="/settings/agents"`) {
		t.Error("the settings page does not link to Connect your agent")
	}
	r := b.get("/settings/agents")
	if r.code != 200 || !strings.Contains(r.body, "https://agents.example.com/mcp") || strings.Contains(r.body, "ah_") {
		t.Fatalf("page: %d\n%s", r.code, r.body)
	}
	for _, id := range []string{"claude-connector", "claude-desktop", "claude-code", "vscode", "cursor", "http"} {
		if !strings.Contains(r.body, `id="snippet-`+id+`"`) {
			t.Errorf("no snippet for %s", id)
		}
	}
	if strings.Contains(r.body, `id="token-claude-connector"`) || !strings.Contains(r.body, `id="token-claude-code"`) {
		t.Error("token buttons: the connector must have none, Claude Code one")
	}
	// Without the CSRF token: refused, nothing made.
	if r := b.post("/settings/agents/token", url.Values{"app": {"claude-code"}}); r.code != http.StatusForbidden {
		t.Errorf("no CSRF: %d", r.code)
	}
	if r := b.postCSRF("/settings/agents/token", url.Values{"app": {"claude-connector"}}); r.code != 404 {
		t.Errorf("a token for the connector: %d", r.code)
	}
	r = b.postCSRF("/settings/agents/token", url.Values{"app": {"claude-code"}})
	m := regexp.MustCompile(`(?s)id="snippet-claude-code"[^>]*>([^<]*)</pre>`).FindStringSubmatch(r.body)
	if r.code != 200 || m == nil || !strings.Contains(r.body, "shown only this once") {
		t.Fatalf("create: %d\n%s", r.code, r.body)
	}
	tok := regexp.MustCompile(`Bearer (ah_[A-Za-z0-9_-]{43})`).FindStringSubmatch(html.UnescapeString(m[1]))
	if tok == nil {
		t.Fatalf("no token in the snippet: %s", m[1])
	}
	if strings.Count(r.body, tok[1]) != 1 {
		t.Errorf("the token is shown %d times", strings.Count(r.body, tok[1]))
	}
	if r := e.api("GET", "/api/v1/me", tok[1], ""); !strings.Contains(r.body, `"user":"alice"`) {
		t.Fatalf("the new token does not work: %s", r.body)
	}
	page := b.get("/settings").body
	if strings.Contains(page, tok[1]) || !strings.Contains(page, "Claude Code (") {
		t.Error("the settings page shows the token again, or does not list it by the app's name")
	}
	if strings.Contains(b.get("/settings/agents").body, tok[1]) {
		t.Error("the page shows the token again")
	}
}
