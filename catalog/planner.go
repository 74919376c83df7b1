package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The user-servers policies: which of their own servers users may add.
const (
	// UserServersNone allows none (the default).
	UserServersNone = "none"
	// UserServersURL allows remote (url) servers.
	UserServersURL = "url"
	// UserServersAll allows remote and stdio (command) servers.
	UserServersAll = "all"
)

// UserServerPrefix prefixes the names of a user's own servers, keeping
// them apart from the operator's.
const UserServerPrefix = "u_"

// UserServersProblem is the [Problem.Server] of a problem with the user's
// whole list of their own servers.
const UserServersProblem = "Your MCP servers"

// NotLentReason is the problem of a shared server a user switched on but
// is not lent: it stays off.
const NotLentReason = "this shared server is lent by the operator to some users only, and not to you: it stays off"

// SettingsPlanner is the [Planner] of DESIGN.md §4: it computes a user's
// active set from the operator's declarations, the user's switches and the
// user's own servers. Its fields are set once, before first use; Plan is
// safe for concurrent use when the functions it calls are.
type SettingsPlanner struct {
	// Servers are the operator's declarations.
	Servers []ServerDecl
	// UserServers is the policy for the user's own servers:
	// UserServersNone, UserServersURL or UserServersAll; any other value
	// counts as UserServersNone.
	UserServers string
	// Toggles reads the user's switches: a JSON object of server name to
	// boolean. An empty document means no switch was ever set.
	Toggles func(ctx context.Context, user string) (json.RawMessage, error)
	// OwnServers reads the user's own servers as the raw JSON they wrote;
	// it is not called under UserServersNone. An empty document, "null"
	// and "{}" mean none.
	OwnServers func(ctx context.Context, user string) (json.RawMessage, error)
	// ParseOwnServers validates the user's JSON (with the same validator as
	// the operator's file) and returns the declarations under their own
	// names, without the prefix. An error is shown to the user as is.
	ParseOwnServers func(raw json.RawMessage) ([]ServerDecl, error)
	// Credential, when set, resolves the credential user would use on s,
	// once per plan (see [Credential]).
	Credential func(ctx context.Context, user string, s ServerDecl) (Credential, error)
	// Groups, when set, returns user's groups, for the "group:NAME"
	// entries of shared servers' allowlists ([Lends]); nil means none.
	Groups func(user string) []string
}

// GroupPrefix marks a group in a shared server's allowlist: "group:eng"
// lends the server to the members of eng. (A user ID has no colon.)
const GroupPrefix = "group:"

// Lends reports whether the allowlist users (names, and groups as
// "group:NAME") lends a shared server to user, a member of groups.
func Lends(users []string, user string, groups []string) bool {
	for _, u := range users {
		if g, ok := strings.CutPrefix(u, GroupPrefix); ok {
			if slices.Contains(groups, g) {
				return true
			}
			continue
		}
		if u == user {
			return true
		}
	}
	return false
}

// Lent reports whether s takes part for user as far as its allowlist goes:
// always for a server that is not shared, else when [Lends] says so with
// user's groups.
func (p *SettingsPlanner) Lent(s ServerDecl, user string) bool {
	if s.Credentials != CredentialsShared {
		return true
	}
	var groups []string
	if p.Groups != nil {
		groups = p.Groups(user)
	}
	return Lends(s.Users, user, groups)
}

// Credential is what a [SettingsPlanner] learned of the credential a user
// would use on a server.
type Credential struct {
	// ID identifies the credential without revealing it (for instance a
	// keyed hash of a token; never the secret). It is appended to the
	// server's fingerprint, so that a new credential makes a new
	// connection.
	ID string
	// Spec, when not nil, replaces the server's Spec in the user's plan:
	// the connector receives it, so a credential read while planning is
	// not read again while connecting. It is handed to the Connector
	// only, never logged or shown.
	Spec any
	// Missing, when set, says what the user must provide before the server
	// can be used (a required secret they have not set): the server is left
	// out of the plan, with Missing as its problem's reason, so nothing
	// connects without it and nothing retries. Never a secret.
	Missing string
}

var _ Planner = (*SettingsPlanner)(nil)

// Plan implements [Planner]:
//
//   - an operator server takes part when it is enabled and, for a shared
//     server, the user is on its allowlist (a user off the list who
//     switched it on gets a problem saying why it stays off);
//   - it is then on unless the user switched it off; a switch never set
//     means on, except for an opt-in server; a switch that is not a
//     boolean leaves that server out, with the reason;
//   - the user's own servers take part when the policy allows their kind
//     (url: remote only; all: stdio too), named "u_<name>", always with the
//     user's credentials; a list that does not parse is left out as a
//     whole, with the reason, and never affects the operator's servers.
//
// Switches that cannot be read leave every operator server out (a user's
// "off" is never overridden by a default); an error reading them is
// returned, failing the refresh.
func (p *SettingsPlanner) Plan(ctx context.Context, user string) (Plan, error) {
	snap, err := p.Read(ctx, user)
	if err != nil {
		return Plan{}, err
	}
	return p.PlanOf(ctx, snap)
}

// Snapshot is what a user's plan is computed from: the user's groups and
// settings, as read once (by [SettingsPlanner.Read], or handed over with
// an activation).
type Snapshot struct {
	User string
	// Groups are the user's groups, for the "group:NAME" entries of
	// shared servers' allowlists ([Lends]).
	Groups []string
	// Toggles are the user's switches: a JSON object of server name to
	// boolean; empty when none was ever set.
	Toggles json.RawMessage
	// OwnServers are the user's own servers as the raw JSON they wrote;
	// empty, "null" and "{}" mean none.
	OwnServers json.RawMessage
}

