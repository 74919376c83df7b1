package extmcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/settings"
)

// TestCatalogFill: the user's values fill the entry's placeholders (an
// empty one takes its default); a missing required input or a value of
// the wrong format is refused naming the input; the secret input's header
// or variable is left out, so no secret is in the filled entry; "${" in a
// value stays a literal.
func TestCatalogFill(t *testing.T) {
	remote := CatalogEntry{
		Remote: &CatalogRemote{URL: "https://{tenant}.example.com/mcp", Headers: map[string]string{
			"Authorization": "Bearer {key}", "X-Region": "{region}", "X-User": "${user}"}},
		Inputs: []CatalogInput{
			{Name: "tenant", IsRequired: true},
			{Name: "region", Default: "eu"},
			{Name: "key", IsSecret: true, IsRequired: true},
		},
	}
	got, err := remote.fill(map[string]string{"tenant": "acme", "key": "CANARY-must-not-appear"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if want := `{"headers":{"X-Region":"eu","X-User":"${user}"},"type":"http","url":"https://acme.example.com/mcp"}`; string(b) != want {
		t.Errorf("filled:\n got %s\nwant %s", b, want)
	}
	if strings.Contains(string(b), "CANARY") || strings.Contains(string(b), "Authorization") {
		t.Errorf("the secret or its header is in the entry: %s", b)
	}
	if _, err := remote.fill(map[string]string{"region": "us"}); err == nil || !strings.Contains(err.Error(), `"tenant" is required`) {
		t.Errorf("missing required: %v", err)
	}
	got, _ = remote.fill(map[string]string{"tenant": "a", "region": "${userDir}"})
	if h := got["headers"].(map[string]string); h["X-Region"] != "$${userDir}" {
		t.Errorf("a value's ${ is not a literal: %q", h["X-Region"])
	}
	if _, err := remote.fill(map[string]string{"tenant": "a\nb"}); err == nil {
		t.Error("a line break was taken")
	}

	pkg := CatalogEntry{
		Package: &CatalogPackage{Command: "notes", Args: []string{"--dir", "{dir}", "--limit={limit}"},
			Env: map[string]string{"MCP_ACCESS_TOKEN": "{token}", "MODE": "{mode}"}},
		Inputs: []CatalogInput{
			{Name: "dir", Format: "filepath", Default: "notes"},
			{Name: "limit", Format: "number", Default: "10"},
			{Name: "mode", Format: "boolean"},
			{Name: "token", IsSecret: true},
		},
	}
	got, err = pkg.fill(map[string]string{"limit": "25", "mode": "true", "token": "CANARY"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(got)
	if want := `{"args":["--dir","notes","--limit=25"],"command":"notes","env":{"MODE":"true"}}`; string(b) != want {
		t.Errorf("filled:\n got %s\nwant %s", b, want)
	}
	if _, err := pkg.fill(map[string]string{"limit": "many"}); err == nil || !strings.Contains(err.Error(), `"limit" must be a number`) {
		t.Errorf("bad number: %v", err)
	}
}

// TestCatalogSectionForm: an entry's section is a switch, its inputs and
// the secret field token:u_<name>; it can be saved switched off with
// nothing filled in, and a value of the wrong format is refused by the
// form itself.
func TestCatalogSectionForm(t *testing.T) {
	cfg, err := ParseConfig(json.RawMessage(`{"userServers": "all", "catalog": {"n": {"package": {"command": "notes",
		"args": ["--limit", "{limit}"], "env": {"MCP_ACCESS_TOKEN": "{key}"}},
		"inputs": [{"name": "limit", "format": "number", "isRequired": true}, {"name": "key", "isSecret": true}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	secs := catalogSections(cfg)
	if len(secs) != 1 || secs[0].ID != "catalog-n" {
		t.Fatalf("sections: %+v", secs)
	}
	raw, err := secs[0].MarshalForm()
	if err != nil {
		t.Fatal(err)
	}
	f, err := settings.ParseForm(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := settings.SecretNames(f); len(got) != 1 || got[0] != "token:u_n" {
		t.Errorf("secret fields: %q", got)
	}
	if _, err := settings.ValidateValues(f, json.RawMessage(`{"added": false, "inputs": {"limit": ""}}`)); err != nil {
		t.Errorf("off and empty: %v", err)
	}
	if _, err := settings.ValidateValues(f, json.RawMessage(`{"added": true, "inputs": {"limit": "12"}}`)); err != nil {
		t.Errorf("a number: %v", err)
	}
	if _, err := settings.ValidateValues(f, json.RawMessage(`{"added": true, "inputs": {"limit": "ten"}}`)); err == nil {
		t.Error("ten was taken for a number")
	}
}
