package extmcp_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/settings"
)

// setOwn stores the user's own server list as the longtext field holds it.
func (f *fixture) setOwn(user, list string) {
	f.t.Helper()
	v, _ := json.Marshal(map[string]string{extmcp.UserServersField: list})
	if err := f.h.UserStore(user).Settings().Set(ctx(f.t), extmcp.SectionUserServers, v); err != nil {
		f.t.Fatal(err)
	}
}

// TestUserServers checks the users' own servers under each policy,
// including a list that does not parse.
func TestUserServers(t *testing.T) {
	needBins(t)
	t.Parallel()
	rec := newRecorder(t, false)
	own := fmt.Sprintf(`{"mcpServers": {
		"mine": {"url": %q, "headers": {"Authorization": "Bearer CANARY-OWN-CONFIG"}},
		"tool": {"command": %q, "args": ["-reveal-token"]}}}`, rec.URL, bins.notes)
	for name, tc := range map[string]struct {
		policy    string
		own       string
		want      []string // server prefixes alice must have
		wantNot   []string
		problem   string // a status entry's name that must show an error
		reasonHas string
	}{
		"none ignores them": {policy: "none", own: own, want: []string{"ops/"}, wantNot: []string{"u_mine/", "u_tool/"}},
		"url allows remote only": {policy: "url", own: own, want: []string{"ops/", "u_mine/"}, wantNot: []string{"u_tool/"},
			problem: "u_tool", reasonHas: "only remote"},
		"all allows stdio too": {policy: "all", own: own, want: []string{"ops/", "u_mine/", "u_tool/"}},
		"invalid JSON quarantines the list, not the operator's": {policy: "all", own: `{"mcpServers": {"x": {"url": 5}}`,
			want: []string{"ops/"}, wantNot: []string{"u_"}, problem: catalog.UserServersProblem, reasonHas: "not valid JSON"},
		"an invalid entry names the field": {policy: "all", own: `{"mcpServers": {"x": {"url": "http://a", "credentials": "shared", "users": ["bob"]}}}`,
			want: []string{"ops/"}, wantNot: []string{"u_"}, problem: catalog.UserServersProblem, reasonHas: "mcpServers.x.credentials"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The recorder listens on loopback, which users' own servers
			// may reach only where the operator allows it.
			cfg := fmt.Sprintf(`{"userServers": %q, "userServerAllowCIDRs": ["127.0.0.1/32"], "mcpServers": {"ops": %s}}`, tc.policy, notesServer(""))
			f := newFixture(t, "inprocess", cfg, nil)
			f.setOwn("alice", tc.own)
			f.setSecret("alice", extmcp.TokenSecret("u_mine"), "CANARY-alice-own")
			f.setSecret("alice", extmcp.TokenSecret("u_tool"), "CANARY-alice-tool")
			f.activate("alice")
			f.activate("bob")
			names := f.names("alice")
			for _, p := range tc.want {
				if !hasPrefix(names, p) {
					t.Errorf("alice's tools %q lack %s*", names, p)
				}
			}
			for _, p := range tc.wantNot {
				if hasPrefix(names, p) {
					t.Errorf("alice's tools %q have %s*", names, p)
				}
			}
			if hasPrefix(f.names("bob"), "u_") {
				t.Errorf("bob got alice's own servers: %q", f.names("bob"))
			}
			if tc.problem != "" {
				st := f.statusOf("alice", tc.problem)
				if st.State != "error" || !strings.Contains(st.Reason, tc.reasonHas) {
					t.Errorf("status of %s: %+v; want an error with %q", tc.problem, st, tc.reasonHas)
				}
			}
			if hasPrefix(names, "u_mine/") {
				if got := f.mustCall("alice", "u_mine/whoami", `{}`).Text(); got != "Bearer CANARY-alice-own" {
					t.Errorf("the user's remote server got %q; want the user's token:u_mine, never the header written in the JSON", got)
				}
			}
			if hasPrefix(names, "u_tool/") {
				var out struct{ Token string }
				_ = json.Unmarshal(f.mustCall("alice", "u_tool/whoami", `{}`).StructuredContent, &out)
				if out.Token != "CANARY-alice-tool" {
					t.Errorf("the user's stdio server got token %q", out.Token)
				}
			}
			d, _ := f.e.Describe(ctx(t))
			hasSection := false
			for _, s := range d.Settings {
				hasSection = hasSection || s.ID == extmcp.SectionUserServers
			}
			if hasSection != (tc.policy != "none") {
				t.Errorf("policy %s: the Your MCP servers section is offered: %v", tc.policy, hasSection)
			}
		})
	}
}

