package mcpendpoint_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// TestOwnTools: each user lists and calls only their own tools; the host
// sees the verified user and the session's conversation.
func TestOwnTools(t *testing.T) {
	e := newEnv(t, nil)
	alice, bob := e.mustConnect(t, aliceTok), e.mustConnect(t, bobTok)
	if got, want := alice.names(t), []string{"notes__add", "notes__list"}; !slices.Equal(got, want) {
		t.Errorf("alice lists %v, want %v", got, want)
	}
	if got, want := bob.names(t), []string{"web__fetch"}; !slices.Equal(got, want) {
		t.Errorf("bob lists %v, want %v", got, want)
	}

	res := alice.call(t, "notes__add", `{"text":"hi"}`)
	if res.IsError || text(res) != `alice notes/add {"text":"hi"}` {
		t.Errorf("alice's call = %q (isError %v)", text(res), res.IsError)
	}
	// Another user's tool is unknown to alice: a protocol error that names
	// only what she sent.
	_, err := alice.tryCall("web__fetch", `{}`)
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("alice calling bob's tool: %v, want a -32602 error", err)
	}
	calls := e.host.Calls()
	if len(calls) != 1 || calls[0].User != "alice" || calls[0].Name != "notes/add" || calls[0].Conversation != "mcp:"+alice.ID() {
		t.Errorf("the host saw %+v", calls)
	}
	if n := e.ep.Sessions(); n != 2 {
		t.Errorf("Sessions() = %d, want 2", n)
	}
}

// TestCrossUserIsolation calls random tools from two users' sessions: no
// call ever reaches the other user, and no list shows the other's tools.
func TestCrossUserIsolation(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("a/secret_alice", "", ""), tool("shared/x", "", ""))
	e.host.SetTools("bob", tool("b/secret_bob", "", ""), tool("shared/x", "", ""))
	clients := map[string]*client{"alice": e.mustConnect(t, aliceTok), "bob": e.mustConnect(t, bobTok)}
	names := []string{"a__secret_alice", "b__secret_bob", "shared__x"}
	for i := range 200 {
		user := []string{"alice", "bob"}[i%2]
		name := names[(i/2)%3]
		res, err := clients[user].tryCall(name, fmt.Sprintf(`{"i":%d}`, i))
		foreign := strings.Contains(name, "secret") && !strings.Contains(name, user)
		switch {
		case foreign && err == nil:
			t.Fatalf("%s called %s: %s", user, name, text(res))
		case !foreign && (err != nil || !strings.HasPrefix(text(res), user+" ")):
			t.Fatalf("%s calling %s: %v %v", user, name, err, res)
		}
	}
	for _, c := range e.host.Calls() {
		if strings.Contains(c.Name, "secret") && !strings.Contains(c.Name, c.User) {
			t.Errorf("the host ran %+v", c)
		}
	}
	for user, c := range clients {
		for _, n := range c.names(t) {
			if strings.Contains(n, "secret") && !strings.Contains(n, user) {
				t.Errorf("%s lists %s", user, n)
			}
		}
	}
}

