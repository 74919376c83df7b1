package e2e_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestApprovalInABrowser (issue 21): alice's agent speaks the stateless
// revision, which has no requests to the client, so although it declared
// elicitation its call of the destructive clear_notes is refused with a
// link; in headless Chromium that link opens her settings page at
// "Waiting for your approval", which names the tool and its arguments;
// she approves the call once, and the agent's retry runs (her notes are
// gone), while a third call waits again.
func TestApprovalInABrowser(t *testing.T) {
	needChromium(t)
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}}, policyConfig)
	e.startServe()
	eventually(t, "alice has the notes server's tools", func() bool { return hasPrefix(e.toolNames("alice"), "notes/") })
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "agent"))
	asked := 0
	agent, err := connectWith(t, e.url, tok, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := agent.call(t, "notes__add_note", map[string]any{"text": "old"}); err != nil || res.IsError {
		t.Fatalf("add_note: %v %v", res, err)
	}
	args := map[string]any{"reason": "spring cleaning"}
	res, err := agent.call(t, "notes__clear_notes", args)
	if err != nil || !res.IsError {
		t.Fatalf("clear_notes before approval: %v %v", res, err)
	}
	m := approvalLink.FindStringSubmatch(text(res))
	if m == nil {
		t.Fatalf("the refusal carries no link: %q", text(res))
	}
	link, id := m[0], m[1]

	ctx := newBrowser(t)
	do, read := browserSteps(ctx, t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	signIn := strings.TrimSpace(e.must("", "login-link", "--user", "alice"))
	do("sign in with the link",
		chromedp.Navigate(signIn),
		chromedp.WaitVisible(css(`#continue`)),
		chromedp.Click(css(`#continue`)),
		chromedp.WaitVisible(css(`#tokens`)),
	)
	row := `#approval-` + id
	do("open the refusal's link", chromedp.Navigate(link), chromedp.WaitVisible(css(row)))
	title := read("the section's title", chromedp.Text(css(`#approvals-title`)))
	shown := read("the waiting call", chromedp.Text(css(row)))
	if title != "Waiting for your approval" || !strings.Contains(shown, "notes/clear_notes") || !strings.Contains(shown, `"reason":"spring cleaning"`) {
		t.Errorf("the section %q shows %q", title, shown)
	}
	do("approve the call once",
		chromedp.Click(css(row+` button.approve-once`)),
		chromedp.WaitVisible(css(`p.flash`)),
	)
	if f := read("the flash", chromedp.Text(css(`p.flash`))); !strings.HasPrefix(f, "Approved") {
		t.Errorf("after approving, the page says %q", f)
	}

	if res, err := agent.call(t, "notes__clear_notes", args); err != nil || res.IsError {
		t.Fatalf("the retry after approval: %v %v", text(res), err)
	}
	res, err = agent.call(t, "notes__list_notes", map[string]any{})
	if err != nil || res.IsError || strings.Contains(text(res), "old") {
		t.Errorf("alice's notes after the approved clear_notes: %v %v", text(res), err)
	}
	if res, err := agent.call(t, "notes__clear_notes", args); err != nil || !res.IsError || !approvalLink.MatchString(text(res)) {
		t.Errorf("a third call, approved once only: %v %v", text(res), err)
	}
	if asked != 0 {
		t.Errorf("the stateless client was asked %d times", asked)
	}
}
