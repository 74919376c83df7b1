package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/internal/control"
	"github.com/agenthost/agenthost/host/serve"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is an in-process extension with one tool per user.
type clock struct{ h ext.Host }

func (c *clock) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "clock", Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers}}, nil
}

func (c *clock) Configure(_ context.Context, req *ext.ConfigureRequest) error {
	c.h = req.Host
	return nil
}

func (c *clock) Shutdown(context.Context) error { return nil }

func (c *clock) Activate(ctx context.Context, user string) error {
	return c.h.SetUserTools(ctx, user, []ext.Tool{{Name: "clock/now", Description: "The time, for " + user + "."}})
}

func (c *clock) Retire(context.Context, string, string) error { return nil }
func (c *clock) ReconcileAll(context.Context) error           { return nil }

func (c *clock) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	return ext.TextResult("noon for " + req.User), nil
}

// newHost starts a host with the clock extension in process.
func newHost(t testing.TB, cfg *host.Config) *host.Host {
	t.Helper()
	if cfg == nil {
		cfg = &host.Config{}
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	cfg.Secrets.Backend = "memory"
	h, err := host.New(context.Background(), cfg, &host.Options{
		Extensions: map[string]host.InProcess{"clock": {Extension: &clock{}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// bearer sends token as "Authorization: Bearer" over base.
func bearer(base http.RoundTripper, token string) http.RoundTripper {
	return &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}), Base: base}
}

// TestListenAndServe serves a real host on port 0: a token the server
// issues works on /mcp with a go-sdk client and on the JSON API, the CLI's
// control socket answers, an operator token reads /status.json, and
// cancelling the context stops everything and removes the socket.
func TestListenAndServe(t *testing.T) {
	h := newHost(t, nil)
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0", ControlSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || strings.HasSuffix(s.URL(), ":0") {
		t.Errorf("URL after Listen = %q, want the real port", s.URL())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	tok, err := s.CreateToken(ctx, "alice", "test")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: s.URL() + "/mcp", HTTPClient: &http.Client{Transport: bearer(tr, tok)}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "clock__now", Arguments: map[string]any{}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "noon for alice" {
		t.Errorf("calling clock__now over /mcp: %+v, %v", res, err)
	}
	_ = cs.Close()

	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/api/v1/tools", nil)
	resp, err := (&http.Client{Transport: bearer(tr, tok)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tools []host.Tool
	err = json.NewDecoder(resp.Body).Decode(&tools)
	resp.Body.Close()
	if err != nil || len(tools) != 1 || tools[0].Name != "clock/now" || tools[0].Extension != "clock" {
		t.Errorf("/api/v1/tools = %+v, %v", tools, err)
	}

	op, err := s.CreateOperatorToken(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequestWithContext(ctx, "GET", s.URL()+"/status.json", nil)
	resp, err = (&http.Client{Transport: bearer(tr, op)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"name":"clock"`) {
		t.Errorf("/status.json: %d %s", resp.StatusCode, body)
	}

	// The operator's token is genuine but no user's: /mcp refuses it with
	// 403, not 401, and does not count it as a guess.
	req, _ = http.NewRequestWithContext(ctx, "POST", s.URL()+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = (&http.Client{Transport: bearer(tr, op)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("an operator token on /mcp: %d, want 403", resp.StatusCode)
	}

	link, err := s.LoginLink(ctx, "alice")
	if err != nil || !strings.HasPrefix(link, s.URL()+"/settings/login?code=") {
		t.Errorf("login link %q, %v: want one on %s", link, err, s.URL())
	}
	toks, err := s.Tokens(ctx, "alice")
	if err != nil || len(toks) != 1 || toks[0].Name != "test" {
		t.Errorf("tokens = %+v, %v", toks, err)
	}

	// The CLI's control socket reaches the same host.
	c, err := control.Dial(ctx, h.Config().DataPath())
	if err != nil {
		t.Fatal(err)
	}
	ctools, err := c.Tools(ctx, "alice")
	c.Close()
	if err != nil || len(ctools) != 1 {
		t.Errorf("tools over the control socket = %+v, %v", ctools, err)
	}
	if s.ControlSocket() == "" {
		t.Error("no control socket path")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after the context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the context ended")
	}
	if _, err := os.Stat(s.ControlSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the control socket is still there: %v", err)
	}
	if _, err := http.Get(s.URL() + "/healthz"); err == nil {
		t.Error("the server still answers after it closed")
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestRefusals: no host, an address beyond loopback without TLS, and a
// second control socket on the same data folder are errors that say why,
// and leave nothing open.
func TestRefusals(t *testing.T) {
	if _, err := serve.New(nil, nil); err == nil {
		t.Error("New(nil) succeeded")
	}
	h := newHost(t, nil)
	_, err := serve.New(h, &serve.Options{Addr: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "tls is not configured") {
		t.Errorf("listening beyond loopback without TLS: %v", err)
	}
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0", ControlSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0", ControlSocket: true}); err == nil ||
		!strings.Contains(err.Error(), "another agenthost is running") {
		t.Errorf("a second control socket: %v", err)
	}
}

// TestHandler mounts the surfaces in a server of one's own.
func TestHandler(t *testing.T) {
	h := newHost(t, &host.Config{PublicURL: "https://agents.example.com"})
	s, err := serve.New(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.URL() != "https://agents.example.com" {
		t.Errorf("URL = %q, want the public URL", s.URL())
	}
	rec := &recorder{header: http.Header{}}
	r, _ := http.NewRequest("GET", "/healthz", nil)
	s.Handler().ServeHTTP(rec, r)
	if rec.code != 200 || rec.body.String() != "ok\n" {
		t.Errorf("/healthz = %d %q", rec.code, rec.body.String())
	}
}

type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(c int)   { r.code = c }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}

// ExampleNew serves an embedded host with an in-process extension and
// reads a user's tools from the JSON API with the token the server issued.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "serve-example-")
	defer os.RemoveAll(dir)
	h, err := host.New(ctx, &host.Config{DataDir: dir, Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"clock": {Extension: &clock{}}}})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	s, err := serve.New(h, &serve.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	ln, err := s.Listen()
	if err != nil {
		panic(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx, ln) }()
	defer func() { stop(); <-done }()

	tok, err := s.CreateToken(ctx, "alice", "example")
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest("GET", s.URL()+"/api/v1/tools", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var tools []host.Tool
	if err := json.NewDecoder(resp.Body).Decode(&tools); err != nil {
		panic(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name, "-", t.Description)
	}
	// Output:
	// clock/now - The time, for alice.
}