// TestResultPassthrough: content blocks, structured content and isError
// arrive as the host sent them: key order and unknown fields survive,
// because the endpoint never decodes them.
func TestResultPassthrough(t *testing.T) {
	e := newEnv(t, nil)
	content := `[{"text":"first","type":"text","x-extra":{"k":[1,2,3]}},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]`
	structured := `{"z":1,"a":[true,null],"nested":{"b":"c"}}`
	e.host.SetCall(func(context.Context, string, string, json.RawMessage) (*ext.CallToolResult, error) {
		return &ext.CallToolResult{Content: json.RawMessage(content), StructuredContent: json.RawMessage(structured),
			IsError: true, Details: json.RawMessage(`{"internal":"never shown"}`)}, nil
	})
	c := e.mustConnect(t, aliceTok)

	// Through go-sdk's client: the blocks decode as MCP content.
	res := c.call(t, "notes__add", `{}`)
	if !res.IsError || len(res.Content) != 2 || text(res) != "first" {
		t.Errorf("result = %+v", res)
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" {
		t.Errorf("second block = %#v, want the image", res.Content[1])
	}

	// On the wire: the very bytes.
	resp := e.rawPost(t, aliceTok, c.ID(), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"notes__add","arguments":{}}}`, nil)
	var msg struct {
		Result struct {
			Content           json.RawMessage `json:"content"`
			StructuredContent json.RawMessage `json:"structuredContent"`
			IsError           bool            `json:"isError"`
		} `json:"result"`
	}
	raw := rpcMessage(t, resp)
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatal(err)
	}
	if string(msg.Result.Content) != content {
		t.Errorf("content on the wire:\n%s\nwant\n%s", msg.Result.Content, content)
	}
	if string(msg.Result.StructuredContent) != structured {
		t.Errorf("structured content on the wire: %s, want %s", msg.Result.StructuredContent, structured)
	}
	if !msg.Result.IsError || strings.Contains(string(raw), "never shown") {
		t.Errorf("message = %s", raw)
	}
}

// TestMalformedContent: content that is not an array of blocks becomes a
// clear error result instead of a broken response.
func TestMalformedContent(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetCall(func(context.Context, string, string, json.RawMessage) (*ext.CallToolResult, error) {
		return &ext.CallToolResult{Content: json.RawMessage(`{"type":"text","text":"not in an array"}`)}, nil
	})
	res := e.mustConnect(t, aliceTok).call(t, "notes__list", `{}`)
	if !res.IsError || !strings.Contains(text(res), "malformed content") {
		t.Errorf("result = %q (isError %v)", text(res), res.IsError)
	}
}

// TestListChanged: a change of alice's tools reaches every session of
// alice, which then lists the new tools, and no session of bob.
func TestListChanged(t *testing.T) {
	e := newEnv(t, nil)
	a1, a2, b := e.mustConnect(t, aliceTok), e.mustConnect(t, alice2Tok), e.mustConnect(t, bobTok)
	for _, c := range []*client{a1, a2, b} {
		c.names(t) // sessions are fully up
	}
	// A toggle: notes off, calendar on.
	e.host.SetTools("alice", tool("calendar/today", "Today's events.", ""))
	for _, c := range []*client{a1, a2} {
		c.waitChanged(t)
		if got := c.names(t); !slices.Equal(got, []string{"calendar__today"}) {
			t.Errorf("after the change alice lists %v", got)
		}
	}
	select {
	case <-b.changed:
		t.Error("bob got alice's list_changed")
	case <-time.After(300 * time.Millisecond):
	}
	if got := b.names(t); !slices.Equal(got, []string{"web__fetch"}) {
		t.Errorf("bob lists %v", got)
	}
	// A tool that left is refused.
	if _, err := a1.tryCall("notes__add", `{}`); err == nil {
		t.Error("a removed tool is still callable")
	}
	// A change that alters nothing a session sees sends nothing.
	time.Sleep(50 * time.Millisecond) // past go-sdk's 10 ms debounce
	a1.drain()
	e.host.SetTools("alice", tool("calendar/today", "Today's events.", ""), tool("x/code", "", ext.ExposureCodemode))
	select {
	case <-a1.changed:
		t.Error("a change invisible to the session notified it")
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSearchToolsCodeOnly: with code mode's code/run, search_tools also
// finds codemode tools, by their host name with their input schema, for
// scripts to call (never added to the list, never callable straight);
// without code/run it finds none, and without deferred tools it is there
// for the codemode ones alone.
func TestSearchToolsCodeOnly(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice",
		tool("code/run", "Run code.", ""),
		tool("db/admin", "Administer SQL users.", ext.ExposureCodemode),
	)
	s := e.mustConnect(t, aliceTok)
	if got, want := s.names(t), []string{"code__run", "search_tools"}; !slices.Equal(got, want) {
		t.Fatalf("lists %v, want %v", got, want)
	}
	res := s.call(t, "search_tools", `{"query":"SQL users"}`)
	var out struct {
		Tools []struct {
			Name        string
			CodeOnly    bool
			InputSchema json.RawMessage
		}
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Tools) != 1 || out.Tools[0].Name != "db/admin" || !out.Tools[0].CodeOnly ||
		len(out.Tools[0].InputSchema) == 0 || !strings.Contains(text(res), "only from code") {
		t.Errorf("search found %s / %q, want db/admin, code only, with its schema", b, text(res))
	}
	if got, want := s.names(t), []string{"code__run", "search_tools"}; !slices.Equal(got, want) {
		t.Errorf("after the search lists %v, want %v (a codemode tool is never listed)", got, want)
	}
	e.host.SetTools("alice", tool("db/admin", "Administer SQL users.", ext.ExposureCodemode))
	s.waitChanged(t)
	if got := s.names(t); slices.Contains(got, "search_tools") {
		t.Errorf("without code/run: lists %v, want no search_tools", got)
	}
}

// TestSearchTools: a deferred tool is not listed; search_tools finds it,
// adds it to that session's list (with list_changed) and it can be
// called; another session of the same user is unchanged.
func TestSearchTools(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice",
		tool("notes/add", "Add a note.", ""),
		tool("db/query", "Run a read-only SQL query against the warehouse.", ext.ExposureDeferred),
		tool("db/migrate", "Apply schema migrations.", ext.ExposureDeferred),
		tool("db/admin", "Administer SQL users.", ext.ExposureCodemode),
	)
	s1, s2 := e.mustConnect(t, aliceTok), e.mustConnect(t, aliceTok)
	if got, want := s1.names(t), []string{"notes__add", "search_tools"}; !slices.Equal(got, want) {
		t.Fatalf("lists %v, want %v", got, want)
	}
	if s1.InitializeResult().Instructions == "" {
		t.Error("no instructions mention search_tools")
	}

	res := s1.call(t, "search_tools", `{"query":"SQL warehouse"}`)
	if res.IsError {
		t.Fatalf("search failed: %s", text(res))
	}
	var out struct {
		Tools []struct{ Name, Description string }
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Tools) != 1 || out.Tools[0].Name != "db__query" || !strings.Contains(text(res), "db__query") {
		t.Errorf("search found %s / %q, want only db__query (codemode tools are never found)", b, text(res))
	}
	s1.waitChanged(t)
	if got, want := s1.names(t), []string{"db__query", "notes__add", "search_tools"}; !slices.Equal(got, want) {
		t.Errorf("after the search s1 lists %v, want %v", got, want)
	}
	if res := s1.call(t, "db__query", `{"text":"select 1"}`); res.IsError || !strings.Contains(text(res), "db/query") {
		t.Errorf("calling the found tool: %q", text(res))
	}
	if got, want := s2.names(t), []string{"notes__add", "search_tools"}; !slices.Equal(got, want) {
		t.Errorf("the other session lists %v, want %v", got, want)
	}

	// The found tool stays in s1's list across a change of the user's tools.
	e.host.SetTools("alice",
		tool("notes/add", "Add a note, now with tags.", ""),
		tool("db/query", "Run a read-only SQL query against the warehouse.", ext.ExposureDeferred),
	)
	s1.waitChanged(t)
	if got, want := s1.names(t), []string{"db__query", "notes__add", "search_tools"}; !slices.Equal(got, want) {
		t.Errorf("after the change s1 lists %v, want %v", got, want)
	}

	for args, want := range map[string]string{
		`{"query":"  "}`:          "needs a query",
		`{"query":1}`:             "search_tools takes",
		`{"query":"nothinglike"}`: "No tools match",
	} {
		res := s1.call(t, "search_tools", args)
		if !strings.Contains(text(res), want) {
			t.Errorf("search_tools %s = %q, want %q", args, text(res), want)
		}
	}
	// Without deferred tools there is no search_tools.
	s2.waitChanged(t) // notes/add's new description
	e.host.SetTools("alice", tool("notes/add", "", ""))
	s2.waitChanged(t)
	if got := s2.names(t); !slices.Equal(got, []string{"notes__add"}) {
		t.Errorf("without deferred tools s2 lists %v", got)
	}
}

// TestCodemodeRefused: a codemode tool is never listed, and calling it
// directly gets a clear error result without reaching the host.
func TestCodemodeRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("notes/add", "", ""), tool("py/exec", "Run code.", ext.ExposureCodemode))
	c := e.mustConnect(t, aliceTok)
	if got := c.names(t); slices.Contains(got, "py__exec") {
		t.Errorf("lists %v", got)
	}
	res := c.call(t, "py__exec", `{}`)
	if !res.IsError || text(res) != `tool "py__exec" is only callable from code` {
		t.Errorf("result = %q (isError %v)", text(res), res.IsError)
	}
	if n := len(e.host.Calls()); n != 0 {
		t.Errorf("the host ran %d calls", n)
	}
}

// TestNameMapping: a name that would exceed 64 characters and names that
// map to the same MCP name are all listed, distinct, valid and callable,
// each reaching its own tool.
func TestNameMapping(t *testing.T) {
	e := newEnv(t, nil)
	long := "longserver/" + strings.Repeat("really_long_tool_name_", 5)
	originals := []string{long, "a__b/c", "a/b__c", "x/hello world", "x/hello_world", "plain/tool"}
	var tools []api.Tool
	for _, o := range originals {
		tools = append(tools, tool(o, "", ""))
	}
	e.host.SetTools("alice", tools...)
	c := e.mustConnect(t, aliceTok)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	hashedName := regexp.MustCompile(`_[0-9a-f]{8}$`)
	byOriginal := map[string]string{}
	for _, tl := range list.Tools {
		o, _ := tl.Meta["agenthost/name"].(string)
		if !valid.MatchString(tl.Name) {
			t.Errorf("%q is not a valid name of at most 64 characters", tl.Name)
		}
		byOriginal[o] = tl.Name
	}
	if len(byOriginal) != len(originals) {
		t.Fatalf("listed %v, want all of %v", byOriginal, originals)
	}
	if byOriginal["plain/tool"] != "plain__tool" {
		t.Errorf("plain/tool maps to %q", byOriginal["plain/tool"])
	}
	for _, o := range []string{long, "a__b/c", "a/b__c", "x/hello world", "x/hello_world"} {
		if !hashedName.MatchString(byOriginal[o]) {
			t.Errorf("%q maps to %q, want a hash suffix", o, byOriginal[o])
		}
	}
	for _, o := range originals {
		res := c.call(t, byOriginal[o], `{"n":1}`)
		if want := "alice " + o + ` {"n":1}`; res.IsError || text(res) != want {
			t.Errorf("calling %q (for %q) = %q, want %q", byOriginal[o], o, text(res), want)
		}
	}
}

// TestCustomSeparator: Options.Separator replaces "/".
func TestCustomSeparator(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{Separator: "."})
	if got := e.mustConnect(t, aliceTok).names(t); !slices.Equal(got, []string{"notes.add", "notes.list"}) {
		t.Errorf("lists %v", got)
	}
	for _, bad := range []string{"/", "a b", "::"} {
		if _, err := mcpendpoint.New(hosttest.New(nil), &fakeVerifier{}, &mcpendpoint.Options{Separator: bad}); err == nil {
			t.Errorf("separator %q accepted", bad)
		}
	}
}

// TestBadToolLeftOut: a tool whose schema go-sdk would refuse is left
// out; the others stay.
func TestBadToolLeftOut(t *testing.T) {
	e := newEnv(t, nil)
	bad := tool("x/bad", "", "")
	bad.InputSchema = json.RawMessage(`{"type":"string"}`)
	badHeader := tool("x/bad_header", "", "")
	badHeader.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"object","x-mcp-header":"X"}}}`)
	e.host.SetTools("alice", bad, badHeader, tool("x/good", "", ""))
	if got := e.mustConnect(t, aliceTok).names(t); !slices.Equal(got, []string{"x__good"}) {
		t.Errorf("lists %v", got)
	}
}

