package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// ownDecl is the test's stand-in for ext-mcp's parser: a JSON object of
// name → {"url": ...} or {"command": ...}, with "enabled" optional.
func parseOwn(raw json.RawMessage) ([]catalog.ServerDecl, error) {
	var in map[string]struct {
		URL     string `json:"url"`
		Command string `json:"command"`
		Enabled *bool  `json:"enabled"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("not a server list: %v", err)
	}
	var out []catalog.ServerDecl
	for name, s := range in {
		out = append(out, catalog.ServerDecl{Name: name, Remote: s.URL != "", Enabled: s.Enabled == nil || *s.Enabled,
			Fingerprint: s.URL + s.Command, Credentials: catalog.CredentialsShared, Users: []string{"x"},
			Availability: catalog.AvailabilityOptIn})
	}
	// Deterministic order for the test.
	if len(out) == 2 && out[0].Name > out[1].Name {
		out[0], out[1] = out[1], out[0]
	}
	return out, nil
}

func TestSettingsPlanner(t *testing.T) {
	personal := catalog.ServerDecl{Name: "notes", Enabled: true, Fingerprint: "n"}
	optIn := catalog.ServerDecl{Name: "search", Remote: true, Enabled: true, Availability: catalog.AvailabilityOptIn, Fingerprint: "s"}
	off := catalog.ServerDecl{Name: "old", Enabled: false, Fingerprint: "o"}
	shared := catalog.ServerDecl{Name: "team", Remote: true, Enabled: true, Credentials: catalog.CredentialsShared,
		Users: []string{"alice"}, Fingerprint: "t"}
	sharedOptIn := shared
	sharedOptIn.Name, sharedOptIn.Availability = "vault", catalog.AvailabilityOptIn
	clash := catalog.ServerDecl{Name: "u_mine", Enabled: true, Fingerprint: "c"}
	operator := []catalog.ServerDecl{personal, optIn, off, shared, sharedOptIn}
	own := func(name string, remote bool) catalog.ServerDecl {
		fp := "cmd"
		if remote {
			fp = "http://x"
		}
		return catalog.ServerDecl{Name: "u_" + name, Remote: remote, Enabled: true, Fingerprint: fp,
			Credentials: catalog.CredentialsUser, Availability: catalog.AvailabilityDefault}
	}
	for name, tc := range map[string]struct {
		user     string
		servers  []catalog.ServerDecl
		policy   string
		toggles  string
		own      string
		want     catalog.Plan
		wantErr  string
		togErr   error
		credErr  error
		noParser bool
	}{
		"defaults": {
			user: "bob", toggles: "",
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"empty toggles object": {
			user: "bob", toggles: "{}",
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"switched off and opted in": {
			user: "bob", toggles: `{"notes":false,"search":true,"old":true}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{optIn}},
		},
		"null means never set": {
			user: "bob", toggles: `{"notes":null,"search":null}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"a toggle that is not a boolean fails that server only": {
			user: "bob", toggles: `{"notes":"yes","search":true}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{optIn},
				Problems: []catalog.Problem{{Server: "notes", Reason: `the switch for "notes" is "yes", not true or false`}}},
		},
		"unreadable toggles leave every operator server out": {
			user: "bob", toggles: `[1,2]`,
			want: catalog.Plan{Problems: []catalog.Problem{
				{Server: "notes", Reason: "your server switches are not a JSON object, so no server is used until they are saved again"},
				{Server: "search", Reason: "your server switches are not a JSON object, so no server is used until they are saved again"},
			}},
		},
		"shared on the allowlist": {
			user: "alice", toggles: `{"vault":true}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal, shared, sharedOptIn}},
		},
		"shared switched off": {
			user: "alice", toggles: `{"team":false}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"shared not on the allowlist, even when switched on": {
			user: "bob", toggles: `{"team":true,"vault":true}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}, Problems: []catalog.Problem{
				{Server: "team", Reason: catalog.NotLentReason}, {Server: "vault", Reason: catalog.NotLentReason}}},
		},
		"shared not on the allowlist, never switched": {
			user: "bob", toggles: `{"vault":false}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"own servers ignored under none": {
			user: "bob", policy: catalog.UserServersNone, own: `{"mine":{"url":"http://x"}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"own servers ignored under an unknown policy": {
			user: "bob", policy: "URL", own: `{"mine":{"url":"http://x"}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"own remote server under url": {
			user: "bob", policy: catalog.UserServersURL, own: `{"mine":{"url":"http://x"},"tool":{"command":"cmd"}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal, own("mine", true)},
				Problems: []catalog.Problem{{Server: "u_tool", Reason: "the operator allows only remote (url) servers of your own; this one runs a command"}}},
		},
		"own stdio server under all": {
			user: "bob", policy: catalog.UserServersAll, own: `{"mine":{"url":"http://x"},"tool":{"command":"cmd"}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal, own("mine", true), own("tool", false)}},
		},
		"own server disabled": {
			user: "bob", policy: catalog.UserServersAll, own: `{"mine":{"url":"http://x","enabled":false}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"own servers empty": {
			user: "bob", policy: catalog.UserServersAll, own: ` {} `,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal}},
		},
		"invalid own JSON quarantines the list, never the operator's": {
			user: "bob", policy: catalog.UserServersAll, own: `{"mine":{"url":`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal},
				Problems: []catalog.Problem{{Server: catalog.UserServersProblem,
					Reason: "none of your MCP servers is used until this is fixed: not a server list: unexpected EOF"}}},
		},
		"own servers without a parser": {
			user: "bob", policy: catalog.UserServersAll, own: `{"mine":{"url":"http://x"}}`, noParser: true,
			want: catalog.Plan{Servers: []catalog.ServerDecl{personal},
				Problems: []catalog.Problem{{Server: catalog.UserServersProblem, Reason: "your MCP servers cannot be checked, so none is used"}}},
		},
		"own server clashing with an operator name": {
			user: "bob", policy: catalog.UserServersURL, servers: []catalog.ServerDecl{clash}, own: `{"mine":{"url":"http://x"}}`,
			want: catalog.Plan{Servers: []catalog.ServerDecl{clash},
				Problems: []catalog.Problem{{Server: "u_mine", Reason: "the operator already declares a server of that name; rename yours"}}},
		},
		"reading toggles fails": {
			user: "bob", togErr: errors.New("store down"), wantErr: "store down",
		},
		"reading a credential fails": {
			user: "bob", credErr: errors.New("keychain locked"), wantErr: "keychain locked",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			servers := tc.servers
			if servers == nil {
				servers = operator
			}
			p := &catalog.SettingsPlanner{
				Servers:     servers,
				UserServers: tc.policy,
				Toggles: func(_ context.Context, user string) (json.RawMessage, error) {
					if user != tc.user {
						t.Errorf("toggles read for %q, want %q", user, tc.user)
					}
					return json.RawMessage(tc.toggles), tc.togErr
				},
				OwnServers: func(_ context.Context, user string) (json.RawMessage, error) {
					if tc.policy == catalog.UserServersNone || tc.policy == "" {
						t.Error("own servers read under the none policy")
					}
					return json.RawMessage(tc.own), nil
				},
				ParseOwnServers: parseOwn,
			}
			if tc.noParser {
				p.ParseOwnServers = nil
			}
			if tc.credErr != nil {
				p.Credential = func(context.Context, string, catalog.ServerDecl) (catalog.Credential, error) {
					return catalog.Credential{}, tc.credErr
				}
			}
			got, err := p.Plan(context.Background(), tc.user)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Plan: %v; want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSettingsPlannerCredential checks that the credential identity joins
// the fingerprint, so a new token reconnects, and that a bound spec
// reaches the plan (and only the plan).
func TestSettingsPlannerCredential(t *testing.T) {
	tok := "id1"
	reads := 0
	p := &catalog.SettingsPlanner{
		Servers: []catalog.ServerDecl{{Name: "s", Enabled: true, Fingerprint: "cfg", Spec: "config"}},
		Credential: func(_ context.Context, user string, s catalog.ServerDecl) (catalog.Credential, error) {
			reads++
			return catalog.Credential{ID: user + ":" + tok, Spec: s.Spec.(string) + "+" + user + ":" + tok}, nil
		},
	}
	a, _ := p.Plan(context.Background(), "u")
	tok = "id2"
	b, _ := p.Plan(context.Background(), "u")
	if a.Servers[0].Fingerprint == b.Servers[0].Fingerprint || !strings.HasPrefix(a.Servers[0].Fingerprint, "cfg") {
		t.Errorf("fingerprints %q and %q; want them to differ and keep the config part", a.Servers[0].Fingerprint, b.Servers[0].Fingerprint)
	}
	if a.Servers[0].Spec != "config+u:id1" || b.Servers[0].Spec != "config+u:id2" {
		t.Errorf("bound specs %v and %v", a.Servers[0].Spec, b.Servers[0].Spec)
	}
	if reads != 2 {
		t.Errorf("the credential was read %d times in two plans of one server, want 2", reads)
	}
	if p.Servers[0].Fingerprint != "cfg" || p.Servers[0].Spec != "config" {
		t.Error("Plan modified the operator's declaration")
	}
}

// TestSettingsPlannerCredentialMissing: a server whose credential lacks
// what the user must provide is left out of the plan, with the reason as
// its problem; the others stay.
func TestSettingsPlannerCredentialMissing(t *testing.T) {
	p := &catalog.SettingsPlanner{
		Servers: []catalog.ServerDecl{{Name: "a", Enabled: true}, {Name: "b", Enabled: true}, {Name: "c", Enabled: true}},
		Credential: func(_ context.Context, _ string, s catalog.ServerDecl) (catalog.Credential, error) {
			if s.Name == "b" {
				return catalog.Credential{Missing: `needs your secret input "key"`}, nil
			}
			return catalog.Credential{ID: "x"}, nil
		},
	}
	plan, err := p.Plan(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range plan.Servers {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "a c" {
		t.Errorf("planned %q, want a and c", names)
	}
	if len(plan.Problems) != 1 || plan.Problems[0].Server != "b" || plan.Problems[0].Reason != `needs your secret input "key"` {
		t.Errorf("problems %+v", plan.Problems)
	}
}

func TestToolPolicy(t *testing.T) {
	p := catalog.ToolPolicy{
		"exact":      ext.ExposureCodemode,
		"admin_*":    catalog.Hidden,
		"admin_read": ext.ExposureDeferred,
		"*":          ext.ExposureDeferred,
		"get_*":      ext.ExposureDirect,
		"get_?":      ext.ExposureCodemode,
		"x*y*z":      ext.ExposureCodemode,
		"blank":      "",
	}
	for tool, want := range map[string]struct {
		exp    ext.Exposure
		hidden bool
	}{
		"exact":        {ext.ExposureCodemode, false},
		"admin_delete": {"", true},
		"admin_read":   {ext.ExposureDeferred, false}, // exact beats glob
		"get_issue":    {ext.ExposureDirect, false},   // longer glob beats "*"
		"get_a":        {ext.ExposureDirect, false},   // equal length: "get_*" sorts before "get_?"
		"xaaybbz":      {ext.ExposureCodemode, false},
		"a/b":          {ext.ExposureDeferred, false}, // "*" matches "/"
		"blank":        {ext.ExposureDirect, false},
		"":             {ext.ExposureDeferred, false},
	} {
		exp, hidden := p.Resolve(tool)
		if exp != want.exp || hidden != want.hidden {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", tool, exp, hidden, want.exp, want.hidden)
		}
	}
	if exp, hidden := catalog.ToolPolicy(nil).Resolve("x"); exp != ext.ExposureDirect || hidden {
		t.Errorf("nil policy: %q %v", exp, hidden)
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "blank") {
		t.Errorf("Validate with an empty exposure: %v", err)
	}
	if err := (catalog.ToolPolicy{"a": "weird"}).Validate(); err == nil {
		t.Error("Validate accepted an unknown exposure")
	}
	if err := (catalog.ToolPolicy{"": ext.ExposureDirect}).Validate(); err == nil {
		t.Error("Validate accepted an empty pattern")
	}
	if err := (catalog.ToolPolicy{"a*": catalog.Hidden, "b": ext.ExposureCodemode}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// FuzzGlob checks the matcher against a slow reference and that it never
// blows up on pathological patterns.
func FuzzGlob(f *testing.F) {
	f.Add("a*b?c", "axxbyc")
	f.Add("****************x", strings.Repeat("a", 200))
	f.Add("*", "")
	f.Add("?", "é")
	f.Fuzz(func(t *testing.T, pat, name string) {
		if len(pat) > 64 || len(name) > 256 {
			return
		}
		p := catalog.ToolPolicy{pat: catalog.Hidden}
		_, hidden := p.Resolve(name)
		want := pat == name || (strings.ContainsAny(pat, "*?") && refMatch([]rune(pat), []rune(name)))
		if hidden != want {
			t.Errorf("pattern %q on %q: matched %v, want %v", pat, name, hidden, want)
		}
	})
}

// refMatch is a dynamic-programming reference matcher.
func refMatch(p, n []rune) bool {
	// m[i][j]: p[i:] matches n[j:].
	m := make([][]bool, len(p)+1)
	for i := range m {
		m[i] = make([]bool, len(n)+1)
	}
	m[len(p)][len(n)] = true
	for i := len(p) - 1; i >= 0; i-- {
		for j := len(n); j >= 0; j-- {
			switch {
			case p[i] == '*':
				m[i][j] = m[i+1][j] || (j < len(n) && m[i][j+1])
			case j < len(n) && (p[i] == '?' || p[i] == n[j]):
				m[i][j] = m[i+1][j+1]
			}
		}
	}
	return m[0][0]
}

// A shared server's allowlist names groups as "group:NAME": the planner
// lends it to the members the Groups function names, and to nobody else.
func TestSettingsPlannerGroups(t *testing.T) {
	team := catalog.ServerDecl{Name: "team", Remote: true, Enabled: true, Credentials: catalog.CredentialsShared,
		Users: []string{"carol", "group:eng"}, Fingerprint: "t"}
	groups := map[string][]string{"alice": {"eng", "ops"}, "bob": {"ops"}}
	p := &catalog.SettingsPlanner{Servers: []catalog.ServerDecl{team},
		Groups: func(user string) []string { return groups[user] }}
	for user, want := range map[string]bool{"alice": true, "bob": false, "carol": true, "eng": false, "dave": false} {
		plan, err := p.Plan(context.Background(), user)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(plan.Servers) == 1; got != want {
			t.Errorf("%s is lent team: %v, want %v", user, got, want)
		}
	}
	// Without a Groups function a group lends nothing.
	p.Groups = nil
	if plan, _ := p.Plan(context.Background(), "alice"); len(plan.Servers) != 0 {
		t.Errorf("alice without groups is lent %v", plan.Servers)
	}
	if !catalog.Lends([]string{"group:a b"}, "x", []string{"a b"}) || catalog.Lends([]string{"group:eng"}, "group:eng", nil) {
		t.Error("Lends: a group with a space, or a user named like a group entry")
	}
}
