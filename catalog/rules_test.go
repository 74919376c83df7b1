package catalog_test

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/catalog"
)

// TestServerNameRules: the name pattern the engine's "server/tool" split
// relies on, and the user-server prefix reserved for the users' own.
func TestServerNameRules(t *testing.T) {
	for _, c := range []struct {
		name string
		own  bool
		want string // in the error; "" for none
	}{
		{"notes", false, ""},
		{"a-b_C9", false, ""},
		{strings.Repeat("x", 64), false, ""},
		{strings.Repeat("x", 65), false, "must match"},
		{"", false, "must match"},
		{"a/b", false, "must match"},
		{"a.b", false, "must match"},
		{"u_notes", false, "reserved for the users' own servers"},
		{"u_notes", true, ""},
	} {
		err := catalog.CheckServerName(c.name, c.own)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckServerName(%q, %v) = %v, want %q", c.name, c.own, err, c.want)
		}
	}
	if !catalog.IsUserServer(catalog.UserServerName("x")) || catalog.IsUserServer("x") {
		t.Error("IsUserServer does not recognize UserServerName")
	}
}

// TestUserServersPolicy: which policies exist and what each lets users add.
func TestUserServersPolicy(t *testing.T) {
	for _, c := range []struct {
		policy              string
		valid, own, command bool
	}{
		{"", true, false, false},
		{catalog.UserServersNone, true, false, false},
		{catalog.UserServersURL, true, true, false},
		{catalog.UserServersAll, true, true, true},
		{"some", false, false, false},
	} {
		if got := catalog.ValidUserServers(c.policy); got != c.valid {
			t.Errorf("ValidUserServers(%q) = %v", c.policy, got)
		}
		if got := catalog.AllowsUserServers(c.policy); got != c.own {
			t.Errorf("AllowsUserServers(%q) = %v", c.policy, got)
		}
		if got := catalog.AllowsUserCommands(c.policy); got != c.command {
			t.Errorf("AllowsUserCommands(%q) = %v", c.policy, got)
		}
	}
}