// TestHostErrors: host errors become error results that name the tool and
// the kind of failure, never the host's message.
func TestHostErrors(t *testing.T) {
	e := newEnv(t, nil)
	const canary = "CANARY-bob-secret-7f3a"
	var next error
	e.host.SetCall(func(context.Context, string, string, json.RawMessage) (*ext.CallToolResult, error) {
		return nil, next
	})
	c := e.mustConnect(t, aliceTok)
	for err, want := range map[error]string{
		fmt.Errorf("server of %s: %w", canary, ext.ErrPermission):   "not allowed",
		fmt.Errorf("gone %s: %w", canary, ext.ErrNotFound):          "no longer available",
		fmt.Errorf("crashed %s: %w", canary, ext.ErrUnavailable):    "unavailable right now",
		fmt.Errorf("bad %s: %w", canary, ext.ErrInvalidArgument):    "invalid arguments",
		fmt.Errorf("boom %s", canary):                               "internal error",
		fmt.Errorf("slow %s: %w", canary, context.DeadlineExceeded): "timed out",
	} {
		next = err
		res := c.call(t, "notes__add", `{}`)
		if !res.IsError || !strings.Contains(text(res), want) || !strings.Contains(text(res), "notes__add") || strings.Contains(text(res), canary) {
			t.Errorf("host error %v gave %q, want %q", err, text(res), want)
		}
	}
}

