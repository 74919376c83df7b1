package mcpwire

import "bytes"

// The scanner: the top level of a JSON-RPC message (and of its params) is
// walked in place, its values kept as the bytes they are, nothing decoded
// below. Each function here takes valid JSON (the caller has checked it, or
// the bytes come from a check such as json.Valid) and reports false for
// what it does not take, so that the caller falls back to encoding/json.

// IsSpace reports JSON whitespace.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first byte of b at or after i that
// is not JSON whitespace (len(b) when none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// StringEnd returns the index just past the JSON string that starts at
// b[i] (a quote), or len(b) when it does not end.
func StringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++ // the escaped byte
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// ValueEnd returns where the JSON value starting at b[i] ends; b is valid
// JSON.
func ValueEnd(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			if j = StringEnd(b, j); depth == 0 {
				return j
			}
			j--
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j // the end of a literal or number inside the parent
			}
			if depth--; depth == 0 {
				return j + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	return len(b)
}

// ObjectFields calls fn with each key (raw, without its quotes) and raw
// value of b, one valid JSON object in valid UTF-8, in order. It reports
// false when b is not an object, a key holds an escape, or fn returns
// false.
func ObjectFields(b []byte, fn func(key, value []byte) bool) bool {
	i := SkipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return false
	}
	if i = SkipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) && b[i] == '"' {
		n := bytes.IndexByte(b[i+1:], '"')
		if n < 0 {
			return false
		}
		key := b[i+1 : i+1+n]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		if i = SkipSpace(b, i+n+2); i == len(b) || b[i] != ':' {
			return false
		}
		i = SkipSpace(b, i+1)
		end := ValueEnd(b, i)
		if !fn(key, b[i:end]) {
			return false
		}
		switch i = SkipSpace(b, end); {
		case i == len(b):
			return false
		case b[i] == '}':
			return true
		case b[i] == ',':
			i = SkipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}

// Once sets *dst to v, reporting false when it was set already (a key
// given twice): for ObjectFields' callbacks.
func Once(dst *[]byte, v []byte) bool {
	if *dst != nil {
		return false
	}
	*dst = v
	return true
}

// PlainString sets *dst to the JSON string v (nil: absent, left as is)
// when it is printable ASCII with no escape, reporting whether it was.
func PlainString(v []byte, dst *string) bool {
	if v == nil {
		return true
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return false
		}
	}
	*dst = string(v[1 : len(v)-1])
	return true
}
