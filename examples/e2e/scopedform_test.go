package e2e_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestScopedTokenFormInABrowser: in headless Chromium alice makes a token
// on her settings page that reaches one server's tools and expires in an
// hour; the page shows it once and lists it with what it reaches and when
// it expires; on /mcp (go-sdk client) it sees that server's tools and
// none of her other server's.
func TestScopedTokenFormInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes":   map[string]any{"command": b.notes},
		"scratch": map[string]any{"command": b.notes},
	}})
	e.startServe()
	eventually(t, "alice has both servers' tools", func() bool {
		n := e.toolNames("alice")
		return hasPrefix(n, "notes/") && hasPrefix(n, "scratch/")
	})
	link := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))

	ctx := newBrowser(t)
	do, text := browserSteps(ctx, t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	do("sign in with the link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(`#tokens-form`)),
	)
	do("make a token for notes, expiring in an hour",
		chromedp.SetValue(css(`#token-name`), "notes-agent"),
		chromedp.SetValue(css(`#token-servers`), "notes"),
		chromedp.SetValue(css(`#token-expires`), "1h"),
		chromedp.Click(css(`#tokens-form p.actions button`)),
		chromedp.WaitVisible(css(`#new-token`)),
	)
	tok := text("the new token", chromedp.Value(css(`#new-token`)))
	if !strings.HasPrefix(tok, "ah_") {
		t.Fatalf("the page shows %q as the new token", tok)
	}
	reaches := text("what the token reaches", chromedp.Text(css(`td.token-scope`)))
	expires := text("when it expires", chromedp.Text(css(`td.token-scope + td`)))
	if reaches != "MCP only: servers notes" || expires == "never" || !strings.Contains(expires, "UTC") {
		t.Errorf("the token's row says it reaches %q and expires %q", reaches, expires)
	}

	c, err := connect(t, e.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	tools, _, _, _ := listAll(t, c.cs)
	if !slices.Contains(tools, "notes__add_note") || slices.ContainsFunc(tools, func(n string) bool { return strings.HasPrefix(n, "scratch__") }) {
		t.Errorf("the token made on the page sees %v; want notes' tools and none of scratch's", tools)
	}
}
