package extmcp_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/settings"
)

// TestCatalogValidation: the operator's catalog is checked when the file
// loads; each problem names the entry and the field.
func TestCatalogValidation(t *testing.T) {
	good := `"notes": {"title": "Notes", "description": "Your notes.",
		"remote": {"url": "https://{tenant}.example.com/mcp", "headers": {"Authorization": "Bearer {key}"}},
		"inputs": [{"name": "tenant", "isRequired": true}, {"name": "key", "isSecret": true}]}`
	cfg, err := extmcp.ParseConfig(json.RawMessage(`{"userServers": "url", "catalog": {` + good + `}}`))
	if err != nil {
		t.Fatalf("a good catalog: %v", err)
	}
	if e := cfg.Catalog["notes"]; e.Title != "Notes" || len(e.Inputs) != 2 || e.Remote == nil {
		t.Errorf("parsed: %+v", e)
	}
	for name, tc := range map[string]struct{ config, want string }{
		"no policy":           {`{"catalog": {` + good + `}}`, "catalog: needs userServers url or all"},
		"package under url":   {`{"userServers": "url", "catalog": {"p": {"package": {"command": "x"}}}}`, "catalog.p.package: needs userServers all"},
		"both":                {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x"}, "remote": {"url": "https://a"}}}}`, "catalog.p: needs either remote or package"},
		"neither":             {`{"userServers": "all", "catalog": {"p": {"title": "P"}}}`, "catalog.p: needs either remote or package"},
		"unknown field":       {`{"userServers": "all", "catalog": {"p": {"package": {"comand": "x"}}}}`, `catalog.p: unknown field "comand"`},
		"bad name":            {`{"userServers": "all", "catalog": {"a b": {"package": {"command": "x"}}}}`, "catalog.a b: the name must match"},
		"no url":              {`{"userServers": "url", "catalog": {"r": {"remote": {"url": ""}}}}`, "catalog.r.remote.url: is required"},
		"bad type":            {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a", "type": "ws"}}}}`, "catalog.r.remote.type"},
		"unknown placeholder": {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://{host}/mcp"}}}}`, "catalog.r.remote.url: {host} names no input"},
		"unused input":        {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp"}, "inputs": [{"name": "zone"}]}}}`, "catalog.r.inputs.zone: is used nowhere"},
		"bad input name":      {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp"}, "inputs": [{"name": "a-b"}]}}}`, "catalog.r.inputs[0].name"},
		"twice":               {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://{a}/mcp"}, "inputs": [{"name": "a"}, {"name": "a"}]}}}`, `catalog.r.inputs[1].name: "a" is named twice`},
		"bad format":          {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://{a}/mcp"}, "inputs": [{"name": "a", "format": "date"}]}}}`, "catalog.r.inputs.a.format"},
		"bad default":         {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"X-N": "{n}"}}, "inputs": [{"name": "n", "format": "number", "default": "ten"}]}}}`, "catalog.r.inputs.n.default: is not a number"},
		"secret default":      {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"Authorization": "Bearer {k}"}}, "inputs": [{"name": "k", "isSecret": true, "default": "s3cret"}]}}}`, "catalog.r.inputs.k.default: a secret input has no default"},
		"secret in url":       {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp?key={k}"}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.r.remote.url: uses the secret input "k"`},
		"secret other header": {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"X-Key": "{k}"}}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.r.remote.headers.X-Key: uses the secret input "k"`},
		"secret in args":      {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "args": ["{k}"]}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.p.package.args[0]: uses the secret input "k"`},
		"secret other env":    {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "env": {"API_KEY": "{k}"}}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.p.package.env.API_KEY: uses the secret input "k"`},
		"two secrets":         {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"Authorization": "Bearer {k}"}}, "inputs": [{"name": "k", "isSecret": true}, {"name": "j", "isSecret": true}]}}}`, "catalog.r.inputs: has 2 secret inputs"},
		"not a user server":   {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "ftp://{h}/mcp"}, "inputs": [{"name": "h"}]}}}`, "catalog.r: does not make a valid server"},
		"forbidden env":       {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "env": {"LD_PRELOAD": "{l}"}}, "inputs": [{"name": "l"}]}}}`, "catalog.p: does not make a valid server"},
		"not an object":       {`{"userServers": "url", "catalog": []}`, "catalog"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := extmcp.ParseConfig(json.RawMessage(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCatalogServer: a user who switches on a catalog entry with its
// inputs gets it among their own servers (u_<name>), its placeholders
// filled, the secret input sent as their token (the secret token:u_<name>)
// and not in their settings; another user does not; a pasted server of
// the same name wins and the switch is then refused.
func TestCatalogServer(t *testing.T) {
	needBins(t)
	rec := newRecorder(t, false)
	cfg := fmt.Sprintf(`{"userServers": "url", "userServerAllowCIDRs": ["127.0.0.1/32"], "catalog": {"rec": {
		"title": "Recorder", "remote": {"url": %q, "headers": {"X-Tenant": "{tenant}", "Authorization": "Bearer {key}"}},
		"inputs": [{"name": "tenant", "isRequired": true}, {"name": "key", "isSecret": true, "isRequired": true}]}}}`, rec.URL+"/{tenant}")
	f := newFixture(t, "inprocess", cfg, nil)

	// The section: a switch, the inputs, the secret field token:u_rec.
	var sec *ext.SettingsSection
	desc, err := f.x.Describe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range desc.Settings {
		if desc.Settings[i].ID == extmcp.SectionCatalogPrefix+"rec" {
			sec = &desc.Settings[i]
		}
	}
	if sec == nil {
		t.Fatalf("no section for the catalog entry: %+v", desc.Settings)
	}
	form, err := settings.ParseForm(sec.Form)
	if err != nil {
		t.Fatal(err)
	}
	if got := settings.SecretNames(form); len(got) != 1 || got[0] != extmcp.TokenSecret("u_rec") {
		t.Errorf("secret fields: %q", got)
	}
	values := `{"added": true, "inputs": {"tenant": "acme"}}`
	v := f.x
	if err := v.ValidateSettings(ctx(t), &ext.ValidateSettingsRequest{User: "alice", Section: sec.ID, Values: json.RawMessage(`{"added": true, "inputs": {}}`)}); err == nil ||
		!strings.Contains(err.Error(), `"tenant" is required`) {
		t.Errorf("a missing input: %v", err)
	}
	if err := v.ValidateSettings(ctx(t), &ext.ValidateSettingsRequest{User: "alice", Section: sec.ID, Values: json.RawMessage(values)}); err != nil {
		t.Fatal(err)
	}
	if err := f.h.UserStore("alice").Settings().Set(ctx(t), sec.ID, json.RawMessage(values)); err != nil {
		t.Fatal(err)
	}
	f.setSecret("alice", extmcp.TokenSecret("u_rec"), "CANARY-catalog-key")
	f.activate("alice")
	f.activate("bob")
	if !hasPrefix(f.names("alice"), "u_rec/") || hasPrefix(f.names("bob"), "u_rec/") {
		t.Fatalf("alice %q, bob %q", f.names("alice"), f.names("bob"))
	}
	if got := f.mustCall("alice", "u_rec/whoami", `{}`).Text(); got != "Bearer CANARY-catalog-key" {
		t.Errorf("the server got Authorization %q", got)
	}
	rec.mu.Lock()
	var tenant string
	for _, h := range rec.headers {
		tenant = h.Get("X-Tenant")
	}
	rec.mu.Unlock()
	if tenant != "acme" {
		t.Errorf("X-Tenant %q", tenant)
	}
	raw, _ := f.h.UserStore("alice").Settings().Get(ctx(t), sec.ID)
	if strings.Contains(string(raw), "CANARY") {
		t.Errorf("the secret is in the settings: %s", raw)
	}

	// A pasted server of the same name: the switch is refused.
	f.setOwn("alice", `{"mcpServers": {"rec": {"url": "https://elsewhere.example/mcp"}}}`)
	if err := v.ValidateSettings(ctx(t), &ext.ValidateSettingsRequest{User: "alice", Section: sec.ID, Values: json.RawMessage(values)}); err == nil ||
		!strings.Contains(err.Error(), "already has a server named") {
		t.Errorf("a pasted server of the same name: %v", err)
	}
}