// Read reads user's snapshot through Toggles, OwnServers (not under
// UserServersNone) and Groups.
func (p *SettingsPlanner) Read(ctx context.Context, user string) (Snapshot, error) {
	snap := Snapshot{User: user}
	if p.Groups != nil {
		snap.Groups = p.Groups(user)
	}
	if p.Toggles != nil {
		raw, err := p.Toggles(ctx, user)
		if err != nil {
			return Snapshot{}, fmt.Errorf("reading the server switches of %q: %w", user, err)
		}
		snap.Toggles = raw
	}
	if AllowsUserServers(p.UserServers) && p.OwnServers != nil {
		raw, err := p.OwnServers(ctx, user)
		if err != nil {
			return Snapshot{}, fmt.Errorf("reading the own servers of %q: %w", user, err)
		}
		snap.OwnServers = raw
	}
	return snap, nil
}

// PlanOf is [SettingsPlanner.Plan] from a snapshot: it reads nothing, so
// the same snapshot gives the same plan (Credential, when set, is asked
// for each planned server; it must itself read only what it was handed
// to be as pure).
func (p *SettingsPlanner) PlanOf(ctx context.Context, snap Snapshot) (Plan, error) {
	var plan Plan
	user := snap.User
	toggles, problem := parseToggles(snap.Toggles)
	for _, s := range p.Servers {
		if !s.Enabled {
			continue
		}
		if s.Credentials == CredentialsShared && !Lends(s.Users, user, snap.Groups) {
			// Not offered. Say nothing about it, unless the user switched
			// it on: then say why it stays off.
			if bytes.Equal(bytes.TrimSpace(toggles[s.Name]), []byte("true")) {
				plan.Problems = append(plan.Problems, Problem{Server: s.Name, Reason: NotLentReason})
			}
			continue
		}
		if problem != "" {
			plan.Problems = append(plan.Problems, Problem{Server: s.Name, Reason: problem})
			continue
		}
		on, reason := toggleState(toggles, s)
		if reason != "" {
			plan.Problems = append(plan.Problems, Problem{Server: s.Name, Reason: reason})
			continue
		}
		if on {
			plan.Servers = append(plan.Servers, s)
		}
	}
	own, problems := p.ownServers(snap.OwnServers)
	plan.Problems = append(plan.Problems, problems...)
	taken := make(map[string]bool, len(plan.Servers))
	for _, s := range p.Servers {
		taken[s.Name] = true
	}
	for _, s := range own {
		if taken[s.Name] {
			plan.Problems = append(plan.Problems, Problem{Server: s.Name,
				Reason: "the operator already declares a server of that name; rename yours"})
			continue
		}
		taken[s.Name] = true
		plan.Servers = append(plan.Servers, s)
	}
	if p.Credential != nil {
		bound := plan.Servers[:0]
		for _, s := range plan.Servers {
			c, err := p.Credential(ctx, user, s)
			if err != nil {
				return Plan{}, fmt.Errorf("reading the credential of %q for server %q: %w", user, s.Name, err)
			}
			if c.Missing != "" {
				plan.Problems = append(plan.Problems, Problem{Server: s.Name, Reason: c.Missing})
				continue
			}
			s.Fingerprint += "\x00" + c.ID
			if c.Spec != nil {
				s.Spec = c.Spec
			}
			bound = append(bound, s)
		}
		plan.Servers = bound
	}
	return plan, nil
}

// parseToggles returns the user's switches, or a problem that leaves every
// operator server out.
func parseToggles(raw json.RawMessage) (map[string]json.RawMessage, string) {
	if isEmptyDoc(raw) {
		return nil, ""
	}
	var toggles map[string]json.RawMessage
	if err := json.Unmarshal(raw, &toggles); err != nil {
		return nil, "your server switches are not a JSON object, so no server is used until they are saved again"
	}
	return toggles, ""
}

// toggleState says whether s is on for a user with these switches, or why
// it is left out.
func toggleState(toggles map[string]json.RawMessage, s ServerDecl) (on bool, reason string) {
	def := s.Availability != AvailabilityOptIn
	raw, ok := toggles[s.Name]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return def, ""
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Sprintf("the switch for %q is %s, not true or false", s.Name, clip(string(raw), 40))
	}
	return b, ""
}

// ownServers returns the user's own servers (raw, as they wrote them)
// the policy allows, renamed, and the problems with them.
func (p *SettingsPlanner) ownServers(raw json.RawMessage) ([]ServerDecl, []Problem) {
	policy := p.UserServers
	if !AllowsUserServers(policy) {
		return nil, nil
	}
	if isEmptyDoc(raw) || bytes.Equal(bytes.TrimSpace(raw), []byte("{}")) {
		return nil, nil
	}
	if p.ParseOwnServers == nil {
		return nil, []Problem{{Server: UserServersProblem, Reason: "your MCP servers cannot be checked, so none is used"}}
	}
	decls, err := p.ParseOwnServers(raw)
	if err != nil {
		return nil, []Problem{{Server: UserServersProblem, Reason: "none of your MCP servers is used until this is fixed: " + err.Error()}}
	}
	var (
		out      []ServerDecl
		problems []Problem
	)
	for _, s := range decls {
		name := UserServerName(s.Name)
		if !s.Enabled {
			continue
		}
		if !s.Remote && !AllowsUserCommands(policy) {
			problems = append(problems, Problem{Server: name,
				Reason: "the operator allows only remote (url) servers of your own; this one runs a command"})
			continue
		}
		s.Name = name
		s.Credentials = CredentialsUser
		s.Availability = AvailabilityDefault
		s.Users = nil
		out = append(out, s)
	}
	return out, problems
}

func isEmptyDoc(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// clip shortens s for a message.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
