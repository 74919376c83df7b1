package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// api calls the JSON API with a user's bearer token.
func (e *env) api(method, path, token, body string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSharedServerNotLentStaysOff (issue 10, item 7): the "MCP servers"
// section is one form for every user, so a shared server's switch reads
// off for everyone until switched on; a user it is not lent to who
// switches it on through the JSON API is refused (400 naming it), whether
// active or not, and reads it back off (nothing was stored); a user it is lent to
// switches it on and gets its tools.
func TestSharedServerNotLentStaysOff(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"team": map[string]any{"command": b.notes, "credentials": "shared", "users": []string{"alice"},
			"sharedAuthority": "the team's account"},
	}})
	e.startServe()
	e.must("operator-team-token", "secret", "set", "--operator", "--ext", "mcp", "token:team")
	tok := func(u string) string {
		return strings.TrimSpace(e.must("", "token", "create", "--user", u, "--name", "e2e"))
	}
	alice, bob, carol := tok("alice"), tok("bob"), tok("carol")

	// The form: the switch defaults to off, and says it is lent to some.
	code, body := e.api("GET", "/api/v1/sections", bob, "")
	var sections []struct {
		Extension, ID string
		Form          struct {
			Root struct {
				Children []struct {
					Name    string
					Default json.RawMessage
					Help    string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &sections); code != 200 || err != nil {
		t.Fatalf("sections: HTTP %d %v\n%s", code, err, body)
	}
	found := false
	for _, s := range sections {
		for _, n := range s.Form.Root.Children {
			if s.ID == "servers" && n.Name == "team" {
				found = true
				if string(n.Default) != "false" || !strings.Contains(n.Help, "some users only") {
					t.Errorf("team's switch: default %s, help %q; want off, saying it is lent to some users only", n.Default, n.Help)
				}
			}
		}
	}
	if !found {
		t.Fatalf("no switch for team in %s", body)
	}
	off := func(user, token string) {
		t.Helper()
		code, body := e.api("GET", "/api/v1/settings/mcp/servers", token, "")
		var v struct{ Values map[string]any }
		if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
			t.Fatalf("%s's settings: HTTP %d %v", user, code, err)
		}
		if on, _ := v.Values["team"].(bool); on {
			t.Errorf("team reads on for %s: %s", user, body)
		}
	}
	off("bob", bob)

	// Bob, who uses his tools (he is active), switches it on: refused.
	if code, _ := e.api("GET", "/api/v1/tools", bob, ""); code != 200 {
		t.Fatalf("bob's tools: HTTP %d", code)
	}
	code, body = e.api("PUT", "/api/v1/settings/mcp/servers", bob, `{"team": true}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `\"team\"`) && !strings.Contains(body, `"team"`) {
		t.Errorf("bob switching team on: HTTP %d %s; want 400 naming team", code, body)
	}
	t.Logf("bob switching team on: HTTP %d %s", code, strings.TrimSpace(body))
	off("bob", bob)
	bobRefusal := body

	// Carol, who never used her tools (she is not active), is refused the
	// same way (issue 17, item 2b), by a PUT and by a PATCH, and nothing
	// is stored: not "saved", then dropped with an ERROR at her first use.
	code, body = e.api("PUT", "/api/v1/settings/mcp/servers", carol, `{"team": true}`)
	if code != http.StatusBadRequest || body != bobRefusal {
		t.Errorf("carol (inactive) switching team on: HTTP %d %s; want bob's 400: %s", code, body, bobRefusal)
	}
	off("carol", carol)
	code, body = e.api("PATCH", "/api/v1/settings/mcp/servers", carol, `{"team": true}`)
	if code != http.StatusBadRequest || body != bobRefusal {
		t.Errorf("carol (inactive) patching team on: HTTP %d %s; want bob's 400: %s", code, body, bobRefusal)
	}
	off("carol", carol)
	if code, _ := e.api("GET", "/api/v1/tools", carol, ""); code != 200 {
		t.Fatalf("carol's tools: HTTP %d", code)
	}
	if log := e.serveOut.String(); strings.Contains(log, "level=ERROR") {
		t.Errorf("the host logged an ERROR:\n%s", log)
	}
	// The refusal is the write's answer: nothing was stored, so bob's
	// status has nothing of team (and never the operator's token).
	_, status := e.api("GET", "/api/v1/status", bob, "")
	if strings.Contains(status, `"team"`) || strings.Contains(status, "operator-team-token") {
		t.Errorf("bob's status shows team (or the token): %s", status)
	}
	_, tools := e.api("GET", "/api/v1/tools", bob, "")
	if strings.Contains(tools, "team/") {
		t.Errorf("bob has team's tools: %s", tools)
	}

	// Alice, to whom it is lent, switches it on and gets its tools.
	off("alice", alice)
	if code, body := e.api("PUT", "/api/v1/settings/mcp/servers", alice, `{"team": true}`); code/100 != 2 {
		t.Fatalf("alice switching team on: HTTP %d %s", code, body)
	}
	eventually(t, "alice gets team's tools", func() bool {
		_, tools := e.api("GET", "/api/v1/tools", alice, "")
		return strings.Contains(tools, `"team/add_note"`)
	})
}
