package extmcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// TestAuthTransport checks the header rules of remote servers: configured
// headers pass, Authorization in any spelling is replaced by the user's
// token or dropped, and never follows a redirect to another origin; nor
// does a header that holds a catalog server's secret input.
func TestAuthTransport(t *testing.T) {
	var got []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Clone())
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Clone())
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, other.URL+"/elsewhere", http.StatusFound)
		}
	}))
	defer srv.Close()
	u := srv.URL
	hdr := http.Header{}
	for k, v := range map[string]string{"X-Team": "blue", "X-API-Key": "key-1"} {
		hdr.Set(k, v)
	}
	for name, tc := range map[string]struct {
		token string
		want  string
	}{
		"with a token":    {"tok-1", "Bearer tok-1"},
		"without a token": {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			got = nil
			rt := &authTransport{base: http.DefaultTransport, origin: strings.ToLower(u), headers: hdr, token: tc.token, secretHeaders: []string{"X-API-Key"}}
			c := &http.Client{Transport: rt}
			req, _ := http.NewRequest("GET", u+"/redirect", nil)
			req.Header.Set("authorization", "Bearer injected")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(got) != 2 {
				t.Fatalf("%d requests, want the request and its redirect", len(got))
			}
			if a := got[0].Get("Authorization"); a != tc.want {
				t.Errorf("Authorization to the server: %q, want %q", a, tc.want)
			}
			if got[0].Get("X-Team") != "blue" {
				t.Error("configured header lost")
			}
			if a := got[1].Get("Authorization"); a != "" {
				t.Errorf("Authorization followed a redirect to another origin: %q", a)
			}
			if got[0].Get("X-API-Key") != "key-1" || got[1].Get("X-API-Key") != "" {
				t.Errorf("the secret header: %q to the server, %q to another origin", got[0].Get("X-API-Key"), got[1].Get("X-API-Key"))
			}
		})
	}
}

func TestIsAuthorization(t *testing.T) {
	for _, k := range []string{"Authorization", "authorization", "AUTHORIZATION", " AuThOrIzAtIoN "} {
		if !isAuthorization(k) {
			t.Errorf("%q not recognised", k)
		}
	}
	if isAuthorization("Proxy-Authorization") || isAuthorization("X-Authorization") {
		t.Error("another header taken for Authorization")
	}
}

func TestToResultAndRedact(t *testing.T) {
	res, err := toResult(&mcp.CallToolResult{})
	if err != nil || string(res.Content) != "[]" || res.StructuredContent != nil || res.IsError {
		t.Errorf("empty result: %+v %v", res, err)
	}
	res, _ = toResult(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "x"}}, Meta: mcp.Meta{"k": "v"}})
	if string(res.Details) != `{"_meta":{"k":"v"}}` {
		t.Errorf("details %s", res.Details)
	}
	c := &conn{server: "s", secrets: []string{"SECRET-1"}}
	base := errors.New(`Post "http://h": 401 for Bearer SECRET-1`)
	r := c.redact(base)
	if strings.Contains(r.Error(), "SECRET-1") || !errors.Is(r, base) {
		t.Errorf("redact: %v", r)
	}
	if c.redact(context.Canceled) != context.Canceled {
		t.Error("an error without secrets was rewrapped")
	}
}

// TestProtocolErrorIsResult checks that a JSON-RPC error from the server
// becomes an error result naming the server, with no token in it.
func TestProtocolErrorIsResult(t *testing.T) {
	ctx := context.Background()
	s := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "fails", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: -32001, Message: "quota exceeded for TOKEN-9"}
		})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{server: "srv", cs: cs, secrets: []string{"TOKEN-9"}, done: make(chan struct{}), cancel: func() {},
		active: map[*activeCall]struct{}{}}
	go c.wait()
	defer func() {
		_ = c.Close()
		_ = ss.Wait()
	}()
	for tool, want := range map[string]string{
		"nope":  `MCP server "srv" refused the call of "nope": `,
		"fails": `MCP server "srv" refused the call of "fails": quota exceeded for [redacted] (code -32001)`,
	} {
		res, err := c.CallTool(ctx, &ext.CallToolRequest{User: "u", Name: tool})
		if err != nil || !res.IsError || !strings.HasPrefix(res.Text(), want) {
			t.Errorf("%s: %v %q; want an error result starting %q", tool, err, res.Text(), want)
		}
	}
}

// endedSession is the session of a call that has just ended.
type endedSession struct{ ext.Session }

func (endedSession) Request(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return nil, ext.Errorf(ext.ErrUnavailable, "the request this session belongs to has ended")
}

// userSession answers as the user's most recent client session would.
type userSession struct{ ext.Session }

