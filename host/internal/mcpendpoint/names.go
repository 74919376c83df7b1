package mcpendpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// maxNameLen is the longest tool name the endpoint offers. MCP 2025-11-25
// allows 128 characters, but several clients (and the models behind them)
// cap function names at 64.
const maxNameLen = 64

// hashLen is the number of hex digits of the name hash suffix.
const hashLen = 8

// searchToolName is the endpoint's own tool; no mapped name may take it.
const searchToolName = "search_tools"

// validNameByte reports whether c may appear in an MCP tool name.
func validNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// checkSeparator reports why sep cannot replace "/" in tool names.
func checkSeparator(sep string) error {
	if sep == "" {
		return fmt.Errorf("separator is empty")
	}
	for i := 0; i < len(sep); i++ {
		if !validNameByte(sep[i]) {
			return fmt.Errorf("separator %q holds %q: only A-Z, a-z, 0-9, '_', '-' and '.' are allowed", sep, sep[i])
		}
	}
	if len(sep) > 8 {
		return fmt.Errorf("separator %q is longer than 8 characters", sep)
	}
	return nil
}

// sanitize maps an original name to the MCP alphabet: "/" becomes sep and
// every other disallowed character (a whole rune, not a byte) becomes "_".
func sanitize(name, sep string) string {
	var b strings.Builder
	b.Grow(len(name) + 4)
	for _, r := range name {
		switch {
		case r == '/':
			b.WriteString(sep)
		case r < 0x80 && validNameByte(byte(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "tool"
	}
	return b.String()
}

// hashed returns base, cut so that the result fits maxNameLen, followed
// by "_" and the first n hex digits of the SHA-256 of the original name.
func hashed(base, original string, n int) string {
	sum := sha256.Sum256([]byte(original))
	suffix := hex.EncodeToString(sum[:])[:n]
	if keep := maxNameLen - 1 - n; len(base) > keep {
		base = base[:keep]
	}
	return base + "_" + suffix
}

// mapNames gives each original name (unique, any characters) an MCP tool
// name: sanitized with sep, at most maxNameLen characters, distinct from
// the others and from search_tools. A name that is too long, or that
// sanitizes to the same name as another, carries a hash of its original;
// every member of a colliding group does, so no original wins by the
// order in which tools arrived.
//
// The result depends only on the set of originals. The map goes one way:
// the caller keeps the reverse table and never parses a mapped name.
func mapNames(originals []string, sep string) map[string]string {
	bases := make(map[string]string, len(originals))
	count := make(map[string]int, len(originals))
	for _, o := range originals {
		b := sanitize(o, sep)
		bases[o] = b
		count[b]++
	}
	out := make(map[string]string, len(originals))
	used := make(map[string]bool, len(originals)+1)
	used[searchToolName] = true
	var rest []string
	for _, o := range originals {
		b := bases[o]
		if len(b) <= maxNameLen && count[b] == 1 && b != searchToolName {
			out[o] = b
			used[b] = true
		} else {
			rest = append(rest, o)
		}
	}
	// Hashed names are assigned in a fixed order; a hash prefix clash
	// (one in four billion) takes a longer prefix.
	slices.Sort(rest)
	for _, o := range rest {
		name := ""
		for n := hashLen; n <= 4*hashLen && (name == "" || used[name]); n *= 2 {
			name = hashed(bases[o], o, n)
		}
		// A clash of 128-bit prefixes would need a crafted pair of names;
		// even then the result stays unique.
		for i := 2; used[name]; i++ {
			name = hashed(bases[o], fmt.Sprintf("%s#%d", o, i), 4*hashLen)
		}
		out[o] = name
		used[name] = true
	}
	return out
}

// PinHolder is implemented by a [Host] that pins tool definitions
// (*host.Host): a call of a tool its pin holds back is refused with why
// (README "Tool pinning") rather than as an unknown tool.
type PinHolder interface {
	// HeldTools returns the user's tools held back by a pin, by the
	// host's name, with the sentence that says why.
	HeldTools(user string) map[string]string
}

// unknownOrHeld is the message of a call of a tool the user's table does
// not hold: why a pin holds it back when it does (a tool of u's scope),
// else [toolTable.unknownTool]'s.
func (e *Endpoint) unknownOrHeld(t *toolTable, u *userState, name string) string {
	if ph, ok := e.host.(PinHolder); ok {
		for original, why := range ph.HeldTools(u.user) {
			if sanitize(original, e.sep) == name && u.scope.AllowsTool(original) {
				return why
			}
		}
	}
	return t.unknownTool(name, e.sep)
}

// maxNamedInUnknown bounds the tools an unknown tool's error names.
const maxNamedInUnknown = 5

// unknownTool is the message of a call of a tool the user's table does
// not hold. When name starts with the MCP prefix of a server whose tools
// the user has ("S" then sep; the longest such prefix), it names that
// server's listed tools, with their titles (up to maxNamedInUnknown): a
// server that waits for the user's sign-in lists only its sign-in entry
// ("S/sign_in", "Sign in to S"), so an agent that calls a tool it
// expected learns why there is none and what to call. Only the caller's
// own table is read.
func (t *toolTable) unknownTool(name, sep string) string {
	msg := fmt.Sprintf("unknown tool %q", name)
	server, prefix := "", ""
	for _, ent := range t.base {
		s, _, _ := strings.Cut(ent.original, "/")
		if p := sanitize(s, sep) + sep; len(p) > len(prefix) && strings.HasPrefix(name, p) {
			server, prefix = s, p
		}
	}
	if server == "" {
		return msg
	}
	var named []string
	more := 0
	for _, ent := range t.base {
		if s, _, _ := strings.Cut(ent.original, "/"); s != server {
			continue
		}
		if len(named) == maxNamedInUnknown {
			more++
			continue
		}
		n := ent.name
		if ent.src.Title != "" {
			n += fmt.Sprintf(" (%q)", clipUTF8(ent.src.Title, 80))
		}
		named = append(named, n)
	}
	msg += fmt.Sprintf("; the tools of %q are: %s", server, strings.Join(named, ", "))
	if more > 0 {
		msg += fmt.Sprintf(" and %d more", more)
	}
	return msg
}
