package ext

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Scope narrows what a user's token (or a call made as a user) reaches: the
// user's tools, prompts, resources and resource templates of the named
// servers only, and of those tools only the ones a glob names. A nil
// *Scope means "everything the user has" (an unscoped token).
//
// A server is the first segment of a name: the "github" of
// "github/create_issue" (ext-mcp's MCP servers; another extension's
// tools are named the same way). Tool globs are matched with
// [path.Match] against the whole "server/tool" name, so "*" stops at the
// "/": "github/*" is every tool of github, "github/list_*" its list_
// tools, "*/search" every server's search tool (still only of the scope's
// servers). Prompts are scoped by their server; resources and templates
// by the server an extension names in [Resource.Server] and
// [ResourceTemplate.Server] (one that names none is outside every scope).
// The tool globs narrow tools only.
type Scope struct {
	// Servers the scope reaches; at least one.
	Servers []string `json:"servers"`
	// Tools, when not empty, are path.Match globs over "server/tool": a
	// tool is in scope only when one matches (and its server is listed).
	Tools []string `json:"tools,omitempty"`
}

// Validate checks a scope: at least one server, server names without "/"
// and not empty, globs that path.Match accepts. It also sorts and
// de-duplicates both lists, so that equal scopes have equal [Scope.Key]s.
func (s *Scope) Validate() error {
	if s == nil {
		return nil
	}
	if len(s.Servers) == 0 {
		return fmt.Errorf("a scope names at least one server: %w", ErrInvalidArgument)
	}
	for _, srv := range s.Servers {
		if srv == "" || strings.ContainsAny(srv, "/\x00") || len(srv) > 128 {
			return fmt.Errorf("scope server %q: want a server's name (no \"/\"): %w", srv, ErrInvalidArgument)
		}
	}
	for _, g := range s.Tools {
		if _, err := path.Match(g, ""); err != nil || g == "" || strings.ContainsRune(g, 0) || len(g) > 256 {
			return fmt.Errorf("scope tool glob %q: not a path.Match pattern over \"server/tool\": %w", g, ErrInvalidArgument)
		}
	}
	slices.Sort(s.Servers)
	s.Servers = slices.Compact(s.Servers)
	slices.Sort(s.Tools)
	s.Tools = slices.Compact(s.Tools)
	return nil
}

// Clone returns a copy that shares no slice with s (nil for nil).
func (s *Scope) Clone() *Scope {
	if s == nil {
		return nil
	}
	return &Scope{Servers: slices.Clone(s.Servers), Tools: slices.Clone(s.Tools)}
}

// Key is a string that equal scopes share ("" for nil). Call it on a
// validated scope.
func (s *Scope) Key() string {
	if s == nil {
		return ""
	}
	return "s:" + strings.Join(s.Servers, ",") + "\x00t:" + strings.Join(s.Tools, "\x00")
}

// String is the scope as the CLI and the settings page show it, e.g.
// "servers notes,files; tools notes/list_*".
func (s *Scope) String() string {
	if s == nil {
		return "all"
	}
	out := "servers " + strings.Join(s.Servers, ",")
	if len(s.Tools) > 0 {
		out += "; tools " + strings.Join(s.Tools, ",")
	}
	return out
}

// AllowsServer reports whether the scope reaches server (a nil scope
// reaches every one).
func (s *Scope) AllowsServer(server string) bool {
	return s == nil || (server != "" && slices.Contains(s.Servers, server))
}

// AllowsTool reports whether the scope reaches the tool named
// "server/tool".
func (s *Scope) AllowsTool(name string) bool {
	if s == nil {
		return true
	}
	if !s.AllowsServer(ServerOf(name)) {
		return false
	}
	if len(s.Tools) == 0 {
		return true
	}
	for _, g := range s.Tools {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

// AllowsPrompt reports whether the scope reaches the prompt named
// "server/prompt".
func (s *Scope) AllowsPrompt(name string) bool { return s.AllowsServer(ServerOf(name)) }

// Within reports whether s reaches nothing that outer does not: every
// server of s is one of outer's, and when outer has tool globs, s has
// tool globs too, each of which is one of outer's (a glob is compared as
// written, not by what it matches). A nil outer holds every scope; a nil
// s is within a nil outer only.
func (s *Scope) Within(outer *Scope) bool {
	if outer == nil {
		return true
	}
	if s == nil {
		return false
	}
	for _, srv := range s.Servers {
		if !slices.Contains(outer.Servers, srv) {
			return false
		}
	}
	if len(outer.Tools) == 0 {
		return true
	}
	if len(s.Tools) == 0 {
		return false
	}
	for _, g := range s.Tools {
		if !slices.Contains(outer.Tools, g) {
			return false
		}
	}
	return true
}

// ServerOf returns the server of a "server/name" name: its first segment
// ("" for a name without "/").
func ServerOf(name string) string {
	srv, _, ok := strings.Cut(name, "/")
	if !ok {
		return ""
	}
	return srv
}
