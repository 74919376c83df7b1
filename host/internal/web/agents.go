package web

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// "Connect your agent" (/settings/agents): ready-to-copy set-up of the
// common MCP clients for the host's /mcp. An app that signs in with OAuth
// needs only the URL; for the others, a button creates a token named for
// the app (the token code of tokens.go) and the page shows the snippet
// with it filled in, once.

// tokenPlaceholder stands for the token in a snippet no token was made
// for.
const tokenPlaceholder = "<your token>"

// agentServerName is the name the snippets give the host in the apps'
// server lists.
const agentServerName = "agenthost"

// agentApp is one app's set-up as agents.html shows it.
type agentApp struct {
	ID, Name string
	// Where says where the snippet goes.
	Where string
	// Snippet is what to copy, with the token (or its placeholder).
	Snippet string
	// OAuth, when set, is the app's set-up without a token: it signs its
	// person in through the host's authorization server.
	OAuth, OAuthWhere string
	// Token: the app cannot do OAuth (or may use a token instead), and
	// the page offers a button that makes one for it.
	Token bool
	// HasToken: the snippet carries a token just made.
	HasToken bool
	// Source is the app's documentation the snippet's format follows.
	Source string
}

// agentApps returns the set-up of every app for the endpoint mcpURL, with
// token in the snippet of app withToken (the placeholder elsewhere).
// Each format is the one the app's public documentation gives (Source).
func agentApps(mcpURL, withToken, token string) []agentApp {
	tok := func(id string) string {
		if id == withToken && token != "" {
			return token
		}
		return tokenPlaceholder
	}
	bearer := func(id string) string { return "Bearer " + tok(id) }
	apps := []agentApp{
		{
			// Claude.ai and Claude Desktop: Settings > Connectors > Add
			// custom connector takes the remote server's URL; they sign in
			// with OAuth (our authorization server), never a token.
			// https://support.claude.com/en/articles/11175166-getting-started-with-custom-connectors-using-remote-mcp
			ID: "claude-connector", Name: "Claude.ai and Claude Desktop (connector)",
			Where:   "In Claude: Settings, Connectors, Add custom connector; give it this URL. Claude sends you here to sign in and allow it; it then appears under Connected apps.",
			Snippet: mcpURL,
			Source:  "https://support.claude.com/en/articles/11175166-getting-started-with-custom-connectors-using-remote-mcp",
		},
		{
			// Claude Desktop's config file runs a local bridge to a remote
			// server: mcp-remote's README gives the --header argument
			// without spaces around the colon (Claude Desktop on Windows
			// mangles spaces in args) with the value in env. mcp-remote
			// refuses plain http beyond localhost without --allow-http.
			// https://github.com/geelen/mcp-remote#readme
			ID: "claude-desktop", Name: "Claude Desktop (config file)",
			Where:   "claude_desktop_config.json (Claude Desktop: Settings, Developer, Edit Config), for a Claude Desktop without custom connectors. It needs Node.js (npx).",
			Snippet: claudeDesktopConfig(mcpURL, bearer("claude-desktop")),
			Token:   true,
			Source:  "https://github.com/geelen/mcp-remote#readme",
		},
		{
			// claude mcp add --transport http <name> <url> [--header "K: V"];
			// without the header Claude Code signs in with OAuth (/mcp).
			// https://code.claude.com/docs/en/mcp
			ID: "claude-code", Name: "Claude Code",
			Where: "Run in a terminal:",
			Snippet: "claude mcp add --transport http " + agentServerName + " " + shellQuote(mcpURL) +
				` --header "Authorization: ` + bearer("claude-code") + `"`,
			OAuth:      "claude mcp add --transport http " + agentServerName + " " + shellQuote(mcpURL),
			OAuthWhere: "Or without a token: add it so, then run /mcp in Claude Code and choose Authenticate; you sign in here.",
			Token:      true,
			Source:     "https://code.claude.com/docs/en/mcp",
		},
		{
			// VS Code: .vscode/mcp.json or the user's mcp.json (MCP: Open
			// User Configuration), top-level "servers", type "http", url,
			// headers; without headers it signs in with OAuth.
			// https://code.visualstudio.com/docs/copilot/customization/mcp-servers
			ID: "vscode", Name: "VS Code",
			Where:      ".vscode/mcp.json in a workspace, or your user mcp.json (command palette: MCP: Open User Configuration).",
			Snippet:    jsonSnippet(map[string]any{"servers": map[string]any{agentServerName: map[string]any{"type": "http", "url": mcpURL, "headers": map[string]string{"Authorization": bearer("vscode")}}}}),
			OAuth:      jsonSnippet(map[string]any{"servers": map[string]any{agentServerName: map[string]any{"type": "http", "url": mcpURL}}}),
			OAuthWhere: "Or without a token (VS Code signs you in here):",
			Token:      true,
			Source:     "https://code.visualstudio.com/docs/copilot/customization/mcp-servers",
		},
		{
			// Cursor: ~/.cursor/mcp.json (or .cursor/mcp.json in a project),
			// "mcpServers" with url and headers; without headers it signs
			// in with OAuth. https://cursor.com/docs/context/mcp
			ID: "cursor", Name: "Cursor",
			Where:      "~/.cursor/mcp.json (every project) or .cursor/mcp.json in a project.",
			Snippet:    jsonSnippet(map[string]any{"mcpServers": map[string]any{agentServerName: map[string]any{"url": mcpURL, "headers": map[string]string{"Authorization": bearer("cursor")}}}}),
			OAuth:      jsonSnippet(map[string]any{"mcpServers": map[string]any{agentServerName: map[string]any{"url": mcpURL}}}),
			OAuthWhere: "Or without a token (Cursor signs you in here):",
			Token:      true,
			Source:     "https://cursor.com/docs/context/mcp",
		},
		{
			// Any client of the Streamable HTTP transport: the endpoint and
			// the bearer token. https://modelcontextprotocol.io/specification/2025-11-25/basic/transports
			ID: "http", Name: "Any Streamable HTTP client",
			Where:   "The endpoint (Streamable HTTP) and the header to send with every request:",
			Snippet: "URL: " + mcpURL + "\nAuthorization: " + bearer("http"),
			Token:   true,
			Source:  "https://modelcontextprotocol.io/specification/2025-11-25/basic/transports",
		},
	}
	for i := range apps {
		apps[i].HasToken = apps[i].ID == withToken && token != ""
	}
	return apps
}

