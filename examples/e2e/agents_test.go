package e2e_test

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConnectYourAgentAndCatalogInABrowser drives headless Chromium through
// the end user's way in, on the running host binary with the real ext-mcp:
//
//   - "Connect your agent": the button makes a token for Claude Code, the
//     page shows the command with it once, and a go-sdk client using that
//     token lists the user's tools on /mcp;
//   - the operator's catalog: the user switches on its entry for the
//     example bearer server (which accepts one token only), fills its
//     input and its secret in the browser, and a go-sdk client calls the
//     server's tool over /mcp with the secret as its token; the secret is
//     in the user's secrets, not in their settings, and not on the page.
func TestConnectYourAgentAndCatalogInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	const secret = "CANARY-catalog-secret-7f3a"
	port := freePort(t)
	bearer := exec.Command(b.bearer, "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-tokens", secret, "-reveal-token")
	if err := bearer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bearer.Process.Signal(syscall.SIGTERM)
		_ = bearer.Wait()
	})
	e := newEnv(t, b, map[string]any{
		"userServers":          "url",
		"userServerAllowCIDRs": []string{"127.0.0.1/32"},
		"mcpServers":           map[string]any{"notes": map[string]any{"command": b.notes}},
		"catalog": map[string]any{
			"web": map[string]any{
				"title":       "Web (bearer example)",
				"description": "The example bearer server.",
				"remote": map[string]any{
					"type": "streamable-http", "url": fmt.Sprintf("http://127.0.0.1:%d/{path}", port),
					"headers": map[string]any{"Authorization": "Bearer {token}"},
				},
				"inputs": []any{
					map[string]any{"name": "path", "description": "The endpoint's path.", "isRequired": true},
					map[string]any{"name": "token", "description": "Your token for it.", "isSecret": true, "isRequired": true},
				},
			},
		},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	e.startServe()
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))

	ctx := newBrowser(t)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1100, 900),
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#continue`)),
		chromedp.Click(chromedp.CSS(`#continue`)),
		chromedp.WaitVisible(chromedp.CSS(`#agents-link`)),
		chromedp.Click(chromedp.CSS(`#agents-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#token-claude-code`)),
	); err != nil {
		t.Fatalf("sign in and open Connect your agent: %v", err)
	}
	before, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('snippet-claude-code').textContent`))
	if err != nil || strings.Contains(before, "ah_") || !strings.Contains(before, e.url+"/mcp") {
		t.Fatalf("the snippet before the button: %q %v", before, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#token-claude-code`)),
		chromedp.WaitVisible(chromedp.CSS(`#app-claude-code .new-token`)),
	); err != nil {
		t.Fatalf("create a token for Claude Code: %v", err)
	}
	type snippet struct {
		Text string
		Copy bool
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[snippet](`(() => {
		const pre = document.getElementById('snippet-claude-code');
		const next = pre.nextElementSibling;
		return {Text: pre.textContent, Copy: !!next && next.matches('button.copy')};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^claude mcp add --transport http agenthost (\S+) --header "Authorization: Bearer (ah_[A-Za-z0-9_-]+)"$`).FindStringSubmatch(got.Text)
	if m == nil || m[1] != e.url+"/mcp" || !got.Copy {
		t.Fatalf("the Claude Code snippet: %+v", got)
	}
	agent, err := connect(t, e.url, m[2])
	if err != nil {
		t.Fatalf("the token made for Claude Code on /mcp: %v", err)
	}
	if names := agent.names(t); !slices.Contains(names, "notes__echo") {
		t.Fatalf("the agent's tools: %v", names)
	}
	if out := e.must("", "token", "list", "--user", "alice"); !strings.Contains(out, "Claude Code (") {
		t.Errorf("no token named for the app:\n%s", out)
	}

	// The catalog: switch the entry on, fill its input and its secret.
	const form = `#s-mcp-catalog-web-form`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/settings"),
		chromedp.WaitVisible(chromedp.CSS(form)),
		chromedp.Click(chromedp.CSS(form+` input[name="added"]`)),
		chromedp.SetValue(chromedp.CSS(form+` input[name="inputs.path"]`), "mcp"),
		chromedp.SetValue(chromedp.CSS(form+` input[name="token:u_web"]`), secret),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	); err != nil {
		t.Fatalf("add the catalog server: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil || strings.Contains(page, secret) || !strings.Contains(page, "Saved") {
		t.Fatalf("the page after saving (must say Saved, never the secret): %v\n%s", err, page)
	}
	eventually(t, "u_web in alice's tools", func() bool { return slices.Contains(e.toolNames("alice"), "u_web/whoami") })
	res, err := agent.call(t, "u_web__whoami", map[string]any{})
	if err != nil || res.IsError || !strings.Contains(text(res), secret) {
		t.Fatalf("u_web__whoami over /mcp: %v %+v", err, res)
	}
	// The secret went to the user's secrets, not into their settings.
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "check"))
	if code, body := e.api("GET", "/api/v1/secrets/mcp", tok, ""); code != 200 || !strings.Contains(body, "token:u_web") {
		t.Errorf("token:u_web is not among alice's secrets: %d %s", code, body)
	}
	code, body := e.api("GET", "/api/v1/settings/mcp/catalog-web", tok, "")
	if code != 200 || strings.Contains(body, secret) || !strings.Contains(body, `"added":true`) {
		t.Errorf("alice's catalog settings: %d %s", code, body)
	}
	if names := e.toolNames("bob"); slices.Contains(names, "u_web/whoami") {
		t.Errorf("bob has alice's server: %v", names)
	}
}

// TestConfigCheckCatalog: agenthost config check refuses an operator's
// file whose catalog is wrong, naming the entry and the field, and passes
// a sound one.
func TestConfigCheckCatalog(t *testing.T) {
	b := build(t)
	bad := newEnv(t, b, map[string]any{
		"userServers": "url",
		"catalog": map[string]any{
			"web": map[string]any{
				"remote": map[string]any{"url": "https://{host}/mcp?key={token}"},
				"inputs": []any{map[string]any{"name": "token", "isSecret": true}},
			},
		},
	})
	out, errOut, code := bad.run("", "config", "check")
	for _, want := range []string{"catalog.web.remote.url: {host} names no input", `catalog.web.remote.url: uses the secret input "token"`} {
		if code != 1 || !strings.Contains(out+errOut, want) {
			t.Errorf("config check: exit %d, want 1 and %q:\n%s%s", code, want, out, errOut)
		}
	}
	good := newEnv(t, b, map[string]any{
		"userServers": "url",
		"catalog": map[string]any{
			"web": map[string]any{
				"remote": map[string]any{"url": "https://{host}/mcp", "headers": map[string]any{"Authorization": "Bearer {token}"}},
				"inputs": []any{map[string]any{"name": "host"}, map[string]any{"name": "token", "isSecret": true}},
			},
		},
	})
	good.must("", "config", "check")
}
