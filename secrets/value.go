package secrets

import (
	"fmt"
	"io"
	"log/slog"
)

// redacted is what a [Value] prints in every format.
const redacted = "[redacted]"

// Value is a secret that redacts itself. String, GoString, every fmt verb
// (%v, %+v, %#v, %s, %q, %x, ...), MarshalJSON, MarshalText and slog
// (LogValue) all print "[redacted]". Only [Value.Reveal] returns the secret,
// so the secret can only leave its Value on purpose.
//
// The zero Value is an empty secret. Values are immutable and safe to copy
// and to share between goroutines.
type Value struct {
	s string
}

// NewValue wraps the secret s in a Value.
func NewValue(s string) Value { return Value{s: s} }

// Reveal returns the secret in plain text. Call it at the last moment, where
// the secret is handed to the system that needs it (an environment variable,
// an Authorization header), and never log what it returns.
func (v Value) Reveal() string { return v.s }

// Len returns the length of the secret in bytes, which is safe to log.
func (v Value) Len() int { return len(v.s) }

// String returns "[redacted]".
func (v Value) String() string { return redacted }

// GoString returns "[redacted]", so %#v does not reveal the secret either.
func (v Value) GoString() string { return redacted }

// Format implements [fmt.Formatter]: every verb and flag prints "[redacted]".
func (v Value) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON returns the JSON string "[redacted]".
func (v Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]", so encoders that use
// [encoding.TextMarshaler] (map keys, YAML, TOML) do not reveal the secret.
func (v Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue implements [slog.LogValuer]: slog handlers log "[redacted]".
func (v Value) LogValue() slog.Value { return slog.StringValue(redacted) }
