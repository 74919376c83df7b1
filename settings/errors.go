package settings

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrInvalid marks bad input: a form descriptor, values that do not fit
	// their form, or a value a [Store] refuses (not a JSON object). Every
	// [*FieldError] and [FieldErrors] matches it too.
	ErrInvalid = errors.New("invalid settings")
	// ErrClosed is returned by a [Store] used after Close.
	ErrClosed = errors.New("settings store closed")
)

// FieldError is one problem with one field's value, for a UI to show next
// to that field. It matches [ErrInvalid] under errors.Is.
type FieldError struct {
	// Field is the dotted path of the field in the section's values, e.g.
	// "servers" or "advanced.retries"; array elements read "list[2]".
	// Empty means the values as a whole.
	Field string
	// Msg says what is wrong, in lowercase, without the field name.
	Msg string
}

// Error returns "field: msg", or msg when Field is empty.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is reports whether target is [ErrInvalid].
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// FieldErrors is every problem [ValidateValues] found, sorted by field.
// Retrieve it with errors.As; errors.As with a [*FieldError] target finds
// the first one.
type FieldErrors []*FieldError

// Error joins the problems with "; ".
func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the individual errors.
func (es FieldErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// invalidError is a problem with a form or a store argument; it matches
// ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// invalidf returns an error matching ErrInvalid. It formats with %v, not
// %w: the causes it is given are decoding errors with nothing to match.
func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
