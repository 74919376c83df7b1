package secrets

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// The keychain has two attributes per item, service and "user" (go-keyring
// calls it user; we call it the account to avoid confusion with agenthost
// users). All items of one Keychain share the service; the account encodes
// what the item is and whose it is:
//
//	s/<extension>/<user>/<name>   a secret
//	n/<extension>/<user>          the name index of (extension, user): a JSON array of names
//	u/<user>                      the user index: a JSON array of the user's extensions
//	f/<path>                      the key of an encrypted store file at that absolute path
//	p/probe                       never written; Probe looks it up
//
// Each part is percent-escaped: '%', '/', control characters (C0 and DEL)
// and every byte that is not part of valid UTF-8 become %XX (upper-case
// hex); every other byte, multi-byte UTF-8 included, stays as it is. So a
// part never contains '/', the kind and the number of parts are fixed, and
// decoding an account gives back exactly the tuple that was encoded:
// encodeAccount is injective (SECURITY.md E3, "alice/" + "x" versus
// "alice" + "/x"). The result is valid UTF-8 without NUL bytes, as D-Bus
// strings must be, and stays readable in secret-tool.

// Account kinds.
const (
	kindSecret    = 's'
	kindNameIndex = 'n'
	kindUserIndex = 'u'
	kindFileKey   = 'f'
	kindProbe     = 'p'
)

// partsOf returns how many parts an account of that kind has, or 0 for an
// unknown kind.
func partsOf(kind byte) int {
	switch kind {
	case kindSecret:
		return 3
	case kindNameIndex:
		return 2
	case kindUserIndex, kindFileKey, kindProbe:
		return 1
	}
	return 0
}

// encodeAccount builds the account of an item of that kind from its parts.
// It panics if the number of parts does not match the kind: that is a bug
// in this package, never a consequence of input.
func encodeAccount(kind byte, parts ...string) string {
	if n := partsOf(kind); n == 0 || n != len(parts) {
		panic("secrets: encodeAccount: wrong number of parts for kind " + string(rune(kind)))
	}
	var b strings.Builder
	n := 1
	for _, p := range parts {
		n += 1 + len(p)
	}
	b.Grow(n + n/4)
	b.WriteByte(kind)
	for _, p := range parts {
		b.WriteByte('/')
		escapePart(&b, p)
	}
	return b.String()
}

// secretAccount, nameIndexAccount and userIndexAccount name the items of a
// Keychain.
func secretAccount(k Key) string { return encodeAccount(kindSecret, k.Extension, k.User, k.Name) }
func nameIndexAccount(extension, user string) string {
	return encodeAccount(kindNameIndex, extension, user)
}
func userIndexAccount(user string) string { return encodeAccount(kindUserIndex, user) }

const upperHex = "0123456789ABCDEF"

// mustEscape reports whether the byte c, seen outside a multi-byte UTF-8
// sequence, is escaped.
func mustEscape(c byte) bool {
	return c == '%' || c == '/' || c < 0x20 || c == 0x7f
}

// escapePart writes s to b with '%', '/', control characters and invalid
// UTF-8 bytes percent-escaped.
func escapePart(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if mustEscape(c) {
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&0xf])
			} else {
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0xf])
			i++
			continue
		}
		b.WriteString(s[i : i+size])
		i += size
	}
}

var errBadAccount = errors.New("malformed keychain account")

// decodeAccount splits an account into its kind and unescaped parts. It
// accepts only the canonical form that encodeAccount produces, so
// encodeAccount(decodeAccount(a)) == a for every account it accepts.
func decodeAccount(a string) (kind byte, parts []string, err error) {
	if len(a) < 2 || a[1] != '/' {
		return 0, nil, errBadAccount
	}
	kind = a[0]
	n := partsOf(kind)
	if n == 0 {
		return 0, nil, errBadAccount
	}
	raw := strings.Split(a[2:], "/")
	if len(raw) != n {
		return 0, nil, errBadAccount
	}
	parts = make([]string, n)
	for i, r := range raw {
		p, err := unescapePart(r)
		if err != nil {
			return 0, nil, err
		}
		parts[i] = p
	}
	return kind, parts, nil
}

// unescapePart reverses escapePart and rejects anything escapePart would
// not have written: a lower-case or truncated escape, an escape of a byte
// that is left alone, or a raw byte that would have been escaped.
func unescapePart(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", errBadAccount
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", errBadAccount
			}
			d := hi<<4 | lo
			// Canonical: only bytes escapePart escapes may appear escaped.
			if d < utf8.RuneSelf && !mustEscape(d) {
				return "", errBadAccount
			}
			b.WriteByte(d)
			i += 3
		case c < utf8.RuneSelf:
			if mustEscape(c) {
				return "", errBadAccount
			}
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", errBadAccount
			}
			b.WriteString(s[i : i+size])
			i += size
		}
	}
	out := b.String()
	// An escaped byte ≥ 0x80 is canonical only where it does not belong to
	// valid UTF-8 after decoding; re-encoding catches "%C3%A9" (é escaped).
	var check strings.Builder
	escapePart(&check, out)
	if check.String() != s {
		return "", errBadAccount
	}
	return out, nil
}

// unhex decodes one upper-case hex digit.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