// TestSessionBoundToToken: a session opened with alice's token refuses a
// request that carries bob's token, or alice's other token (F5).
func TestSessionBoundToToken(t *testing.T) {
	e := newEnv(t, nil)
	alice := e.mustConnect(t, aliceTok)
	const list = `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`
	for _, tok := range []string{bobTok, alice2Tok} {
		if resp := e.rawPost(t, tok, alice.ID(), list, nil); resp.StatusCode != http.StatusForbidden {
			t.Errorf("token %s on alice's session: status %d, want 403", tok, resp.StatusCode)
		}
	}
	resp := e.rawPost(t, aliceTok, alice.ID(), list, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(rpcMessage(t, resp)), "notes__add") {
		t.Errorf("alice's own token on her session: status %d", resp.StatusCode)
	}
}

// TestRevokedToken: once the verifier refuses a token and CloseToken ran,
// its sessions are closed at once (calls in flight cancelled), new
// requests are refused, and other tokens' sessions are untouched.
func TestRevokedToken(t *testing.T) {
	e := newEnv(t, nil)
	started := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	e.host.SetCall(func(ctx context.Context, user, name string, args json.RawMessage) (*ext.CallToolResult, error) {
		if name != "notes/list" {
			return hosttest.Echo(user, name, args), nil
		}
		started <- struct{}{}
		<-ctx.Done()
		cancelled <- struct{}{}
		return nil, ctx.Err()
	})
	a1, a1b, a2 := e.mustConnect(t, aliceTok), e.mustConnect(t, aliceTok), e.mustConnect(t, alice2Tok)
	a1.names(t)
	a1b.names(t)
	if n := e.ep.Sessions(); n != 3 {
		t.Fatalf("Sessions() = %d, want 3", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a1.tryCall("notes__list", `{}`)
		done <- err
	}()
	<-started

	e.ver.revoke(aliceTok)
	e.ep.CloseToken("a1")
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight was not cancelled")
	}
	<-done
	// Refused at once, even before the sessions finished closing.
	for _, c := range []*client{a1, a1b} {
		if _, err := c.ListTools(context.Background(), nil); err == nil {
			t.Error("a revoked session still lists tools")
		}
	}
	if resp := e.rawPost(t, aliceTok, a1b.ID(), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the revoked token on its session: status %d, want 401", resp.StatusCode)
	}
	if _, err := e.connect(t, aliceTok, "2025-11-25"); err == nil {
		t.Error("the revoked token opened a session")
	}
	if res := a2.call(t, "notes__add", `{}`); res.IsError {
		t.Errorf("alice's other token: %q", text(res))
	}
	waitFor(t, "the revoked sessions to close", func() bool { return e.ep.Sessions() == 1 })

	// CloseToken alone (the verifier still accepts the token) refuses the
	// session's very next request; the token may open a new session.
	e.ep.CloseToken("a2")
	if _, err := a2.ListTools(context.Background(), nil); err == nil {
		t.Error("a session closed by CloseToken still lists tools")
	}
	e.mustConnect(t, alice2Tok).names(t)
}