// TestSettingsSections checks the forms the extension offers: a switch
// per enabled server with the right default, the shared warning and
// authority, a token field per personal server, and the user-servers
// editor with the server-list schema; each form passes the settings
// module's validation.
func TestSettingsSections(t *testing.T) {
	t.Parallel()
	cfg := `{"userServers": "url", "mcpServers": {
		"a": {"command": "sh"},
		"b": {"url": "https://b", "availability": "opt-in", "headers": {"authorization": "Bearer set-per-user"}},
		"open": {"url": "https://open"},
		"o": {"url": "https://o", "oauth": {"scopes": ["read"]}},
		"off": {"command": "x", "enabled": false},
		"team": {"url": "https://t", "credentials": "shared", "users": ["u"], "sharedAuthority": "the team's service account"}}}`
	f := newFixture(t, "grpc", cfg, nil)
	d, err := f.e.Describe(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Settings) != 2 || d.Settings[0].ID != extmcp.SectionServers || d.Settings[1].ID != extmcp.SectionUserServers {
		t.Fatalf("sections: %+v", d.Settings)
	}
	form, err := settings.ParseForm(d.Settings[0].Form)
	if err != nil {
		t.Fatalf("the servers form is invalid: %v", err)
	}
	byName := map[string]*settings.Node{}
	for _, n := range form.Root.Children {
		byName[n.Name] = n
	}
	for name, want := range map[string]string{"a": "true", "b": "false", "team": "false"} {
		n := byName[name]
		if n == nil || n.Type != settings.NodeToggle || string(n.Default) != want {
			t.Errorf("switch %s: %+v; want a toggle defaulting to %s", name, n, want)
		}
	}
	if byName["off"] != nil {
		t.Error("a disabled server has a switch")
	}
	if n := byName["team"]; n == nil || !strings.Contains(n.Warning, "operator's credential") || !strings.Contains(n.Help, "the team's service account") {
		t.Errorf("the shared switch lacks the warning or the authority: %+v", n)
	}
	for _, name := range []string{"a", "b", "open", "o", "team"} {
		if n := byName[name]; n == nil || n.Status != name {
			t.Errorf("switch %s does not name its status entry: %+v", name, n)
		}
	}
	// A token field where a token is read: a stdio server, a remote one
	// with an Authorization header; not a remote one without (OAuth or no
	// credential), nor a shared one.
	for _, name := range []string{"token:a", "token:b"} {
		if n := byName[name]; n == nil || n.Type != settings.NodeSecret {
			t.Errorf("no secret field %s", name)
		}
	}
	for _, name := range []string{"token:open", "token:o", "token:team"} {
		if byName[name] != nil {
			t.Errorf("a token field %s for a server that reads no user token", name)
		}
	}
	// The values a user would store pass the form.
	if _, err := settings.ValidateValues(form, json.RawMessage(`{"a": false, "b": true}`)); err != nil {
		t.Errorf("valid switches refused: %v", err)
	}
	own, err := settings.ParseForm(d.Settings[1].Form)
	if err != nil {
		t.Fatalf("the user-servers form is invalid: %v", err)
	}
	editor := own.Root.Children[0]
	if editor.Type != settings.NodeLongText || editor.Syntax != settings.SyntaxJSON || len(editor.Schema) == 0 {
		t.Errorf("the user-servers editor: %+v", editor)
	}
	good, _ := json.Marshal(map[string]string{extmcp.UserServersField: `{"mcpServers": {"x": {"url": "https://x/mcp"}}}`})
	if _, err := settings.ValidateValues(own, good); err != nil {
		t.Errorf("a valid own list refused by the form: %v", err)
	}
	// The editor's example is a list the form and the validator accept.
	example, _ := json.Marshal(map[string]string{extmcp.UserServersField: editor.Placeholder})
	if _, err := settings.ValidateValues(own, example); err != nil || editor.Placeholder != extmcp.UserServersExample {
		t.Errorf("the editor's example %q is refused by the form: %v", editor.Placeholder, err)
	}
	if l, err := extmcp.ParseServerList(json.RawMessage(editor.Placeholder)); err != nil || len(l.MCPServers) != 1 {
		t.Errorf("the editor's example is not a valid list: %v", err)
	}
	bad, _ := json.Marshal(map[string]string{extmcp.UserServersField: `{"mcpServers": {"x": {"url": "https://x/mcp", "comand": "y"}}}`})
	if _, err := settings.ValidateValues(own, bad); err == nil {
		t.Error("an own list with an unknown field passed the form")
	}
	if !d.Has(ext.CapabilityServices) || !d.Has(ext.CapabilityTools) || !d.Has(ext.CapabilityUsers) || !d.Has(ext.CapabilityStatus) {
		t.Errorf("capabilities %v", d.Capabilities)
	}
}