func (userSession) Request(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"roots":[{"uri":"file:///work"}]}`), nil
}

// TestAskRootsOfEndedCall: a server asks for roots outside any call while
// an unrelated call is in flight, and that call ends before the client
// answers: roots come from the user's session instead; sampling of an
// ended call is not moved to another session.
func TestAskRootsOfEndedCall(t *testing.T) {
	h := &exttestHost{user: userSession{}}
	c := &conn{host: h, user: "alice", active: map[*activeCall]struct{}{}}
	done := c.track(endedSession{}, "")
	defer done()
	res, err := c.ask(context.Background(), ext.MethodListRoots, json.RawMessage(`{}`))
	if err != nil || !strings.Contains(string(res), "file:///work") {
		t.Errorf("roots after the call ended = %s, %v; want the user's session's roots", res, err)
	}
	if _, err := c.ask(context.Background(), ext.MethodCreateMessage, json.RawMessage(`{}`)); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("sampling for an ended call = %v, want unavailable (not another session)", err)
	}
}

// exttestHost is an ext.Host whose RequestUser asks one session.
type exttestHost struct {
	ext.Host
	user ext.Session
}

func (h *exttestHost) RequestUser(ctx context.Context, _, method string, params json.RawMessage) (json.RawMessage, error) {
	return h.user.Request(ctx, method, params)
}

// TestSandboxedSpecs: the users' own stdio servers always ask the host for
// its sandbox, with their absolute command readable; the operator's do
// when the config says so (top level or per server, the server winning),
// with their readable paths, command and cwd; and the extension then
// lists the sandbox capability, so a host that cannot sandbox refuses it.
func TestSandboxedSpecs(t *testing.T) {
	cfg, err := ParseConfig(json.RawMessage(`{"userServers": "all", "sandbox": true, "mcpServers": {
		"boxed": {"command": "/opt/x/server", "cwd": "/opt/x", "readablePaths": ["/opt/share"]},
		"trusted": {"command": "notes", "sandbox": false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	x := New(nil)
	specOf := func(name string, s Server) *ext.ProcessSpec {
		sp, err := x.processSpec(context.Background(), nil, name, "alice", &userSpec{spec: &spec{name: name, server: cfg.withDefaults(s)}})
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	boxed := specOf("boxed", cfg.MCPServers["boxed"])
	if !boxed.Sandbox || strings.Join(boxed.ReadablePaths, " ") != "/opt/share /opt/x /opt/x/server" {
		t.Errorf("the operator's sandboxed server: sandbox %v, readable %q", boxed.Sandbox, boxed.ReadablePaths)
	}
	if trusted := specOf("trusted", cfg.MCPServers["trusted"]); trusted.Sandbox {
		t.Error("a server with sandbox false is sandboxed")
	}
	own, err := x.processSpec(context.Background(), nil, "u_mine", "alice", &userSpec{spec: &spec{name: "u_mine", own: true,
		server: Server{Command: "/home/alice/bin/srv", Cwd: "/home/alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !own.Sandbox || strings.Join(own.ReadablePaths, " ") != "/home/alice/bin/srv" {
		t.Errorf("a user's own server: sandbox %v, readable %q (their cwd must not be shown)", own.Sandbox, own.ReadablePaths)
	}
	for policy, want := range map[string]bool{`{"userServers": "all"}`: true, `{"userServers": "url"}`: false,
		`{"mcpServers": {"a": {"command": "x", "sandbox": true}}}`: true, `{"sandbox": true, "mcpServers": {"a": {"url": "https://h"}}}`: false} {
		c, err := ParseConfig(json.RawMessage(policy))
		if err != nil {
			t.Fatal(err)
		}
		x.mu.Lock()
		x.cfg = c
		x.mu.Unlock()
		d, err := x.Describe(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if d.Has(ext.CapabilitySandbox) != want {
			t.Errorf("%s: sandbox capability %v, want %v", policy, d.Has(ext.CapabilitySandbox), want)
		}
	}
}

// TestSourcePerServer checks that two servers whose grants share issuer,
// client and resource (one URL under two names, with the host's client
// ID metadata document or a configured client) keep a token source each:
// a connection of one must not replace the other's source, or that
// server's next connection would make a second source of the same grant,
// and two sources of one grant both use its rotating refresh token.
func TestSourcePerServer(t *testing.T) {
	x := New(nil)
	g := func(id string) *grant {
		return &grant{V: 1, ID: id, Issuer: "https://as.example", ClientID: "https://agents.example/oauth/client-metadata.json",
			Resource: "https://mcp.example/mcp"}
	}
	o := x.source("alice", "o", g("grant-o"))
	p := x.source("alice", "p", g("grant-p"))
	if x.source("alice", "o", g("grant-o")) != o || x.source("alice", "p", g("grant-p")) != p {
		t.Error("a server's token source was replaced by another server's")
	}
	if o == p {
		t.Error("two servers share one token source")
	}
}

// TestOutputRedactor: what a process wrote loses every secret it was
// handed (the token whatever its length, env values of 8 bytes or more,
// as written and escaped), and a cut line loses the start of one at its
// end (4 bytes or more); short env values stay.
func TestOutputRedactor(t *testing.T) {
	r := newOutputRedactor(&ext.ProcessSpec{Env: []string{"MCP_ACCESS_TOKEN=tok", "LEVEL=debug", "DB_PASSWORD=hunter2-\x1bpw"}}, "tok")
	for in, want := range map[string]string{
		"auth failed for tok at level debug":     "auth failed for [redacted] at level debug",
		`password hunter2-\u001bpw refused`:      "password [redacted] refused",
		"password hunter2-\x1bpw refused":        "password [redacted] refused",
		"a long line ending in hunt…":            "a long line ending in [redacted]…",
		"a long line ending in hun…":             "a long line ending in hun…",
		"a line that ends in hunt without a cut": "a line that ends in hunt without a cut",
		"token tokens, tok and a cut in the to…": "[redacted]en [redacted]ens, [redacted] and a cut in the to…",
	} {
		if got := r.line(in); got != want {
			t.Errorf("line(%q) = %q, want %q", in, got, want)
		}
	}
	if got := r.lines([]string{"1", "2", "3", "4", "5", "6 tok", ""}); got != "2 | 3 | 4 | 5 | 6 [redacted]" {
		t.Errorf("lines = %q", got)
	}
}