// TestVerifyCache: with VerifyCacheTTL a verified token skips the
// verifier; CloseToken empties the cache of that token at once; failures
// are never cached.
func TestVerifyCache(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{VerifyCacheTTL: time.Minute})
	c := e.mustConnect(t, aliceTok)
	before := e.ver.count()
	for range 5 {
		c.call(t, "notes__add", `{}`)
	}
	if n := e.ver.count() - before; n != 0 {
		t.Errorf("the verifier ran %d times for cached calls", n)
	}
	before = e.ver.count()
	for range 3 {
		e.rawPost(t, "tok-guess", "", initBody, nil)
	}
	if n := e.ver.count() - before; n != 3 {
		t.Errorf("the verifier ran %d times for 3 bad guesses, want 3", n)
	}
	e.ver.revoke(aliceTok)
	e.ep.CloseToken("a1")
	if _, err := e.connect(t, aliceTok, "2025-11-25"); err == nil {
		t.Error("a revoked token passed from the cache")
	}
}

// TestVerifyCacheExpiry: a token that says when it expires is never
// served from the cache past then; ResourceMetadata is asked on each 401.
func TestVerifyCacheExpiry(t *testing.T) {
	var asked atomic.Int32
	e := newEnv(t, &mcpendpoint.Options{VerifyCacheTTL: time.Minute,
		ResourceMetadata: func() string { asked.Add(1); return "http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp" }})
	e.ver.mu.Lock()
	e.ver.tokens["tok-short"] = mcpendpoint.Principal{User: "alice", TokenID: "grant1", Expires: time.Now().Add(300 * time.Millisecond)}
	e.ver.mu.Unlock()
	before := e.ver.count()
	for range 2 {
		if resp := e.rawPost(t, "tok-short", "", initBody, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("a short-lived token: %d", resp.StatusCode)
		}
	}
	if n := e.ver.count() - before; n != 1 {
		t.Errorf("the verifier ran %d times for two requests, want 1 (cached)", n)
	}
	time.Sleep(350 * time.Millisecond)
	e.rawPost(t, "tok-short", "", initBody, nil)
	if n := e.ver.count() - before; n != 2 {
		t.Errorf("after the token's expiry the verifier ran %d times in all, want 2 (not served from the cache)", n)
	}
	resp := e.rawPost(t, "", "", initBody, nil)
	if asked.Load() != 1 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp"`) {
		t.Errorf("ResourceMetadata asked %d times; WWW-Authenticate %q", asked.Load(), resp.Header.Get("WWW-Authenticate"))
	}
}

