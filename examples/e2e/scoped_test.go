package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// listAll lists a session's tools, prompts, resources and templates by
// name (URI for resources and templates).
func listAll(t *testing.T, cs *mcp.ClientSession) (tools, prompts, resources, templates []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for x, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, x.Name)
	}
	for x, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, x.Name)
	}
	for x, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		resources = append(resources, x.URI)
	}
	for x, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, x.URITemplate)
	}
	return tools, prompts, resources, templates
}

// TestScopedTokens: a token made with `token create --servers --tools`
// sees on /mcp (go-sdk client) exactly its scope's tools, prompts,
// resources and templates and nothing of the user's other servers; a call
// outside it is refused as an unknown tool, a read as an unknown
// resource; search_tools finds only deferred tools in scope. A token
// with --expires 2s is refused after it, on its open session and on a
// new one; a revoked scoped token the same. token list shows scope and
// expiry, and the settings page's JSON API refuses a scoped token.
func TestScopedTokens(t *testing.T) {
	bin := everythingBin(t)
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"everything": map[string]any{"command": bin, "args": []string{"stdio"}},
		"notes": map[string]any{"command": b.notes,
			"tools": map[string]any{"list_notes": "deferred", "whoami": "deferred"}},
	}})
	e.startServe()
	full := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "full"))
	notesTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "notes-agent",
		"--servers", "notes", "--tools", "notes/add_note,notes/echo,notes/list_*"))
	evTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "everything-agent", "--servers", "everything", "--expires", "1h"))

	all, err := connect(t, e.url, full)
	if err != nil {
		t.Fatal(err)
	}
	allTools, allPrompts, allRes, allTmpl := listAll(t, all.cs)
	if !slices.Contains(allTools, "notes__add_note") || !slices.Contains(allTools, "everything__echo") || len(allPrompts) == 0 || len(allRes) == 0 {
		t.Fatalf("the unscoped token's lists lack what the test needs: tools %v, prompts %v, %d resources", allTools, allPrompts, len(allRes))
	}

	// The notes token: three tools of notes, search_tools, nothing else,
	// on a session (2025-11-25) and on the stateless revision (go-sdk's
	// own choice).
	nc, err := connectWith(t, e.url, notesTok, nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	nsl, err := connect(t, e.url, notesTok)
	if err != nil {
		t.Fatal(err)
	}
	var tools, prompts, res, tmpl []string
	for _, c := range []*client{nc, nsl} {
		tools, prompts, res, tmpl = listAll(t, c.cs)
		if want := []string{"notes__add_note", "notes__echo", "search_tools"}; !slices.Equal(tools, want) {
			t.Errorf("notes token's tools = %v, want %v", tools, want)
		}
		if len(prompts)+len(res)+len(tmpl) != 0 {
			t.Errorf("notes token sees everything's prompts %v, resources %v, templates %v", prompts, res, tmpl)
		}
		if _, err := c.call(t, "everything__echo", map[string]any{"message": "x"}); err == nil {
			t.Error("notes token called everything__echo")
		}
	}
	if in := nc.cs.InitializeResult().Instructions; strings.Contains(in, "[everything]") {
		t.Errorf("notes token's instructions hold everything's: %.200q", in)
	}
	if r, err := nc.call(t, "notes__echo", map[string]any{"text": "in scope"}); err != nil || r.IsError || !strings.Contains(text(r), "in scope") {
		t.Errorf("notes__echo: %v %v", err, r)
	}
	for _, name := range []string{"everything__echo", "notes__whoami", "notes__slow"} {
		if r, err := nc.call(t, name, map[string]any{"text": "x"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("calling %s outside the scope: %v %v, want unknown tool", name, err, r)
		}
	}
	r, err := nc.call(t, "search_tools", map[string]any{"query": "notes"})
	if err != nil || r.IsError {
		t.Fatalf("search_tools: %v %v", err, r)
	}
	found, _ := json.Marshal(r.StructuredContent)
	if !strings.Contains(string(found), "notes__list_notes") || strings.Contains(string(found), "whoami") {
		t.Errorf("search_tools found %s; want list_notes and not whoami (outside the globs)", found)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := nc.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: allRes[0]}); err == nil {
		t.Errorf("notes token read everything's resource %s", allRes[0])
	}
	if _, err := nc.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: allPrompts[0]}); err == nil {
		t.Errorf("notes token got everything's prompt %s", allPrompts[0])
	}

	// The everything token: everything's tools, prompts, resources and
	// templates, as the unscoped token lists them, and none of notes.
	ec, err := connect(t, e.url, evTok)
	if err != nil {
		t.Fatal(err)
	}
	tools, prompts, res, tmpl = listAll(t, ec.cs)
	var wantTools []string
	for _, n := range allTools {
		if strings.HasPrefix(n, "everything__") {
			wantTools = append(wantTools, n)
		}
	}
	if !slices.Equal(tools, wantTools) || !slices.Equal(prompts, allPrompts) || !slices.Equal(res, allRes) || !slices.Equal(tmpl, allTmpl) {
		t.Errorf("everything token: tools %v (want %v), prompts %v (want %v), %d/%d resources, %d/%d templates",
			tools, wantTools, prompts, allPrompts, len(res), len(allRes), len(tmpl), len(allTmpl))
	}
	if _, err := ec.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: allRes[0]}); err != nil {
		t.Errorf("everything token reading %s: %v", allRes[0], err)
	}
	if r, err := ec.call(t, "notes__add_note", map[string]any{"text": "x"}); err == nil {
		t.Errorf("everything token called notes__add_note: %v", text(r))
	}

	// The JSON API (the settings page's) refuses a scoped token: it could
	// mint an unscoped one there.
	if code := apiStatus(t, e.url+"/api/v1/tokens", notesTok); code != 401 {
		t.Errorf("GET /api/v1/tokens with a scoped token: HTTP %d, want 401", code)
	}

	// token list shows the scopes and expiries.
	list := e.must("", "token", "list", "--user", "alice")
	if !strings.Contains(list, "servers notes; tools notes/add_note,notes/echo,notes/list_*") || !strings.Contains(list, "servers everything") {
		t.Errorf("token list lacks the scopes:\n%s", list)
	}

	// Expiry: refused on the open session and on a new one.
	shortTok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "short", "--servers", "notes", "--expires", "2s"))
	sc, err := connectWith(t, e.url, shortTok, nil, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.call(t, "notes__echo", map[string]any{"text": "before"}); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	time.Sleep(2500 * time.Millisecond) // past the expiry (not a timing assertion)
	if _, err := sc.call(t, "notes__echo", map[string]any{"text": "after"}); err == nil {
		t.Error("the open session of an expired token was still served")
	}
	if _, err := connectWith(t, e.url, shortTok, nil, "2025-11-25"); err == nil {
		t.Error("an expired token opened a new session")
	}
	if _, err := connect(t, e.url, shortTok); err == nil {
		t.Error("an expired token was served on the stateless revision")
	}
	if list := e.must("", "token", "list", "--user", "alice"); !strings.Contains(list, "expired ") {
		t.Errorf("token list does not show the expired token as expired:\n%s", list)
	}

	// Revocation: the same, at once.
	var id string
	var toks []struct {
		ID, Name string
	}
	_ = json.Unmarshal([]byte(e.must("", "token", "list", "--user", "alice", "--json")), &toks)
	for _, tk := range toks {
		if tk.Name == "notes-agent" {
			id = tk.ID
		}
	}
	e.must("", "token", "revoke", id)
	if _, err := nc.call(t, "notes__echo", map[string]any{"text": "after revoke"}); err == nil {
		t.Error("the open session of a revoked scoped token was still served")
	}
	if _, err := nsl.call(t, "notes__echo", map[string]any{"text": "after revoke"}); err == nil {
		t.Error("a revoked scoped token was served on the stateless revision")
	}
	if _, err := connectWith(t, e.url, notesTok, nil, "2025-11-25"); err == nil {
		t.Error("a revoked scoped token opened a new session")
	}
	// The unscoped token still works.
	if r, err := all.call(t, "notes__echo", map[string]any{"text": "still"}); err != nil || r.IsError {
		t.Errorf("the unscoped token after the others ended: %v %v", err, r)
	}
}

// apiStatus GETs url with a bearer token and returns the HTTP status.
func apiStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
