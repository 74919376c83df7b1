package extmcp_test

import (
	"encoding/json"
	"fmt"
	"os"
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
	// Secrets of any number, in header and env values, whole or in part.
	for name, config := range map[string]string{
		"two in headers": `{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"Authorization": "Bearer {k}", "X-API-Key": "{j}", "X-Pair": "{j}:{i}"}},
			"inputs": [{"name": "k", "isSecret": true}, {"name": "j", "isSecret": true, "isRequired": true}, {"name": "i", "isSecret": true}]}}}`,
		"two in env": `{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "args": ["--region={r}"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "{pat}", "API_KEY": "key-{key}"}},
			"inputs": [{"name": "r"}, {"name": "pat", "isSecret": true, "isRequired": true}, {"name": "key", "isSecret": true}]}}}`,
	} {
		if _, err := extmcp.ParseConfig(json.RawMessage(config)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
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
		"secret in command":   {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x{k}"}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.p.package.command: uses the secret input "k": a secret may go only in an env value: a process's arguments are readable`},
		"secret in args why":  {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "args": ["--api-key={k}"]}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.p.package.args[0]: uses the secret input "k": a secret may go only in an env value: a process's arguments are readable by every user of this machine`},
		"secret other auth":   {`{"userServers": "url", "catalog": {"r": {"remote": {"url": "https://a/mcp", "headers": {"Authorization": "Token {k}"}}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.r.remote.headers.Authorization: uses the secret input "k": the Authorization header may hold a secret only as "Bearer {name}"`},
		"secret in token+":    {`{"userServers": "all", "catalog": {"p": {"package": {"command": "x", "env": {"MCP_ACCESS_TOKEN": "t{k}"}}, "inputs": [{"name": "k", "isSecret": true}]}}}`, `catalog.p.package.env.MCP_ACCESS_TOKEN: uses the secret input "k": MCP_ACCESS_TOKEN may hold a secret only as "{name}" alone`},
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

// TestCatalogSecretInputs: a catalog entry's secret inputs, any number,
// each the user's own secret (the token token:u_<name>, the others
// input:u_<name>:<input>), reach a remote server in its headers and a
// stdio server in its environment, and are in neither the settings nor
// the logs; a required one not set keeps the server waiting with a reason
// naming it; a process that prints one on stderr has it redacted from the
// status, whatever its length.
func TestCatalogSecretInputs(t *testing.T) {
	needBins(t)
	rec := newRecorder(t, false)
	exe, _ := os.Executable()
	cfg := fmt.Sprintf(`{"userServers": "all", "userServerAllowCIDRs": ["127.0.0.1/32"], "catalog": {
		"rec": {"remote": {"url": %q, "headers": {"Authorization": "Bearer {token}", "X-API-Key": "{key}", "X-Pair": "{team}:{pair}"}},
			"inputs": [{"name": "team"}, {"name": "token", "isSecret": true}, {"name": "key", "isSecret": true, "isRequired": true}, {"name": "pair", "isSecret": true}]},
		"keys": {"package": {"command": %q, "env": {%q: "dynamic", "API_KEY": "{key}", "PAT": "pat-{pat}"}},
			"inputs": [{"name": "key", "isSecret": true, "isRequired": true}, {"name": "pat", "isSecret": true}]},
		"leaky": {"package": {"command": %q, "env": {%q: "leakkey", "API_KEY": "{key}"}},
			"inputs": [{"name": "key", "isSecret": true}]},
		"both": {"package": {"command": %q, "env": {%q: "dynamic", "MCP_ACCESS_TOKEN": "{tok}", "API_KEY": "{tok}"}},
			"inputs": [{"name": "tok", "isSecret": true, "isRequired": true}]}}}`, rec.URL, exe, modeEnv, exe, modeEnv, exe, modeEnv)
	f := newFixture(t, "inprocess", cfg, nil)

	desc, err := f.x.Describe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range desc.Settings {
		if desc.Settings[i].ID != extmcp.SectionCatalogPrefix+"rec" {
			continue
		}
		form, err := settings.ParseForm(desc.Settings[i].Form)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{extmcp.TokenSecret("u_rec"), extmcp.InputSecret("u_rec", "key"), extmcp.InputSecret("u_rec", "pair")}
		if got := settings.SecretNames(form); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("secret fields %q, want %q", got, want)
		}
	}
	for _, name := range []string{"rec", "keys", "leaky", "both"} {
		values := `{"added": true, "inputs": {"team": "red"}}`
		if err := f.h.UserStore("alice").Settings().Set(ctx(t), extmcp.SectionCatalogPrefix+name, json.RawMessage(values)); err != nil {
			t.Fatal(err)
		}
	}
	f.setSecret("alice", extmcp.TokenSecret("u_rec"), "CANARY-token")
	f.activate("alice")
	// The required key is not set: the server waits, naming it.
	for _, name := range []string{"u_rec", "u_keys"} {
		st := f.statusOf("alice", name)
		if st.State != "error" || !strings.Contains(st.Reason, `needs your secret input "key"`) ||
			!strings.Contains(st.Reason, extmcp.InputSecret(name, "key")) {
			t.Errorf("%s without its key: %+v", name, st)
		}
	}
	// A required token not set is named too, as the token secret.
	if st := f.statusOf("alice", "u_both"); !strings.Contains(st.Reason, `needs your secret input "tok"`) ||
		!strings.Contains(st.Reason, extmcp.TokenSecret("u_both")) {
		t.Errorf("u_both without its token: %+v", st)
	}

	f.setSecret("alice", extmcp.InputSecret("u_rec", "key"), "CANARY-key")
	f.setSecret("alice", extmcp.InputSecret("u_rec", "pair"), "CANARY-pair")
	f.setSecret("alice", extmcp.InputSecret("u_keys", "key"), "CANARY-stdio-key")
	f.setSecret("alice", extmcp.InputSecret("u_keys", "pat"), "CANARY-pat")
	const short = "Zq7#x9" // shorter than an env value redacted for its length
	f.setSecret("alice", extmcp.InputSecret("u_leaky", "key"), short)
	f.activate("alice")
	if got := f.mustCall("alice", "u_rec/whoami", `{}`).Text(); got != "Bearer CANARY-token" {
		t.Errorf("the server got Authorization %q", got)
	}
	rec.mu.Lock()
	last := rec.headers[len(rec.headers)-1]
	rec.mu.Unlock()
	if last.Get("X-API-Key") != "CANARY-key" || last.Get("X-Pair") != "red:CANARY-pair" {
		t.Errorf("the server got X-API-Key %q, X-Pair %q", last.Get("X-API-Key"), last.Get("X-Pair"))
	}
	if got := f.mustCall("alice", "u_keys/keys", `{}`).Text(); got != "CANARY-stdio-key|pat-CANARY-pat" {
		t.Errorf("the process's API_KEY|PAT: %q", got)
	}
	// The token stands in another value too.
	f.setSecret("alice", extmcp.TokenSecret("u_both"), "CANARY-both")
	f.activate("alice")
	if got := f.mustCall("alice", "u_both/keys", `{}`).Text(); got != "CANARY-both|" {
		t.Errorf("the token as API_KEY: %q", got)
	}
	if got := f.mustCall("alice", "u_both/env", `{}`).Text(); got != "CANARY-both" {
		t.Errorf("the token as MCP_ACCESS_TOKEN: %q", got)
	}
	st := f.statusOf("alice", "u_leaky")
	if !strings.Contains(st.Reason, "bad key [redacted] for this account") || strings.Contains(st.Reason, short) {
		t.Errorf("the leaky server's status: %+v", st)
	}
	for _, name := range []string{"rec", "keys", "leaky"} {
		raw, _ := f.h.UserStore("alice").Settings().Get(ctx(t), extmcp.SectionCatalogPrefix+name)
		if strings.Contains(string(raw), "CANARY") {
			t.Errorf("a secret in the settings: %s", raw)
		}
	}
	if strings.Contains(f.logs.String(), "CANARY") || strings.Contains(f.logs.String(), short) {
		t.Error("a secret in the logs")
	}
	// A pasted list cannot claim a catalog entry's secrets: its "{key}"
	// stays as written.
	f.setOwn("bob", fmt.Sprintf(`{"mcpServers": {"rec": {"url": %q, "headers": {"X-API-Key": "{key}"}}}}`, rec.URL))
	f.setSecret("bob", extmcp.InputSecret("u_rec", "key"), "CANARY-bob")
	f.activate("bob")
	f.mustCall("bob", "u_rec/whoami", `{}`)
	rec.mu.Lock()
	last = rec.headers[len(rec.headers)-1]
	rec.mu.Unlock()
	if last.Get("X-API-Key") != "{key}" {
		t.Errorf("bob's pasted server got X-API-Key %q", last.Get("X-API-Key"))
	}
}