// unavailableVerifier cannot reach its store.
type unavailableVerifier struct{}

func (unavailableVerifier) Verify(context.Context, string) (mcpendpoint.Principal, error) {
	return mcpendpoint.Principal{}, fmt.Errorf("querying tokens: %w", mcpendpoint.ErrUnavailable)
}

// expiredVerifier knows the token, which has expired.
type expiredVerifier struct{}

func (expiredVerifier) Verify(context.Context, string) (mcpendpoint.Principal, error) {
	return mcpendpoint.Principal{}, fmt.Errorf("access token expired: %w", mcpendpoint.ErrExpired)
}

// TestExpiredTokenNotCounted: an expired genuine token gets 401
// invalid_token, and is not counted as a guess.
func TestExpiredTokenNotCounted(t *testing.T) {
	lim := &fakeLimiter{max: 1, fails: map[string]int{}}
	ep, err := mcpendpoint.New(hosttest.New(nil), expiredVerifier{}, &mcpendpoint.Options{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
		req.Header.Set("Authorization", "Bearer tok")
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized || !strings.Contains(w.Header().Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("status %d %q, want 401 invalid_token", w.Code, w.Header().Get("WWW-Authenticate"))
		}
	}
	if n := lim.fails["192.0.2.1"]; n != 0 {
		t.Errorf("%d failures counted", n)
	}
}

// TestVerifierUnavailable: a verifier that cannot decide gives 503, and
// the failure does not count towards the lockout.
func TestVerifierUnavailable(t *testing.T) {
	lim := &fakeLimiter{max: 1, fails: map[string]int{}}
	ep, err := mcpendpoint.New(hosttest.New(nil), unavailableVerifier{}, &mcpendpoint.Options{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
		req.Header.Set("Authorization", "Bearer tok")
		req.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, req)
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("status %d, want 503", w.Code)
		}
	}
	if n := lim.fails["192.0.2.1"]; n != 0 {
		t.Errorf("%d failures counted", n)
	}
}

