package e2e_test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestOAuthOperatorTokenEndpointGuarded signs in to an operator's server
// whose authorization server metadata points token_endpoint at a loopback
// port of this machine that the operator did not open (by the name
// localhost, which resolves to loopback): the real host must refuse that
// address, name it, and send nothing there (no code, PKCE verifier or
// client secret: a canary listener sees no connection at all). With the
// port's address opened by userServerAllowCIDRs, the same request reaches
// it.
func TestOAuthOperatorTokenEndpointGuarded(t *testing.T) {
	b := build(t)
	canary := startCanary(t)
	as := startProvider(t, b.oauth, "-token-endpoint", fmt.Sprintf("http://localhost:%d/token", canary.port))

	signIn := func(e *env) (int, string) {
		t.Helper()
		out := e.must("", "auth", "login", "--user", "alice", "--no-wait", "o")
		var authURL string
		for l := range strings.Lines(out) {
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "http") {
				authURL = s
			}
		}
		back := as.signInAt(authURL, canaryLogin("alice"))
		if !strings.HasPrefix(back, e.url+"/oauth/callback?") {
			t.Fatalf("the provider redirects to %q, want the host's callback", back)
		}
		c, _, page := fetch(t, browse(), "GET", back, nil)
		return c, page
	}

	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}}})
	e.startServe()
	c, page := signIn(e)
	for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", canary.port), "loopback address", "userServerAllowCIDRs"} {
		if strings.Contains(page, "Connected to o.") || !strings.Contains(page, want) {
			t.Errorf("the callback with a token endpoint on a loopback port: %d, want the sign-in refused saying %q:\n%s", c, want, page)
		}
	}
	if n := canary.conns.Load(); n != 0 {
		t.Errorf("the token endpoint on a loopback port the operator did not open got %d connection(s)", n)
	}

	// The operator opens the address: the token request goes there.
	e2 := newEnv(t, b, map[string]any{
		"mcpServers":           map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
		"userServerAllowCIDRs": []string{"127.0.0.1/32", "::1/128"},
	})
	e2.startServe()
	signIn(e2)
	if n := canary.conns.Load(); n == 0 {
		t.Errorf("with 127.0.0.1 opened by userServerAllowCIDRs the token endpoint got no connection")
	}
}

// canaryListener counts the connections made to a loopback port.
type canaryListener struct {
	port  int
	conns atomic.Int64
}

// startCanary listens on a loopback port, counting and closing every
// connection, until the test ends.
func startCanary(t *testing.T) *canaryListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &canaryListener{port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns.Add(1)
			_ = conn.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return c
}
