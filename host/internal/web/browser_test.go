package web

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser drives headless Chromium through the settings UI: sign in
// with a one-time link, switch a server off, save invalid JSON and see
// the error next to the field, store a token; each step is checked
// through the JSON API and the fake host afterwards.
func TestBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing on CI (install Debian's chromium package): %v", chromiumPath, err)
		}
		t.Skipf("SKIPPING THE BROWSER TEST: %s is missing (apt-get install chromium): %v", chromiumPath, err)
	}
	start := time.Now()
	e := newEnv(t, nil)
	apiTok := e.token("alice")
	code, err := e.a.CreateLoginLink(context.Background(), "alice", 0)
	if err != nil {
		t.Fatal(err)
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
	ctx, cancelTimeout := context.WithTimeout(bctx, 45*time.Second)
	defer func() {
		cancelTimeout()
		// Close the browser gracefully and wait for it, then for the
		// allocator; then make sure no Chromium process is left.
		cctx, cancelClose := context.WithTimeout(bctx, 10*time.Second)
		if err := chromedp.Cancel(cctx); err != nil {
			t.Logf("closing the browser: %v", err)
		}
		cancelClose()
		cancelCtx()
		cancelAlloc()
		if n := leftoverChromium(dataDir, 5*time.Second); n > 0 {
			t.Errorf("%d Chromium processes outlived the test (killed now)", n)
		}
		t.Logf("browser test took %s", time.Since(start).Round(time.Millisecond))
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
	truth := func(step, js string) bool {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
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

	// 1. Sign in with the one-time link: it asks first.
	do("open the login link",
		chromedp.Navigate(e.srv.URL+"/settings/login?code="+url.QueryEscape(code)),
		chromedp.WaitVisible(css(`#continue`)),
	)
	if h := text("heading", chromedp.Text(css(`h1`))); h != "Sign in as alice" {
		t.Errorf("login page heading %q", h)
	}
	do("sign in",
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(serversForm)),
	)
	if who := text("who", chromedp.Text(css(`header .who`))); !strings.Contains(who, "alice") {
		t.Errorf("signed in as %q", who)
	}

	// 2. Switch "notes" off and save.
	do("switch notes off",
		chromedp.Click(css(serversForm+` input[name="notes"]`)),
		chromedp.Click(css(serversForm+` p.actions button`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	flash := text("flash", chromedp.Text(css(`p.flash`)))
	notesOn := truth("notes checked", `document.querySelector('`+serversForm+` input[name="notes"]').checked`)
	if flash != "Saved “MCP servers”." || notesOn {
		t.Errorf("after switching off: flash %q, notes checked %v", flash, notesOn)
	}
	if r := e.api("GET", "/api/v1/settings/mcp/servers", apiTok, ""); !strings.Contains(r.body, `"values":{"notes":false,"search":false,"team":true}`) {
		t.Errorf("API after switching off: %s", r.body)
	}
	if r := e.api("GET", "/api/v1/tools", apiTok, ""); strings.Contains(r.body, "notes/") || !strings.Contains(r.body, "team/ask") {
		t.Errorf("tools after switching off: %s", r.body)
	}

	// 3. Save invalid JSON in "Your MCP servers": the error shows next to
	// the field and the text stays.
	bad := `{"mcpServers": {"mine": {"url": "https://example.com/mcp",}}}`
	do("save invalid JSON",
		chromedp.SetValue(css(userForm+` textarea[name="servers"]`), bad),
		chromedp.Click(css(userForm+` p.actions button`)),
		chromedp.WaitVisible(css(userForm+` .field-error`)),
	)
	errText := text("error", chromedp.Text(css(userForm+` .field-error`)))
	kept := text("kept", chromedp.Value(css(userForm+` textarea[name="servers"]`)))
	nextToField := truth("next to the field", `(() => {
		const ta = document.querySelector('`+userForm+` textarea[name="servers"]');
		const err = ta.closest('.field').querySelector('.field-error');
		return !!err && ta.getAttribute('aria-invalid') === 'true' &&
			ta.getAttribute('aria-describedby').split(' ').includes(err.id);
	})()`)
	if !strings.Contains(errText, "must be valid JSON") || kept != bad || !nextToField {
		t.Errorf("invalid JSON: error %q, kept %q, next to the field %v", errText, kept, nextToField)
	}
	if r := e.api("GET", "/api/v1/settings/mcp/user-servers", apiTok, ""); !strings.Contains(r.body, `"values":{}`) {
		t.Errorf("invalid JSON was stored: %s", r.body)
	}
	// The little script checks JSON while the user types.
	do("live JSON check",
		chromedp.SetValue(css(userForm+` textarea[name="servers"]`), `{"mcpServers": {}`),
		chromedp.SendKeys(css(userForm+` textarea[name="servers"]`), " "),
		chromedp.WaitVisible(css(userForm+` .json-live.bad`)),
	)
	if live := text("live", chromedp.Text(css(userForm+` .json-live`))); !strings.Contains(live, "Not valid JSON yet") {
		t.Errorf("live check says %q", live)
	}

	// 4. Store a token in the secret field of "notes".
	canary := "CANARY-alice-browser-" + strconv.FormatInt(time.Now().UnixNano(), 16)
	do("store a token",
		chromedp.Navigate(e.srv.URL+"/settings"),
		chromedp.WaitVisible(css(serversForm)),
		chromedp.SendKeys(css(serversForm+` input[name="token:notes"]`), canary),
		chromedp.Click(css(serversForm+` p.actions button`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	state := text("state", chromedp.Text(css(serversForm+` .field-secret .secret-state`)))
	inputValue := text("input", chromedp.Value(css(serversForm+` input[name="token:notes"]`)))
	html := text("html", chromedp.OuterHTML(css(`html`)))
	if state != "Set" || inputValue != "" || strings.Contains(html, canary) {
		t.Errorf("after storing: state %q, input %q, page has the token %v", state, inputValue, strings.Contains(html, canary))
	}
	if v, ok := e.h.secret("alice", "mcp", "token:notes"); !ok || v != canary {
		t.Errorf("the host holds %q, %v", v, ok)
	}
	if r := e.api("GET", "/api/v1/settings/mcp/servers", apiTok, ""); !strings.Contains(r.body, `"token:notes":true`) || strings.Contains(r.body, canary) {
		t.Errorf("API after storing: %s", r.body)
	}
	// Saving the token kept "notes" off.
	if r := e.api("GET", "/api/v1/settings/mcp/servers", apiTok, ""); !strings.Contains(r.body, `"notes":false`) {
		t.Errorf("storing the token changed the toggles: %s", r.body)
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("the browser test took %s; it must stay well under 60 s", d)
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
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
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
