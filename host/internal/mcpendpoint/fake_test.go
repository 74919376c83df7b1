package mcpendpoint_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tool builds a tool registration; exposure may be "".
func tool(name, desc string, exposure ext.Exposure) api.Tool {
	return api.Tool{Tool: ext.Tool{Name: name, Description: desc, Exposure: exposure,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}, Extension: "mcp"}
}

// fakeVerifier accepts the tokens it holds.
type fakeVerifier struct {
	mu     sync.Mutex
	tokens map[string]mcpendpoint.Principal
	calls  int
}

func (v *fakeVerifier) Verify(_ context.Context, token string) (mcpendpoint.Principal, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls++
	if p, ok := v.tokens[token]; ok {
		return p, nil
	}
	return mcpendpoint.Principal{}, errors.New("unknown token")
}

func (v *fakeVerifier) revoke(token string) {
	v.mu.Lock()
	delete(v.tokens, token)
	v.mu.Unlock()
}

// fakeLimiter locks an address out after max failures.
type fakeLimiter struct {
	mu    sync.Mutex
	max   int
	fails map[string]int
	creds []string
}

func (l *fakeLimiter) Fail(addr, credential string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fails[addr]++
	l.creds = append(l.creds, credential)
	if l.fails[addr] >= l.max {
		return errors.New("locked out")
	}
	return nil
}

// The tokens of the test principals.
const (
	aliceTok  = "tok-alice-1"
	alice2Tok = "tok-alice-2"
	bobTok    = "tok-bob"
)

// env is an endpoint behind an httptest server, with a fake host.
type env struct {
	host *hosttest.Host
	ver  *fakeVerifier
	ep   *mcpendpoint.Endpoint
	srv  *httptest.Server
	tr   *http.Transport
}

func newEnv(t testing.TB, opts *mcpendpoint.Options) *env {
	t.Helper()
	return newEnvWith(t, opts, nil)
}

// newEnvWith is newEnv with the endpoint talking to wrap(host) (nil: the
// host itself), for tests that hold the host's answers back.
func newEnvWith(t testing.TB, opts *mcpendpoint.Options, wrap func(*hosttest.Host) mcpendpoint.Host) *env {
	t.Helper()
	h := hosttest.New(nil)
	h.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/list", "List notes.", ext.ExposureDirect))
	h.SetTools("bob", tool("web/fetch", "Fetch a URL.", ""))
	v := &fakeVerifier{tokens: map[string]mcpendpoint.Principal{
		aliceTok:  {User: "alice", TokenID: "a1"},
		alice2Tok: {User: "alice", TokenID: "a2"},
		bobTok:    {User: "bob", TokenID: "b1"},
	}}
	var eh mcpendpoint.Host = h
	if wrap != nil {
		eh = wrap(h)
	}
	ep, err := mcpendpoint.New(eh, v, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ep)
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(func() {
		if err := ep.Close(); err != nil {
			t.Error(err)
		}
		srv.Close()
		tr.CloseIdleConnections()
	})
	return &env{host: h, ver: v, ep: ep, srv: srv, tr: tr}
}

// bearerRT adds a bearer token to every request.
type bearerRT struct {
	base  http.RoundTripper
	token string
}

func (b *bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// client is a go-sdk client session and the list_changed notifications it
// received.
type client struct {
	*mcp.ClientSession
	changed chan struct{}
}

// connect opens a session with token, speaking protocolVersion ("" lets
// go-sdk try the draft first and fall back).
func (e *env) connect(t testing.TB, token, protocolVersion string) (*client, error) {
	t.Helper()
	changed := make(chan struct{}, 64)
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	cs, err := e.dial(t, c, token, protocolVersion)
	if err != nil {
		return nil, err
	}
	return &client{cs, changed}, nil
}

// dial connects c to the endpoint with token, speaking protocolVersion
// ("" lets go-sdk choose); the session ends with the test.
func (e *env) dial(t testing.TB, c *mcp.Client, token, protocolVersion string) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   e.srv.URL,
		HTTPClient: &http.Client{Transport: &bearerRT{base: e.tr, token: token}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

func (e *env) mustConnect(t testing.TB, token string) *client {
	t.Helper()
	c, err := e.connect(t, token, "2025-11-25")
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	return c
}

// names lists the session's tool names.
func (c *client) names(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("listing tools: %v", err)
	}
	var out []string
	for _, tl := range res.Tools {
		out = append(out, tl.Name)
	}
	return out
}

func (c *client) call(t testing.TB, name, args string) *mcp.CallToolResult {
	t.Helper()
	res, err := c.tryCall(name, args)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func (c *client) tryCall(name, args string) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
}

// waitChanged waits for a list_changed notification.
func (c *client) waitChanged(t testing.TB) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/tools/list_changed")
	}
}

// drain forgets the notifications received so far.
func (c *client) drain() {
	for {
		select {
		case <-c.changed:
		default:
			return
		}
	}
}

// text returns the text of a result's text blocks.
func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// rawPost sends one JSON-RPC message to the endpoint by hand.
func (e *env) rawPost(t testing.TB, token, sessionID, body string, hdr map[string]string) *http.Response {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if hdr["Transfer-Encoding"] == "chunked" {
		r = io.MultiReader(r) // of unknown length: sent chunked
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for k, v := range hdr {
		switch k {
		case "Host":
			req.Host = v
			continue
		case "Transfer-Encoding":
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: e.tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// rpcMessage reads the JSON-RPC message of a response: the body of an
// application/json one (the endpoint's), or the first event of an SSE one.
func rpcMessage(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"jsonrpc"`) {
			return []byte(data)
		}
	}
	b, _ := io.ReadAll(resp.Body)
	t.Fatalf("no message in the response (status %d): %s", resp.StatusCode, b)
	return nil
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func (v *fakeVerifier) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls
}

// blockCalls makes every tool call of e wait for its context to end; the
// channel says when one started.
func (e *env) blockCalls() <-chan struct{} {
	started := make(chan struct{}, 1)
	e.host.SetCallTool(func(ctx context.Context, req *api.CallRequest) (*ext.CallToolResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return started
}
