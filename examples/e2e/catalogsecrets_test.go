package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/agenthost/examples/internal/testbin"
	"github.com/chromedp/chromedp"
)

// TestCatalogSecretInputsInABrowser drives headless Chromium through adding
// two servers from the operator's catalog, each with two secret inputs, on
// the running host binary with the real ext-mcp:
//
//   - "web", the example bearer server asking for a token and a key in
//     X-API-Key (it refuses a request without both);
//   - "notes", the example stdio server (sandboxed, a user's own), given
//     its token in MCP_ACCESS_TOKEN and a key in NOTES_KEY, without which
//     it does not start.
//
// The user adds web with its token only, and its status names the missing
// key; then fills the rest of the four secrets in the browser; a go-sdk client calls
// both servers' tools over /mcp, which answer with what they were given;
// the secrets are in the user's secrets (their names), never in the
// settings, the page or the notes process's arguments.
func TestCatalogSecretInputsInABrowser(t *testing.T) {
	needChromium(t)
	needSandbox(t)
	b := build(t)
	const (
		webToken   = "CANARY-web-token-5c1e"
		webKey     = "CANARY-web-key-93ab"
		notesToken = "CANARY-notes-token-0d7f"
		notesKey   = "CANARY-notes-key-e24c"
	)
	port := freePort(t)
	bearer := exec.Command(b.bearer, "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-tokens", webToken, "-api-key", webKey, "-reveal-token")
	if err := bearer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bearer.Process.Signal(syscall.SIGTERM)
		_ = bearer.Wait()
	})
	e := newEnv(t, b, map[string]any{
		"userServers":          "all",
		"userServerAllowCIDRs": []string{"127.0.0.1/32"},
		"catalog": map[string]any{
			"web": map[string]any{
				"title": "Web (bearer example with a key)",
				"remote": map[string]any{
					"url":     fmt.Sprintf("http://127.0.0.1:%d/mcp", port),
					"headers": map[string]any{"Authorization": "Bearer {token}", "X-API-Key": "{key}"},
				},
				"inputs": []any{
					map[string]any{"name": "token", "description": "Your token.", "isSecret": true, "isRequired": true},
					map[string]any{"name": "key", "description": "Your API key.", "isSecret": true, "isRequired": true},
				},
			},
			"notes": map[string]any{
				"title": "Notes (with a key)",
				"package": map[string]any{
					"command": b.notes,
					"args":    []any{"-reveal-token", "-key-env", "NOTES_KEY"},
					"env":     map[string]any{"MCP_ACCESS_TOKEN": "{token}", "NOTES_KEY": "{key}"},
				},
				"inputs": []any{
					map[string]any{"name": "token", "isSecret": true},
					map[string]any{"name": "key", "isSecret": true, "isRequired": true},
				},
			},
		},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	t.Cleanup(func() { // after the host stopped (cleanups run last first)
		if strings.Contains(e.serveOut.String(), "CANARY-") {
			t.Error("a secret is in the host's log")
		}
	})
	e.startServe()
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))

	ctx := newBrowser(t)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1100, 900),
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#continue`)),
		chromedp.Click(chromedp.CSS(`#continue`)),
		chromedp.WaitVisible(chromedp.CSS(`#agents-link`)),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "check"))
	// Added with its token only, web waits for its required key: its
	// status beside the switch names it.
	const webForm = `#s-mcp-catalog-web-form`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/settings"),
		chromedp.WaitVisible(chromedp.CSS(webForm)),
		chromedp.Click(chromedp.CSS(webForm+` input[name="added"]`)),
		chromedp.SetValue(chromedp.CSS(webForm+` input[name="token:u_web"]`), webToken),
		chromedp.Click(chromedp.CSS(webForm+` p.actions button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
	); err != nil {
		t.Fatalf("add web without its key: %v", err)
	}
	const reason = `needs your secret input \"key\"`
	eventually(t, "web's status names its missing key", func() bool {
		_, body := e.api("GET", "/api/v1/status", tok, "")
		return strings.Contains(body, reason) && strings.Contains(body, "input:u_web:key")
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/settings"), chromedp.WaitVisible(chromedp.CSS(webForm))); err != nil {
		t.Fatal(err)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#s-mcp-catalog-web-form').textContent`))
	if err != nil || !strings.Contains(status, `needs your secret input "key"`) {
		t.Errorf("the web section does not say its key is missing: %v\n%s", err, status)
	}
	// The token is set (it may be cleared), the key not; neither is shown.
	clears, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#s-mcp-catalog-web-form button.clear').length`))
	if err != nil || clears != 1 || strings.Contains(status, "CANARY-") {
		t.Errorf("the web section has %d Clear buttons, want 1 (the token's): %v", clears, err)
	}

	for name, secrets := range map[string][2]string{"web": {"", webKey}, "notes": {notesToken, notesKey}} {
		form := `#s-mcp-catalog-` + name + `-form`
		if err := chromedp.Do(ctx,
			chromedp.Navigate(e.url+"/settings"),
			chromedp.WaitVisible(chromedp.CSS(form)),
		); err != nil {
			t.Fatalf("open %s's section: %v", name, err)
		}
		if secrets[0] != "" { // web is on, its token set: only its key is filled in
			if err := chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(form+` input[name="added"]`)),
				chromedp.SetValue(chromedp.CSS(form+` input[name="token:u_`+name+`"]`), secrets[0]),
			); err != nil {
				t.Fatal(err)
			}
		}
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(form+` input[name="input:u_`+name+`:key"]`), secrets[1]),
			chromedp.Click(chromedp.CSS(form+` p.actions button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
		); err != nil {
			t.Fatalf("add %s from the catalog: %v", name, err)
		}
		page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		if err != nil || strings.Contains(page, "CANARY-") || !strings.Contains(page, "Saved") {
			t.Fatalf("the page after saving %s (must say Saved, never a secret): %v\n%s", name, err, page)
		}
	}

	eventually(t, "u_web and u_notes in alice's tools", func() bool {
		names := e.toolNames("alice")
		return slices.Contains(names, "u_web/whoami") && slices.Contains(names, "u_notes/whoami")
	})
	agent, err := connect(t, e.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	res, err := agent.call(t, "u_web__whoami", map[string]any{})
	if err != nil || res.IsError || !strings.Contains(text(res), webToken) {
		t.Fatalf("u_web__whoami over /mcp (the server wants the token and the key): %v %+v", err, res)
	}
	res, err = agent.call(t, "u_notes__whoami", map[string]any{})
	if err != nil || res.IsError || !strings.Contains(text(res), notesToken) || !strings.Contains(text(res), notesKey) {
		t.Fatalf("u_notes__whoami over /mcp (the process was given its token and its key): %v %+v", err, res)
	}
	// The key is in the process's environment, not its arguments.
	if len(pidsWithEnv("NOTES_KEY="+notesKey)) == 0 {
		t.Error("no notes process holds the key in NOTES_KEY")
	}
	if pids := pidsWithArg(notesKey); len(pids) > 0 {
		t.Errorf("the key is in the arguments of %v", pids)
	}

	code, body := e.api("GET", "/api/v1/secrets/mcp", tok, "")
	for _, want := range []string{"token:u_web", "input:u_web:key", "token:u_notes", "input:u_notes:key"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("%s is not among alice's secrets: %d %s", want, code, body)
		}
	}
	if strings.Contains(body, "CANARY-") {
		t.Errorf("the secrets API shows a value: %s", body)
	}
	for _, name := range []string{"web", "notes"} {
		code, body := e.api("GET", "/api/v1/settings/mcp/catalog-"+name, tok, "")
		if code != 200 || strings.Contains(body, "CANARY-") || !strings.Contains(body, `"added":true`) {
			t.Errorf("alice's catalog settings of %s: %d %s", name, code, body)
		}
	}
}

// pidsWithArg returns the processes of this machine with arg among their
// arguments (readable by every user, in /proc/<pid>/cmdline).
func pidsWithArg(arg string) []int {
	return testbin.Processes(func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		return err == nil && bytes.Contains(b, []byte(arg))
	})
}
