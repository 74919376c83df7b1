package catalog

import (
	"fmt"
	"regexp"
	"strings"
)

// The catalog's own rules, whatever the servers speak: how a server may be
// named, how a user's own servers are kept apart from the operator's, and
// which of their own servers a policy lets users add. (They lived in
// ext-mcp before; DESIGN.md §4.)

// ServerNamePattern is what a server's name matches: the engine publishes
// a tool as "server/tool" and splits at the first slash, so a name holds
// none.
const ServerNamePattern = `^[A-Za-z0-9_-]{1,64}$`

var serverNameRE = regexp.MustCompile(ServerNamePattern)

// CheckServerName returns why name cannot name a server, or nil. The
// operator's servers (own false) may not take the [UserServerPrefix]; the
// users' own are named without it (the planner adds it).
func CheckServerName(name string, own bool) error {
	if !serverNameRE.MatchString(name) {
		return fmt.Errorf("the server name must match %s", ServerNamePattern)
	}
	if !own && IsUserServer(name) {
		return fmt.Errorf("names starting with %q are reserved for the users' own servers", UserServerPrefix)
	}
	return nil
}

// IsUserServer reports whether the server name is one of a user's own
// servers, as the planner names them.
func IsUserServer(name string) bool { return strings.HasPrefix(name, UserServerPrefix) }

// UserServerName is the planned name of the user's own server name.
func UserServerName(name string) string { return UserServerPrefix + name }

// ValidUserServers reports whether policy is a user-servers policy
// ("" counts as [UserServersNone]).
func ValidUserServers(policy string) bool {
	switch policy {
	case "", UserServersNone, UserServersURL, UserServersAll:
		return true
	}
	return false
}

// AllowsUserServers reports whether policy lets users add servers of
// their own at all.
func AllowsUserServers(policy string) bool {
	return policy == UserServersURL || policy == UserServersAll
}

// AllowsUserCommands reports whether policy lets users add servers that
// run a command (stdio), not only remote ones.
func AllowsUserCommands(policy string) bool { return policy == UserServersAll }
