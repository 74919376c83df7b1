package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// TestSettingsPageInABrowser drives headless Chromium through the settings
// page of the running host binary with the real ext-mcp: sign in with a
// one-time link, switch a server off, save invalid JSON in "Your MCP
// servers" and see the error next to the field, store a token; each step
// is checked afterwards through the CLI talking to the same host.
func TestSettingsPageInABrowser(t *testing.T) {
	needChromium(t)
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

	ctx := newBrowser(t)
	do, text := browserSteps(ctx, t)
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

// TestConnectInABrowser drives headless Chromium through the headline
// journey with the real binaries: alice, signed in to the settings page,
// clicks the Connect beside the switch of a hosted server behind OAuth (the
// example provider), lands on the provider's sign-in page, signs in there
// as her account, comes back through the host's callback, and the
// settings page shows the server connected; the server's tool then
// answers as that account, through the CLI and through /mcp. The sign-in
// link an agent is given (the Connect page) leads the same way.
func TestConnectInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	as := startProvider(t, b.oauth)
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{"o": map[string]any{"url": as.base + "/mcp"}},
	}, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))})
	e.startServe()
	eventually(t, "o needs alice's sign-in", func() bool {
		return strings.Contains(e.must("", "status", "--user", "alice"), "needs sign-in")
	})
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))

	ctx := newBrowser(t)
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	// signIn plays alice at the provider's login page: her account, Allow.
	account := canaryLogin("alice")
	signIn := func(step string) {
		t.Helper()
		do(step+": the provider's login page", chromedp.WaitVisible(css(`input[name="login"]`)))
		if u := location(); !strings.HasPrefix(u, as.base+"/authorize?") {
			t.Fatalf("%s: the browser is at %q, want the provider's sign-in page", step, u)
		}
		do(step+": sign in at the provider",
			chromedp.SendKeys(css(`input[name="login"]`), account),
			chromedp.Click(css(`button[value="allow"]`)),
			chromedp.WaitVisible(css(`p.flash`)),
		)
		if u := location(); !strings.HasPrefix(u, e.url+"/oauth/callback?") {
			t.Errorf("%s: back at %q, want the host's callback", step, u)
		}
		if msg, err := chromedp.Run(ctx, chromedp.Text(css(`p.flash`))); err != nil || !strings.Contains(msg, "Connected to o.") {
			t.Errorf("%s: the callback page says %q (%v)", step, msg, err)
		}
	}
	connectButton := `#s-mcp-servers-form .field:has(input[name="o"]) [data-state="needs sign-in"] button[form]`

	do("sign in to the settings page",
		chromedp.Navigate(link),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(connectButton)),
	)
	do("click Connect beside o's switch", chromedp.Click(css(connectButton)))
	signIn("Connect")
	do("the settings page", chromedp.Navigate(e.url+"/settings"),
		chromedp.WaitVisible(css(`#s-mcp-servers-form .field:has(input[name="o"]) [data-state="connected"]`)))
	if out := e.must("", "call", "--user", "alice", "o/whoami", "{}"); !strings.Contains(out, account) {
		t.Errorf("o/whoami after Connect: %s", out)
	}
	mc, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e")))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := mc.call(t, "o__whoami", map[string]any{}); err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), account) {
		t.Errorf("alice's agent calls o__whoami: %v %+v", err, res)
	}

	// The link an agent is given, followed from its app's page (another
	// site, to which the settings page's SameSite=Strict cookie is not
	// sent), asks first, then leads the same way.
	agentPage := "data:text/html," + url.PathEscape(`<a id="signin" href="`+e.url+`/settings/connect/mcp/o">Sign in to o</a>`)
	do("the agent's sign-in link",
		chromedp.Navigate(agentPage),
		chromedp.Click(css(`#signin`)),
		chromedp.WaitVisible(css(`main form button[type="submit"]`)),
	)
	if u := location(); u != e.url+"/settings/connect/mcp/o" {
		t.Fatalf("the agent's sign-in link leads to %q", u)
	}
	do("Connect on the link's page", chromedp.Click(css(`main form button[type="submit"]`)))
	signIn("the sign-in link")
}

// needChromium skips the test, loudly, without Chromium; in CI it fails.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing in CI (apt-get install chromium): %v", chromiumPath, err)
		}
		t.Skipf("SKIPPING THE BROWSER TEST: %s is missing (apt-get install chromium)", chromiumPath)
	}
}

// newBrowser starts headless Chromium with a profile of its own and
// returns the context of its first tab, which gives up after 60s; the
// test's cleanup closes Chromium and fails the test if any of its
// processes outlived it.
// browserSteps returns do, which runs a step's actions in the browser of
// ctx, and text, which runs one that reads a string; either fails the test
// naming the step.
func browserSteps(ctx context.Context, t *testing.T) (do func(step string, actions ...chromedp.Action[chromedp.Void]), text func(step string, a chromedp.Action[string]) string) {
	do = func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	text = func(step string, a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return v
	}
	return do, text
}

