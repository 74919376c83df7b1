package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearerRT adds a bearer token to every request.
type bearerRT struct{ tok string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// client is a real go-sdk MCP client on the host's endpoint.
type client struct {
	cs      *mcp.ClientSession
	changed chan struct{}
}

func connect(t *testing.T, url, token string) (*client, error) {
	return connectWith(t, url, token, nil, "")
}

// connectWith is connect with the client's options opts (nil: none; its
// ToolListChangedHandler is connect's), pinned to protocol version ("":
// go-sdk's choice).
func connectWith(t *testing.T, url, token string, opts *mcp.ClientOptions, version string) (*client, error) {
	c := &client{changed: make(chan struct{}, 16)}
	o := mcp.ClientOptions{}
	if opts != nil {
		o = *opts
	}
	o.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e"}, &o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	c.cs = cs
	t.Cleanup(func() { _ = cs.Close() })
	return c, nil
}

func (c *client) names(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var names []string
	for tool, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

func (c *client) call(t *testing.T, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
}

func text(r *mcp.CallToolResult) string {
	var s []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s = append(s, tc.Text)
		}
	}
	return strings.Join(s, "\n")
}

// TestMCPEndpointEndToEnd points a real MCP client (go-sdk) at the running
// host binary: it lists the user's tools, calls one of each example server
// and the hello extension, gets list_changed when the user switches a
// server off (through the JSON API the settings page uses), and no longer
// sees its tools; users never see each other's tools; a revoked token is
// refused at once, also on an open session.
func TestMCPEndpointEndToEnd(t *testing.T) {
	b := build(t)
	port := freePort(t)
	bearer := exec.Command(b.bearer, "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-reveal-token")
	if err := bearer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bearer.Process.Signal(syscall.SIGTERM)
		_ = bearer.Wait()
	})
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{
			"notes": map[string]any{"command": b.notes},
			"web":   map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/mcp", port)},
		},
	}, map[string]any{"extensions": map[string]any{"hello": map[string]any{"path": b.hello}}})
	e.startServe()
	if e.url == "" {
		t.Fatal("serve printed no URL")
	}
	token := func(user string) string {
		return strings.TrimSpace(e.must("", "token", "create", "--user", user, "--name", "e2e"))
	}
	aliceTok, bobTok := token("alice"), token("bob")
	e.must("alice-web-canary\n", "secret", "set", "--user", "alice", "--ext", "mcp", "token:web")

	alice, err := connect(t, e.url, aliceTok)
	if err != nil {
		t.Fatal(err)
	}
	names := alice.names(t)
	for _, want := range []string{"hello__greet", "notes__add_note", "notes__echo", "web__whoami"} {
		if !slices.Contains(names, want) {
			t.Errorf("alice's tools lack %s: %v", want, names)
		}
	}
	for name, args := range map[string]any{
		"hello__greet": map[string]any{"name": "Ann"},
		"notes__echo":  map[string]any{"text": "from notes"},
		"web__echo":    map[string]any{"text": "from web"},
	} {
		res, err := alice.call(t, name, args)
		if err != nil || res.IsError {
			t.Errorf("calling %s: %v %v", name, err, res)
			continue
		}
		if got := text(res); got == "" {
			t.Errorf("%s returned no text", name)
		}
	}
	if res, _ := alice.call(t, "web__whoami", map[string]any{}); res == nil || !strings.Contains(text(res)+fmt.Sprint(res.StructuredContent), "alice-web-canary") {
		t.Errorf("web__whoami for alice = %v; want her own token upstream", res)
	}

	bob, err := connect(t, e.url, bobTok)
	if err != nil {
		t.Fatal(err)
	}
	bobNames := bob.names(t)
	if slices.Contains(bobNames, "web__whoami") {
		t.Errorf("bob, who has no web token, lists web tools: %v", bobNames)
	}
	if res, err := bob.call(t, "web__whoami", map[string]any{}); err == nil && !res.IsError {
		t.Errorf("bob called a tool of alice's list: %s", text(res))
	}

	// Switch notes off for alice through the JSON API the settings page
	// uses: her session hears list_changed and loses the notes tools.
	req, _ := http.NewRequest("PUT", e.url+"/api/v1/settings/mcp/servers", strings.NewReader(`{"notes":false}`))
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT settings: HTTP %d", resp.StatusCode)
	}
	select {
	case <-alice.changed:
	case <-time.After(15 * time.Second):
		t.Fatal("alice's session got no tools/list_changed after she switched notes off")
	}
	if got := alice.names(t); slices.Contains(got, "notes__echo") || !slices.Contains(got, "hello__greet") {
		t.Errorf("alice's tools after switching notes off: %v", got)
	}
	if got := bob.names(t); !slices.Contains(got, "notes__echo") {
		t.Errorf("alice's switch changed bob's tools: %v", got)
	}

	// A wrong Origin is refused (DNS-rebinding protection).
	oreq, _ := http.NewRequest("POST", e.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	oreq.Header.Set("Authorization", "Bearer "+aliceTok)
	oreq.Header.Set("Origin", "https://evil.example")
	oreq.Header.Set("Content-Type", "application/json")
	oreq.Header.Set("Accept", "application/json, text/event-stream")
	if oresp, err := http.DefaultClient.Do(oreq); err != nil || oresp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Origin: %v %v; want 403", err, oresp.Status)
	} else {
		_ = oresp.Body.Close()
	}

	// Revoke alice's token: her open session is refused at once.
	var toks []struct{ ID, User string }
	if err := json.Unmarshal([]byte(e.must("", "token", "list", "--user", "alice", "--json")), &toks); err != nil || len(toks) != 1 {
		t.Fatalf("token list: %v %v", toks, err)
	}
	e.must("", "token", "revoke", toks[0].ID)
	if _, err := alice.call(t, "hello__greet", map[string]any{"name": "x"}); err == nil {
		t.Error("a revoked token's open session still works")
	}
	if _, err := connect(t, e.url, aliceTok); err == nil {
		t.Error("a revoked token opened a new session")
	} else if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
		t.Logf("revoked token connect error: %v", err)
	}
	if res, err := bob.call(t, "notes__echo", map[string]any{"text": "still here"}); err != nil || res.IsError {
		t.Errorf("bob's session after alice's revocation: %v %v", err, res)
	}
}
