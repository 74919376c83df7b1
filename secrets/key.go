package secrets

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Limits on keys and values, the same for every backend.
const (
	// MaxPartSize is the largest Extension, User or Name of a [Key], in bytes.
	MaxPartSize = 256

	// MaxValueSize is the largest secret value, in bytes (1 MiB).
	MaxValueSize = 1 << 20
)

// Operator is the reserved user ID under which operator (shared)
// credentials are stored, for example the credential of a shared MCP server
// that the operator lends to a list of users.
//
// No real user can have this ID: it starts with a control character, and
// every other user ID that holds a control character is rejected with
// [ErrInvalid]. So a user can never read or overwrite an operator
// credential by choosing a clever user name, and the empty user ID (an
// unidentified caller) never falls back to it.
const Operator = "\x01operator"

// Key addresses one secret: which extension owns it, which user it belongs
// to, and its name within that extension and user (for example "token:github").
//
// Each part must be non-empty, valid UTF-8, at most [MaxPartSize] bytes and
// free of control characters (NUL included). The only exception is
// User == [Operator]. Two keys address the same secret exactly when all three
// parts are equal.
type Key struct {
	Extension string
	User      string
	Name      string
}

// String describes the key for error messages and logs, quoting each part.
// A key holds no secret, so printing it is safe.
func (k Key) String() string {
	user := strconv.Quote(k.User)
	if k.User == Operator {
		user = "(operator)"
	}
	return "secret " + strconv.Quote(k.Name) + " of user " + user + " in extension " + strconv.Quote(k.Extension)
}

// Validate reports whether k is a well-formed key. The error wraps
// [ErrInvalid] and names the offending part.
func (k Key) Validate() error {
	if err := validatePart("key extension", k.Extension, false); err != nil {
		return err
	}
	if err := validatePart("key user", k.User, true); err != nil {
		return err
	}
	return validatePart("key name", k.Name, false)
}

// validatePart checks one key part (or another name with the same rules);
// label names it in the error, for example "key user". The value itself never appears in the
// error: a part is not secret, but it may be long or hold bytes that would
// garble a log line; the byte offset is enough to find the problem.
func validatePart(label, s string, isUser bool) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, label)
	}
	if len(s) > MaxPartSize {
		return fmt.Errorf("%w: %s is %d bytes long, at most %d are allowed", ErrInvalid, label, len(s), MaxPartSize)
	}
	if isUser && s == Operator {
		return nil
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("%w: %s is not valid UTF-8 (byte %d)", ErrInvalid, label, i)
		case r == 0:
			return fmt.Errorf("%w: %s contains a NUL byte (byte %d)", ErrInvalid, label, i)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("%w: %s contains a control character (byte %d)", ErrInvalid, label, i)
		}
		i += size
	}
	return nil
}

// validateValue checks a value's size. The error never includes the value.
func validateValue(v Value) error {
	if n := len(v.s); n > MaxValueSize {
		return fmt.Errorf("%w: value is %d bytes long, at most %d are allowed", ErrInvalid, n, MaxValueSize)
	}
	return nil
}

// validateListArgs checks the arguments of List.
func validateListArgs(extension, user string) error {
	if err := validatePart("key extension", extension, false); err != nil {
		return err
	}
	return validatePart("key user", user, true)
}

// describeScope names an (extension, user) pair for error messages.
func describeScope(extension, user string) string {
	u := strconv.Quote(user)
	if user == Operator {
		u = "(operator)"
	}
	return "user " + u + " in extension " + strconv.Quote(extension)
}

// describeUser names a user for error messages.
func describeUser(user string) string {
	if user == Operator {
		return "(operator)"
	}
	return strconv.Quote(user)
}