// TestDeleteSession: a client that ends its session is no longer counted,
// and the user's subscription ends with the last session.
func TestDeleteSession(t *testing.T) {
	e := newEnv(t, nil)
	c := e.mustConnect(t, aliceTok)
	c.names(t)
	if n := e.host.Subscribers("alice"); n != 1 {
		t.Errorf("%d subscriptions for alice, want 1", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session to close", func() bool { return e.ep.Sessions() == 0 && e.host.Subscribers("alice") == 0 })
}

// TestAuth: a request without a token, or with a wrong one, gets 401 with
// a Bearer challenge that never echoes the token; the limiter hears of
// each wrong token, with the token.
func TestAuth(t *testing.T) {
	lim := &fakeLimiter{max: 100, fails: map[string]int{}}
	e := newEnv(t, &mcpendpoint.Options{Limiter: lim, ResourceMetadataURL: "https://host.example/.well-known/oauth-protected-resource/mcp"})
	resp := e.rawPost(t, "", "", initBody, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `resource_metadata="https://host.example/`) {
		t.Errorf("no token: status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	const wrong = "tok-guess-0123456789"
	resp = e.rawPost(t, wrong, "", initBody, nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) ||
		strings.Contains(string(body), wrong) {
		t.Errorf("wrong token: status %d, WWW-Authenticate %q, body %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	e.ver.mu.Lock()
	e.ver.tokens["tok-operator"] = mcpendpoint.Principal{TokenID: "op1"}
	e.ver.mu.Unlock()
	if resp := e.rawPost(t, "tok-operator", "", initBody, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an operator token (no user): status %d, want 403", resp.StatusCode)
	}
	for _, hdr := range []string{"Basic dXNlcjpwYXNz", "Bearer", "Bearer a b"} {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(initBody))
		req.Header.Set("Authorization", hdr)
		resp, err := (&http.Client{Transport: e.tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", hdr, resp.StatusCode)
		}
	}
	e.mustConnect(t, aliceTok)
	lim.mu.Lock()
	defer lim.mu.Unlock()
	if lim.fails["loopback"] != 1 || len(lim.creds) != 1 || lim.creds[0] != wrong {
		t.Errorf("limiter saw %v failures with %q, want 1 failure with the wrong token (a missing token is no guess)", lim.fails, lim.creds)
	}
}

// TestLockout: once the limiter locks an address out, its wrong tokens
// get 429 with the limiter's message, and a valid token is still served.
func TestLockout(t *testing.T) {
	lim := &fakeLimiter{max: 3, fails: map[string]int{}}
	e := newEnv(t, &mcpendpoint.Options{Limiter: lim})
	for i := range 2 {
		if resp := e.rawPost(t, fmt.Sprintf("guess-%d", i), "", initBody, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("guess %d: status %d", i, resp.StatusCode)
		}
	}
	resp := e.rawPost(t, "guess-2", "", initBody, nil)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "locked out") {
		t.Errorf("the guess that locks out: status %d %q, want 429 with the limiter's message", resp.StatusCode, body)
	}
	c := e.mustConnect(t, aliceTok)
	c.names(t)
	if n := lim.fails["loopback"]; n != 3 {
		t.Errorf("the limiter heard %d failures, want 3 (a valid token is no failure)", n)
	}
}

// TestOriginAndHost: DNS-rebinding protection.
func TestOriginAndHost(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{AllowedOrigins: []string{"https://app.example.com"}})
	for hdr, want := range map[[2]string]int{
		{"Origin", "http://evil.example"}:          http.StatusForbidden,
		{"Origin", "https://app.example.com.evil"}: http.StatusForbidden,
		{"Origin", "null"}:                         http.StatusForbidden,
		{"Host", "evil.example:80"}:                http.StatusForbidden,
		{"Origin", "http://localhost:6274"}:        http.StatusOK,
		{"Origin", "https://APP.example.com"}:      http.StatusOK,
		{"Host", "localhost"}:                      http.StatusOK,
	} {
		resp := e.rawPost(t, aliceTok, "", initBody, map[string]string{hdr[0]: hdr[1]})
		if resp.StatusCode != want {
			t.Errorf("%s: %s: status %d, want %d", hdr[0], hdr[1], resp.StatusCode, want)
		}
		io.Copy(io.Discard, resp.Body)
	}
	// The unauthenticated are refused the same way (before the token).
	if resp := e.rawPost(t, "", "", initBody, map[string]string{"Origin": "http://evil.example"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign origin without a token: status %d, want 403", resp.StatusCode)
	}
	if _, err := mcpendpoint.New(hosttest.New(nil), &fakeVerifier{}, &mcpendpoint.Options{AllowedOrigins: []string{"app.example.com"}}); err == nil {
		t.Error("an origin without a scheme was accepted")
	}
}

// TestBodyLimitAndBatch: a large body gets 413, with or without a
// Content-Length; a JSON-RPC batch gets 400.
func TestBodyLimitAndBatch(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{MaxBodyBytes: 1024})
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":"` + strings.Repeat("x", 2048) + `"}}}`
	if resp := e.rawPost(t, aliceTok, "", big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: status %d, want 413", resp.StatusCode)
	}
	c := e.mustConnect(t, aliceTok)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, io.MultiReader(strings.NewReader(big))) // no length: chunked
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := (&http.Client{Transport: e.tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("large chunked body: status %d, want 413", resp.StatusCode)
	}
	resp = e.rawPost(t, aliceTok, c.ID(), ` [{"jsonrpc":"2.0","id":1,"method":"ping"}]`, nil)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "batches") {
		t.Errorf("batch: status %d %s, want 400", resp.StatusCode, body)
	}
	// The session still works.
	c.names(t)
}

// TestProtocolVersions: a go-sdk client pinned to each revision the
// endpoint speaks lists and calls a tool; the stateful ones open a session,
// 2026-07-28 (what an unpinned go-sdk v1.8 client picks after
// server/discover) opens none.
func TestProtocolVersions(t *testing.T) {
	e := newEnv(t, nil)
	for _, v := range []string{"2025-03-26", "2025-06-18", "2025-11-25", ""} {
		t.Run(cmp.Or(v, "unpinned"), func(t *testing.T) {
			before := e.ep.Sessions()
			c, err := e.connect(t, aliceTok, v)
			if err != nil {
				t.Fatal(err)
			}
			want := cmp.Or(v, "2026-07-28")
			if got := c.InitializeResult().ProtocolVersion; got != want {
				t.Errorf("negotiated %q, want %q", got, want)
			}
			if got := c.names(t); !slices.Equal(got, []string{"notes__add", "notes__list"}) {
				t.Errorf("lists %v", got)
			}
			if res := c.call(t, "notes__add", `{"v":1}`); res.IsError || !strings.Contains(text(res), "alice notes/add") {
				t.Errorf("call: %q", text(res))
			}
			wantSessions := before + 1
			if v == "" {
				wantSessions = before
			}
			if n := e.ep.Sessions(); n != wantSessions {
				t.Errorf("Sessions() = %d, want %d", n, wantSessions)
			}
		})
	}
}

// TestToolsFailure: a user whose tools cannot be listed cannot open a
// session (503); the failure is not cached.
func TestToolsFailure(t *testing.T) {
	e := newEnv(t, nil)
	e.host.FailTools("alice", errors.New("activation failed"))
	resp := e.rawPost(t, aliceTok, "", initBody, nil)
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "activation") {
		t.Errorf("status %d %s, want 503 without the host's message", resp.StatusCode, body)
	}
	e.host.FailTools("alice", nil)
	e.mustConnect(t, aliceTok)
}

// TestClose: Close closes every session and later requests get 503.
func TestClose(t *testing.T) {
	e := newEnv(t, nil)
	c := e.mustConnect(t, aliceTok)
	c.names(t)
	e.mustConnect(t, bobTok)
	if err := e.ep.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.ep.Sessions(); n != 0 {
		t.Errorf("Sessions() = %d after Close", n)
	}
	if _, err := c.ListTools(context.Background(), nil); err == nil {
		t.Error("a session still works after Close")
	}
	if resp := e.rawPost(t, aliceTok, "", initBody, nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: status %d, want 503", resp.StatusCode)
	}
	if err := e.ep.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConcurrentChurn opens, uses and closes sessions of several users
// while their tools change, for the race detector and goleak.
func TestConcurrentChurn(t *testing.T) {
	e := newEnv(t, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 30 {
			e.host.SetTools("alice", tool(fmt.Sprintf("n/t%d", i%3), "", ""), tool("notes/add", "", ""))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	errs := make(chan error, 12)
	for i := range 12 {
		go func() {
			tok := []string{aliceTok, alice2Tok, bobTok}[i%3]
			c, err := e.connect(t, tok, "2025-11-25")
			if err != nil {
				errs <- err
				return
			}
			name := map[string]string{aliceTok: "notes__add", alice2Tok: "notes__add", bobTok: "web__fetch"}[tok]
			for range 10 {
				if res, err := c.tryCall(name, `{}`); err != nil || res.IsError {
					errs <- fmt.Errorf("%s: %v %v", name, err, res)
					return
				}
			}
			errs <- c.Close()
		}()
	}
	for range 12 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	<-done
	waitFor(t, "all sessions to close", func() bool { return e.ep.Sessions() == 0 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
