package e2e_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestSettingsMerge (issue 17, item 2): the README's quick start switches
// web on on the settings page, then scratch on from the CLI; with
// `settings set --merge` the second step keeps web on (a plain set
// replaced the section and switched web off). The JSON API's PATCH merges
// the same way; a patch that names a bad value is refused naming it and
// stores nothing.
func TestSettingsMerge(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes":   map[string]any{"command": b.notes},
		"scratch": map[string]any{"command": b.notes, "availability": "opt-in"},
		"web":     map[string]any{"command": b.notes, "availability": "opt-in"},
	}})
	e.startServe()
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "demo", "--name", "e2e"))

	// Step 2 of the quick start: web on (the page writes the whole form).
	if code, body := e.api("PUT", "/api/v1/settings/mcp/servers", tok, `{"notes":true,"scratch":false,"web":true}`); code != http.StatusOK {
		t.Fatalf("switching web on: HTTP %d %s", code, body)
	}
	// Step 4: scratch on from the CLI, as the README writes it.
	e.must("", "settings", "set", "--merge", "--user", "demo", "--ext", "mcp", "servers", `{"scratch":true}`)
	eventually(t, "notes, scratch and web all on", func() bool {
		names := e.toolNames("demo")
		return hasPrefix(names, "notes/") && hasPrefix(names, "scratch/") && hasPrefix(names, "web/")
	})
	got := e.must("", "settings", "get", "--user", "demo", "--ext", "mcp", "servers")
	for _, want := range []string{`"scratch": true`, `"web": true`} {
		if !strings.Contains(got, want) {
			t.Errorf("settings after the merge lack %s:\n%s", want, got)
		}
	}

	// The JSON API: PATCH changes only the keys given; null resets one.
	code, body := e.api("PATCH", "/api/v1/settings/mcp/servers", tok, `{"web":null}`)
	var v struct{ Values map[string]any }
	_ = json.Unmarshal([]byte(body), &v)
	if _, web := v.Values["web"]; code != http.StatusOK || web || v.Values["scratch"] != true {
		t.Errorf("PATCH {web:null}: HTTP %d %s; want web back to its default (absent), scratch kept", code, body)
	}
	eventually(t, "web leaves demo's tools", func() bool { return !hasPrefix(e.toolNames("demo"), "web/") })
	code, body = e.api("PATCH", "/api/v1/settings/mcp/servers", tok, `{"web":"yes"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "web") {
		t.Errorf("PATCH with a bad value: HTTP %d %s; want 400 naming web", code, body)
	}
	if _, stderr, code := e.run("", "settings", "set", "--merge", "--user", "demo", "--ext", "mcp", "servers", `[1]`); code != 1 || !strings.Contains(stderr, "JSON object") {
		t.Errorf("--merge with an array: exit %d %s", code, stderr)
	}
	if got := e.must("", "settings", "get", "--user", "demo", "--ext", "mcp", "servers"); !strings.Contains(got, `"scratch": true`) || strings.Contains(got, `"web"`) {
		t.Errorf("refused patches changed the values:\n%s", got)
	}
}
