package e2e_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestOperatorUsersPageInABrowser (issue 19): the operator signs in with
// an operator token in headless Chromium, goes from the status page to
// the users page, which lists alice and bob with their tokens, and
// disables bob with the button: bob's token stops working at once, the
// page says he is disabled, and alice is untouched.
func TestOperatorUsersPageInABrowser(t *testing.T) {
	needChromium(t)
	e := newEnv(t, build(t), nil)
	e.startServe()
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	alice := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "alice-laptop"))
	bob := strings.TrimSpace(e.must("", "token", "create", "--user", "bob", "--name", "bob-phone"))
	if code, _ := e.api("GET", "/api/v1/me", bob, ""); code != 200 {
		t.Fatalf("bob's token before: HTTP %d", code)
	}

	ctx := newBrowser(t)
	do, text := browserSteps(ctx, t)
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	do("sign in with the operator token",
		chromedp.Navigate(e.url+"/settings/login"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), op),
		chromedp.Click(css(`form.card button[type="submit"]`)),
		chromedp.WaitVisible(css(`#users-link`)),
		chromedp.Click(css(`#users-link`)),
		chromedp.WaitVisible(css(`#users`)),
	)
	table := text("the users table", chromedp.Text(css(`#users`)))
	for _, want := range []string{"alice", "bob", "alice-laptop", "bob-phone", "operator"} {
		if !strings.Contains(table, want) {
			t.Errorf("the users page lacks %q:\n%s", want, table)
		}
	}
	do("disable bob",
		chromedp.Click(css(`#user-bob button[name="disable"]`)),
		chromedp.WaitVisible(css(`#done`)),
	)
	if s := text("bob's state", chromedp.Text(css(`#user-bob .state`))); !strings.Contains(s, "disabled") || !strings.Contains(s, "operator") {
		t.Errorf("bob's state after the button: %q, want disabled by the operator", s)
	}
	if s := text("alice's state", chromedp.Text(css(`#user-alice .state`))); s != "enabled" {
		t.Errorf("alice's state: %q, want enabled", s)
	}
	if code, _ := e.api("GET", "/api/v1/me", bob, ""); code != 401 {
		t.Errorf("bob's token after the page disabled him: HTTP %d, want 401", code)
	}
	if code, _ := e.api("GET", "/api/v1/me", alice, ""); code != 200 {
		t.Errorf("alice's token after bob's disable: HTTP %d, want 200", code)
	}
	if u := e.users()["bob"]; u.Disabled.IsZero() {
		t.Error("user list does not show bob disabled")
	}
	// The operator API, with the operator token: list and enable.
	if code, body := e.api("GET", "/api/operator/v1/users", op, ""); code != 200 || !strings.Contains(body, `"bob"`) {
		t.Errorf("operator API users: HTTP %d %s", code, body)
	}
	if code, _ := e.api("GET", "/api/operator/v1/users", alice, ""); code != 403 {
		t.Errorf("operator API with a user's token: HTTP %d, want 403", code)
	}
	if code, body := e.api("POST", "/api/operator/v1/users/bob/enable", op, ""); code != 200 {
		t.Errorf("operator API enable: HTTP %d %s", code, body)
	}
	if u := e.users()["bob"]; !u.Disabled.IsZero() {
		t.Error("bob still disabled after the API's enable")
	}
}
