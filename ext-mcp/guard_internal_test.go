package extmcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/netguard"
)

// TestOAuthTransportOwnHostOnly checks whom the OAuth requests of a
// server may reach: an operator's server's own host (any port) but no
// other loopback address, whether named (localhost) or not; a remote
// operator's server and a user's own server no loopback at all; and what
// userServerAllowCIDRs opens, every server's.
func TestOAuthTransportOwnHostOnly(t *testing.T) {
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer as.Close()
	u, _ := url.Parse(as.URL)
	byName := "http://localhost:" + u.Port()
	log := slog.New(slog.DiscardHandler)
	closed := newGuard(context.Background(), &Config{}, &ext.ConfigureRequest{}, log)
	opened := newGuard(context.Background(), &Config{UserServerAllowCIDRs: []string{"127.0.0.1/32", "::1/128"}}, &ext.ConfigureRequest{}, log)
	defer closed.closeIdle()
	defer opened.closeIdle()
	for _, c := range []struct {
		g         *guard
		own       bool
		serverURL string
		target    string
		ok        bool
	}{
		{closed, false, "http://127.0.0.1:1/mcp", as.URL, true},  // its own host, another port
		{closed, false, "http://127.0.0.1:1/mcp", byName, false}, // another name for loopback
		{closed, false, "http://localhost:1/mcp", byName, true},  // its own host by name
		{closed, false, "https://mcp.example.com/mcp", as.URL, false},
		{closed, false, "https://mcp.example.com/mcp", byName, false},
		{closed, true, as.URL + "/mcp", as.URL, false}, // a user's own server: its policy
		{opened, false, "https://mcp.example.com/mcp", byName, true},
		{opened, true, as.URL + "/mcp", as.URL, true},
	} {
		name := fmt.Sprintf("own=%v server=%s target=%s opened=%v", c.own, c.serverURL, c.target, c.g == opened)
		hc := &http.Client{Transport: c.g.oauthTransport(c.own, c.serverURL)}
		resp, err := hc.Get(c.target)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v; want reached", name, err)
		case !c.ok && !errors.Is(err, netguard.ErrBlocked):
			t.Errorf("%s: %v; want refused by the guard", name, err)
		}
	}
}
