package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bearerRT adds a bearer token to every request.
type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func serve(t *testing.T, o options) string {
	t.Helper()
	srv := httptest.NewServer(newHandler(o))
	t.Cleanup(srv.Close)
	return srv.URL
}

func dial(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearerRT{token}}, MaxRetries: -1}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func whoami(t *testing.T, cs *mcp.ClientSession) whoamiOut {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("whoami: %v %+v", err, res)
	}
	var out whoamiOut
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return out
}

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	url := serve(t, options{tokens: []string{"good"}})
	for _, tok := range []string{"", "bad"} {
		resp, err := (&http.Client{Transport: bearerRT{tok}}).Post(url, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, resp.StatusCode)
		}
		if _, err := dial(t, url, tok); err == nil {
			t.Errorf("token %q: an MCP client connected", tok)
		}
	}
}

func TestWhoamiAndEcho(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]options{
		"stateful":         {tokens: []string{"good"}},
		"stateless reveal": {stateless: true, reveal: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := serve(t, o)
			cs, err := dial(t, url, "good")
			if err != nil {
				t.Fatal(err)
			}
			who := whoami(t, cs)
			want := whoamiOut{User: tokenKey("good")}
			if o.reveal {
				want.Token = "good"
			}
			if who != want {
				t.Errorf("whoami %+v, want %+v", who, want)
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
			if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "hi" {
				t.Errorf("echo: %v %+v", err, res)
			}
		})
	}
}

// TestAPIKey: with an API key, a request needs both the token and the key
// in X-API-Key.
func TestAPIKey(t *testing.T) {
	t.Parallel()
	url := serve(t, options{tokens: []string{"good"}, apiKey: "key-1"})
	for _, key := range []string{"", "key-2"} {
		req, _ := http.NewRequest("POST", url, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := (&http.Client{Transport: bearerRT{"good"}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("key %q: status %d, want 401", key, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: keyRT{key: "key-1", next: bearerRT{"good"}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("with the token and the key: %v", err)
	}
	defer cs.Close()
	if who := whoami(t, cs); who.User == "" {
		t.Errorf("whoami: %+v", who)
	}
}

// keyRT adds an X-API-Key header.
type keyRT struct {
	key  string
	next http.RoundTripper
}

func (k keyRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", k.key)
	return k.next.RoundTrip(r)
}
