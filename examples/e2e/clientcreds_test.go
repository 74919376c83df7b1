package e2e_test

import (
	"strings"
	"testing"
)

// TestClientCredentialsEndToEnd (issue 17, item 11): the real host with a
// shared server on the client credentials grant, its client secret stored
// with `secret set --operator` (stdin, never argv), against the example
// provider's -client-credentials: with nobody signing in, the user it is
// lent to switches it on and calls it as the machine's account; a second
// server naming a wrong secret shows in `status` as failed with a reason
// naming the server, the client and the operator secret, never the
// secret's value, nor is any secret in the host's log.
func TestClientCredentialsEndToEnd(t *testing.T) {
	b := build(t)
	secret, wrong := canaryLogin("cc-secret"), canaryLogin("cc-wrong")
	t.Setenv("E2E_CC_SECRET", secret)
	as := startProvider(t, b.oauth, "-client-credentials", "svc", "-client-secret-env", "E2E_CC_SECRET")
	server := func(ref string) map[string]any {
		return map[string]any{"url": as.base + "/mcp", "credentials": "shared", "users": []string{"alice"},
			"oauth": map[string]any{"grant": "client_credentials", "clientId": "svc", "clientSecret": map[string]any{"secret": ref}}}
	}
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"reports": server("reports-client"), "broken": server("broken-client")}})
	e.startServe()
	e.must(secret, "secret", "set", "--operator", "--ext", "mcp", "reports-client")
	e.must(wrong, "secret", "set", "--operator", "--ext", "mcp", "broken-client")
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", `{"reports": true, "broken": true}`)
	eventually(t, "alice has the tools of reports", func() bool { return hasPrefix(e.toolNames("alice"), "reports/whoami") })
	out := e.must("", "call", "--user", "alice", "reports/whoami", "{}")
	if !strings.Contains(out, "client:svc") {
		t.Errorf("reports/whoami as alice: %s; want the machine's account client:svc", out)
	}
	var status string
	eventually(t, "broken shows why", func() bool {
		status, _, _ = e.run("", "status", "--user", "alice")
		return strings.Contains(status, "invalid_client")
	})
	for _, want := range []string{`MCP server "broken"`, `client "svc"`, `operator secret "broken-client"`} {
		if !strings.Contains(status, want) {
			t.Errorf("status does not say %s:\n%s", want, status)
		}
	}
	for _, leak := range []string{secret, wrong} {
		if strings.Contains(status, leak) || strings.Contains(e.serveOut.String(), leak) {
			t.Errorf("a client secret is in the status or the host's log")
		}
	}
}
