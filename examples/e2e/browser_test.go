package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// TestSettingsPageInABrowser drives headless Chromium through the settings
// page of the running host binary with the real ext-mcp: sign in with a
// one-time link, switch a server off, save invalid JSON in "Your MCP
// servers" and see the error next to the field, store a token; each step
// is checked afterwards through the CLI talking to the same host.
func TestSettingsPageInABrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI (apt-get install chromium): %v", chromiumPath, err)
		}
		t.Skipf("SKIPPING THE BROWSER TEST: %s is missing (apt-get install chromium)", chromiumPath)
	}
	b := build(t)
	e := newEnv(t, b, map[string]any{
		"userServers": "url",
		"mcpServers": map[string]any{
			"notes": map[string]any{"command": b.notes, "args": []string{"-reveal-token"}},
		},
	})
	e.startServe()
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))
	if !strings.HasPrefix(link, e.url+"/settings/login?code=") {
		t.Fatalf("login link %q does not point at %s", link, e.url)
	}
	if !hasPrefix(e.toolNames("alice"), "notes/") {
		t.Fatal("notes is not on before the browser switches it off")
	}

	dataDir := filepath.Join(t.TempDir(), "chromium")
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dataDir),
	)
	bctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(bctx, 60*time.Second)
	defer func() {
		cancelTimeout()
		cctx, cancelClose := context.WithTimeout(bctx, 10*time.Second)
		_ = chromedp.Cancel(cctx)
		cancelClose()
		cancelCtx()
		cancelAlloc()
		if n := leftoverChromium(dataDir, 5*time.Second); n > 0 {
			t.Errorf("%d Chromium processes outlived the test (killed now)", n)
		}
	}()
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	text := func(step string, a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return v
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	const (
		serversForm = `#s-mcp-servers-form`
		userForm    = `#s-mcp-user-servers-form`
	)

	do("sign in with the one-time link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(serversForm)),
	)

	do("switch notes off",
		chromedp.Click(css(serversForm+` input[name="notes"]`)),
		chromedp.Click(css(serversForm+` p.actions button`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	eventually(t, "notes leaves alice's tools", func() bool { return !hasPrefix(e.toolNames("alice"), "notes/") })

	bad := `{"mcpServers": {"mine": {"url": "https://example.com/mcp",}}}`
	do("save invalid JSON",
		chromedp.SetValue(css(userForm+` textarea[name="servers"]`), bad),
		chromedp.Click(css(userForm+` p.actions button`)),
		chromedp.WaitVisible(css(userForm+` .field-error`)),
	)
	errText := text("error text", chromedp.Text(css(userForm+` .field-error`)))
	kept := text("kept text", chromedp.Value(css(userForm+` textarea[name="servers"]`)))
	nextToField, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const ta = document.querySelector('`+userForm+` textarea[name="servers"]');
		const err = ta.closest('.field').querySelector('.field-error');
		return !!err && ta.getAttribute('aria-invalid') === 'true' &&
			ta.getAttribute('aria-describedby').split(' ').includes(err.id);
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if errText == "" || kept != bad || !nextToField {
		t.Errorf("invalid JSON: error %q, tied to the field %v, text kept %v", errText, nextToField, kept == bad)
	}
	// The page's little script checks JSON while the user types.
	do("live JSON check",
		chromedp.SetValue(css(userForm+` textarea[name="servers"]`), `{"mcpServers": {}`),
		chromedp.SendKeys(css(userForm+` textarea[name="servers"]`), " "),
		chromedp.WaitVisible(css(userForm+` .json-live.bad`)),
	)

	canary := "alice-browser-canary-" + strconv.FormatInt(time.Now().UnixNano(), 16)
	do("store a token",
		chromedp.Navigate(e.url+"/settings"),
		chromedp.WaitVisible(css(serversForm)),
		chromedp.SendKeys(css(serversForm+` input[name="token:notes"]`), canary),
		chromedp.Click(css(serversForm+` p.actions button`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	state := text("secret state", chromedp.Text(css(serversForm+` .field-secret .secret-state`)))
	input := text("secret input", chromedp.Value(css(serversForm+` input[name="token:notes"]`)))
	if html := text("page", chromedp.OuterHTML(css(`html`))); strings.Contains(html, canary) || input != "" || state != "Set" {
		t.Errorf("after storing the token: state %q, input %q, page shows it %v", state, input, strings.Contains(html, canary))
	}

	// Checked through the CLI on the same running host.
	var got []struct {
		Section string
		Values  json.RawMessage
		Secrets map[string]bool
	}
	if err := json.Unmarshal([]byte(e.must("", "settings", "get", "--user", "alice", "--ext", "mcp")), &got); err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		var compact bytes.Buffer
		_ = json.Compact(&compact, s.Values)
		s.Values = compact.Bytes()
		switch s.Section {
		case "servers":
			if !strings.Contains(string(s.Values), `"notes":false`) || !s.Secrets["token:notes"] {
				t.Errorf("servers after the browser: %s %v", s.Values, s.Secrets)
			}
		case "user-servers":
			if strings.Contains(string(s.Values), "mine") {
				t.Errorf("the invalid JSON was stored: %s", s.Values)
			}
		}
	}
	// The token reaches the server once notes is on again.
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", `{"notes":true}`)
	eventually(t, "notes back", func() bool { return hasPrefix(e.toolNames("alice"), "notes/") })
	if out := e.must("", "call", "--user", "alice", "notes/whoami", "{}"); !strings.Contains(out, canary) {
		t.Errorf("the token stored in the browser did not reach the server: %s", out)
	}
}

// leftoverChromium waits up to grace for the processes started with
// --user-data-dir=dir to exit, kills those still there, and returns how
// many it had to kill.
func leftoverChromium(dir string, grace time.Duration) int {
	want := []byte("--user-data-dir=" + dir)
	find := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, d := range entries {
			pid, err := strconv.Atoi(d.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			if err != nil {
				continue
			}
			for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
				if bytes.Equal(arg, want) {
					pids = append(pids, pid)
					break
				}
			}
		}
		return pids
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if len(find()) == 0 {
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	pids := find()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}
