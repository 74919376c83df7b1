// Package termsafe makes text from servers, users and extensions safe to
// print on a terminal. Such text may carry control characters: an escape
// sequence (ESC [ 2J clears the screen, ESC ] 0 sets the window title,
// ESC ] 52 writes the clipboard), a bell, a carriage return or a newline
// that forges a line of output, a C1 control (U+009B is a CSI by itself)
// or a bidirectional override that reorders what the eye reads.
//
// [String] escapes every such character in one string, newlines and tabs
// included: use it on each field a table or message shows. [NewWriter]
// escapes them in a whole stream but keeps newlines and tabs, which the
// program's own output needs: a last line of defence under the fields.
// Both write an escaped character as \u followed by four hex digits (so
// JSON stays valid JSON with the same meaning) and a byte that is not
// UTF-8 as \x followed by two.
//
// [Unsafe] is the one test of a character, for those that refuse text
// (a tool name) instead of escaping it.
//
// The functions are safe for concurrent use; a Writer is as safe as the
// writer it wraps.
package termsafe

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Unsafe reports whether r must not reach a terminal raw: a C0 control
// (tab and newline included), DEL, a C1 control, a bidirectional
// formatting character (embeddings, overrides, isolates and marks), the
// line and paragraph separators.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// HasUnsafe reports whether s has a character [Unsafe] refuses or a byte
// that is not UTF-8.
func HasUnsafe(s string) bool {
	return !utf8.ValidString(s) || strings.ContainsFunc(s, Unsafe)
}

// String returns s with every [Unsafe] character and every byte that is
// not UTF-8 escaped; s itself when there is none.
func String(s string) string {
	if !HasUnsafe(s) {
		return s
	}
	return string(appendEscaped(make([]byte, 0, len(s)+16), s, false))
}

// NewWriter returns a writer that writes to w what it is given with every
// [Unsafe] character except newline and tab, and every byte that is not
// UTF-8, escaped. Each Write is escaped on its own: a character split
// between two writes is escaped byte by byte.
func NewWriter(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct{ w io.Writer }

func (w *writer) Write(p []byte) (int, error) {
	clean := true
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRune(p[i:])
		if (r == utf8.RuneError && n == 1) || (Unsafe(r) && r != '\n' && r != '\t') {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return w.w.Write(p)
	}
	if _, err := w.w.Write(appendEscaped(make([]byte, 0, len(p)+16), string(p), true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

const hex = "0123456789abcdef"

// appendEscaped appends s to b with its unsafe characters escaped; with
// keepLines, newline and tab are kept.
func appendEscaped(b []byte, s string, keepLines bool) []byte {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, '\\', 'x', hex[s[i]>>4], hex[s[i]&0xf])
		case keepLines && (r == '\n' || r == '\t'):
			b = append(b, byte(r))
		case Unsafe(r):
			b = append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}