func newBrowser(t *testing.T) context.Context {
	t.Helper()
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
	t.Cleanup(func() {
		cancelTimeout()
		cctx, cancelClose := context.WithTimeout(bctx, 10*time.Second)
		_ = chromedp.Cancel(cctx)
		cancelClose()
		cancelCtx()
		cancelAlloc()
		if n := leftoverChromium(dataDir, 5*time.Second); n > 0 {
			t.Errorf("%d Chromium processes outlived the test (killed now)", n)
		}
	})
	return ctx
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

// TestMCPServersSectionInABrowser loads the settings page in headless
// Chromium with the operator's servers in three states — notes connected,
// o (the example OAuth provider) waiting for alice's sign-in, gone (a
// command that exits) quarantined — and checks the "MCP servers" section:
// each state beside its own switch (the same .field), Connect beside o's,
// the quarantine's reason and its retry time in the browser's time zone;
// a token field for notes (a stdio server reads MCP_ACCESS_TOKEN) but none
// for o (a remote server without an Authorization header: it signs in or
// needs nothing) nor for the shared server; an example in the own-servers
// editor; no "Stored secrets (hello)" (hello keeps no secret); and no
// request of the page answered 404. It saves a screenshot of the page
// (E2E_SCREENSHOTS=dir keeps it).
func TestMCPServersSectionInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	as := startProvider(t, b.oauth)
	e := newEnv(t, b, map[string]any{
		"userServers": "url",
		"mcpServers": map[string]any{
			"notes": map[string]any{"command": b.notes},
			"o":     map[string]any{"url": as.base + "/mcp"},
			"gone":  map[string]any{"command": "/bin/sh", "args": []string{"-c", "echo 'no database here' >&2; exit 3"}},
			"team":  map[string]any{"command": b.notes, "credentials": "shared", "users": []string{"bob"}},
		},
	}, map[string]any{
		"listen":     fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"extensions": map[string]any{"hello": map[string]any{"path": b.hello}},
	})
	e.startServe()
	eventually(t, "notes connected, o waiting, gone quarantined", func() bool {
		st := e.must("", "status", "--user", "alice")
		return strings.Contains(st, "needs sign-in") && strings.Contains(st, "quarantined") && strings.Contains(st, "connected")
	})
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))

	ctx := newBrowser(t)
	var (
		mu       sync.Mutex
		notFound []string
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		if r, ok := ev.(*network.EventResponseReceived); ok && r.Response != nil && r.Response.Status == 404 {
			mu.Lock()
			notFound = append(notFound, r.Response.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	// A time zone with a half-hour offset, so that the retry time shown
	// cannot be UTC's by chance.
	const zone = "Asia/Kolkata"
	if _, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: zone}); err != nil {
		t.Fatal(err)
	}
	const form = `#s-mcp-servers-form`
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1100, 900),
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#continue`)),
		chromedp.Click(chromedp.CSS(`#continue`)),
		chromedp.WaitVisible(chromedp.CSS(form)),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}

	// What sits in the .field of each server's switch.
	type field struct {
		Found, Token, Connect bool
		State, Text           string
		Retry, RetryAt        string
	}
	fields, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]field](`(() => {
		const out = {};
		for (const name of ["notes", "o", "gone", "team"]) {
			const sw = document.querySelector('`+form+` input[type=checkbox][name="' + name + '"]');
			if (!sw) { out[name] = {Found: false}; continue; }
			const f = sw.closest('.field');
			const st = f.querySelector('[data-state]');
			const time = f.querySelector('time[datetime]');
			const connect = f.querySelector('button[form]');
			const cf = connect && document.getElementById(connect.getAttribute('form'));
			out[name] = {
				Found: true,
				Token: !!document.querySelector('`+form+` input[name="token:' + name + '"]'),
				Connect: !!cf && cf.getAttribute('action') === '/settings/connect/mcp/' + name && cf.method === 'post',
				State: st ? st.dataset.state : '',
				Text: st ? st.textContent.replace(/\s+/g, ' ').trim() : '',
				Retry: time ? time.textContent.trim() : '',
				RetryAt: time ? time.getAttribute('datetime') : '',
			};
		}
		return out;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		state, text    string
		token, connect bool
	}{
		"notes": {state: "connected", text: "connected", token: true},
		"o":     {state: "needs sign-in", text: "needs sign-in", connect: true},
		"gone":  {state: "quarantined", text: "no database here", token: true},
		"team":  {},
	} {
		got := fields[name]
		if !got.Found {
			t.Errorf("%s: no switch", name)
			continue
		}
		if got.State != want.state || !strings.Contains(got.Text, want.text) || got.Token != want.token || got.Connect != want.connect {
			t.Errorf("%s's switch: state %q %q, token field %v, Connect %v; want %q containing %q, %v, %v",
				name, got.State, got.Text, got.Token, got.Connect, want.state, want.text, want.token, want.connect)
		}
	}
	if g := fields["gone"]; g.RetryAt == "" {
		t.Errorf("gone's retry time is missing: %+v", g)
	} else if at, err := time.Parse(time.RFC3339, g.RetryAt); err != nil {
		t.Errorf("gone's retry time %q: %v", g.RetryAt, err)
	} else {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		// The minutes tell the zones apart (UTC+5:30), whatever the
		// browser's locale does with the hours.
		if local := at.In(loc).Format(":04"); !strings.Contains(g.Retry, local) || strings.Contains(g.Retry, "UTC") {
			t.Errorf("gone retries at %q, shown as %q: want the browser's local time (…%s, %s)", g.RetryAt, g.Retry, local, zone)
		}
	}

	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page, "Stored secrets (hello)") {
		t.Error(`the page shows "Stored secrets (hello)", a form for an extension that keeps no secret`)
	}
	example, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#s-mcp-user-servers-form textarea').placeholder`))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		MCPServers map[string]struct{ URL string } `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(example), &list); err != nil || len(list.MCPServers) == 0 {
		t.Errorf("the own-servers editor shows no JSON example: %q (%v)", example, err)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("E2E_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, "mcp-servers-section.png")
	if err := os.WriteFile(p, shot, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)

	// Loaded once more: the favicon is asked for once per browser.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(form))); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notFound) > 0 {
		t.Errorf("the settings page's requests answered 404: %v", notFound)
	}
}