// claudeDesktopConfig is the mcpServers entry that runs mcp-remote.
func claudeDesktopConfig(mcpURL, authValue string) string {
	args := []string{"-y", "mcp-remote", mcpURL, "--header", "Authorization:${AGENTHOST_AUTH}"}
	if u, err := url.Parse(mcpURL); err == nil && u.Scheme == "http" && !isLoopbackName(u.Hostname()) {
		args = append(args, "--allow-http")
	}
	return jsonSnippet(map[string]any{"mcpServers": map[string]any{agentServerName: map[string]any{
		"command": "npx", "args": args, "env": map[string]string{"AGENTHOST_AUTH": authValue},
	}}})
}

func isLoopbackName(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// jsonSnippet is v as indented JSON without HTML escaping (the template
// escapes).
func jsonSnippet(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // maps of strings: cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// agentsView is agents.html.
type agentsView struct {
	Base, CSRF, User, MCPURL string
	Flash, Error             string
	OAuth                    bool // the host's authorization server is on
	Apps                     []agentApp
	NewTokenApp              string // the app whose snippet carries a new token
}

// agentsPage shows "Connect your agent".
func (s *server) agentsPage(w http.ResponseWriter, r *http.Request) {
	if sessionFrom(r.Context()).Operator {
		s.forbidden(w, r, "The operator has no tools of their own to connect an agent to.")
		return
	}
	s.renderAgents(w, r, http.StatusOK, "", "", "")
}

func (s *server) renderAgents(w http.ResponseWriter, r *http.Request, code int, app, token, errMsg string) {
	ws := sessionFrom(r.Context())
	v := &agentsView{Base: s.base, CSRF: ws.CSRF, User: ws.User, MCPURL: s.mcpURL(r), OAuth: s.opts.Apps != nil,
		Apps: agentApps(s.mcpURL(r), app, token), Error: errMsg}
	if token != "" {
		v.NewTokenApp = app
	}
	s.render(w, r, code, "agents.html", v)
}

// agentToken creates a token named for the app and shows that app's
// snippet with it, once.
func (s *server) agentToken(w http.ResponseWriter, r *http.Request) {
	ws := sessionFrom(r.Context())
	if ws.Operator {
		s.forbidden(w, r, "The operator makes tokens with the agenthost CLI.")
		return
	}
	id := r.PostForm.Get("app")
	var app *agentApp
	for _, a := range agentApps("", "", "") {
		if a.ID == id && a.Token {
			app = &a
			break
		}
	}
	if app == nil {
		s.errorPage(w, r, http.StatusNotFound, "Not found", "There is no such app to make a token for.")
		return
	}
	name := app.Name + " (" + time.Now().UTC().Format("2006-01-02") + ")"
	plain, tok, err := s.a.CreateToken(r.Context(), ws.User, name)
	if err != nil {
		s.logger.Error("creating a token for an app", "app", id, "err", err)
		s.renderAgents(w, r, http.StatusInternalServerError, "", "", "The token could not be created; the host's log has the details.")
		return
	}
	s.logger.Info("token created in the web UI", "user", ws.User, "token", tok.ID, "app", id)
	s.renderAgents(w, r, http.StatusOK, id, plain, "")
}
