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

// TestCatalogFillSecrets: secret inputs other than the token stay {name}
// in the header and env values that hold them, so no secret value is in
// the filled entry; withSecrets puts them in, and only those; each is
// stored under its own secret name; a value may not name a secret input.
func TestCatalogFillSecrets(t *testing.T) {
	remote := CatalogEntry{
		Remote: &CatalogRemote{URL: "https://a.example/mcp", Headers: map[string]string{
			"Authorization": "Bearer {token}", "X-API-Key": "{key}", "X-Pair": "{team}:{pair}"}},
		Inputs: []CatalogInput{{Name: "team"}, {Name: "token", IsSecret: true}, {Name: "key", IsSecret: true, IsRequired: true}, {Name: "pair", IsSecret: true}},
	}
	got, err := remote.fill(map[string]string{"team": "red", "token": "CANARY-1", "key": "CANARY-2", "pair": "CANARY-3"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if want := `{"headers":{"X-API-Key":"{key}","X-Pair":"red:{pair}"},"type":"http","url":"https://a.example/mcp"}`; string(b) != want {
		t.Errorf("filled:\n got %s\nwant %s", b, want)
	}
	if strings.Contains(string(b), "CANARY") {
		t.Errorf("a secret is in the entry: %s", b)
	}
	h := got["headers"].(map[string]string)
	if v := withSecrets(h["X-Pair"], map[string]string{"pair": "p{key}", "key": "k"}); v != "red:p{key}" {
		t.Errorf("withSecrets: %q", v)
	}
	if got := remote.tokenInput(); got != "token" {
		t.Errorf("token input %q", got)
	}
	var slots []string
	for _, in := range remote.secretSlots() {
		slots = append(slots, in.Name+"="+remote.secretName("u_r", in))
	}
	if strings.Join(slots, " ") != "key=input:u_r:key pair=input:u_r:pair" {
		t.Errorf("secret slots: %q", slots)
	}
	if _, err := remote.fill(map[string]string{"team": "{key}"}); err == nil || !strings.Contains(err.Error(), `"team" may not hold {key}`) {
		t.Errorf("a value naming a secret input: %v", err)
	}

	pkg := CatalogEntry{
		Package: &CatalogPackage{Command: "gh", Args: []string{"stdio"}, Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "{pat}", "API_KEY": "{key}"}},
		Inputs:  []CatalogInput{{Name: "pat", IsSecret: true}, {Name: "key", IsSecret: true}},
	}
	got, err = pkg.fill(map[string]string{"pat": "CANARY-1", "key": "CANARY-2"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(got)
	if want := `{"args":["stdio"],"command":"gh","env":{"API_KEY":"{key}","GITHUB_PERSONAL_ACCESS_TOKEN":"{pat}"}}`; string(b) != want {
		t.Errorf("filled:\n got %s\nwant %s", b, want)
	}
	if pkg.tokenInput() != "" || len(pkg.secretSlots()) != 2 {
		t.Errorf("token %q, slots %v", pkg.tokenInput(), pkg.secretSlots())
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
