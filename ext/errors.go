package ext

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. They survive the wire: a carrier maps them to gRPC codes
// and back in exactly one place ([toStatus] and [fromStatus]), so
// errors.Is works on either side.
var (
	ErrNotFound        = errors.New("not found")
	ErrPermission      = errors.New("permission denied")
	ErrUnavailable     = errors.New("unavailable")
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnimplemented   = errors.New("unimplemented")
	// ErrBusy is a shared resource of the host all in use (for
	// [Host.ConnectService]: every service process slot): try again when
	// one frees. The host calls [UserLifecycle.Activate] again for a user
	// refused so once one has. (gRPC's own ResourceExhausted, a message
	// over its size limit, arrives as ErrBusy too.)
	ErrBusy = errors.New("busy")
	// ErrCannotStart is a service process whose command could not be
	// started at all (not found, not executable): [Host.ConnectService]
	// says why.
	ErrCannotStart = errors.New("the command could not start")
)

// codeErrs is the one table that ties sentinels to gRPC codes.
var codeErrs = []struct {
	code codes.Code
	err  error
}{
	{codes.NotFound, ErrNotFound},
	{codes.PermissionDenied, ErrPermission},
	{codes.Unavailable, ErrUnavailable},
	{codes.InvalidArgument, ErrInvalidArgument},
	{codes.Unimplemented, ErrUnimplemented},
	{codes.ResourceExhausted, ErrBusy},
	{codes.FailedPrecondition, ErrCannotStart},
	{codes.Canceled, context.Canceled},
	{codes.DeadlineExceeded, context.DeadlineExceeded},
}

// toStatus converts an error into a gRPC status error for the wire.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinel(err) {
		// Already a status (e.g. from a nested call): pass it on.
		return err
	}
	for _, ce := range codeErrs {
		if errors.Is(err, ce.err) {
			return status.Error(ce.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

func isSentinel(err error) bool {
	for _, ce := range codeErrs {
		if errors.Is(err, ce.err) {
			return true
		}
	}
	return false
}

// fromStatus converts an error that came over the wire back into one that
// wraps the matching sentinel, keeping the message.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	for _, ce := range codeErrs {
		if st.Code() == ce.code {
			return &wireError{msg: msg, err: ce.err}
		}
	}
	return errors.New(msg)
}

// wireError keeps the remote message and wraps the local sentinel.
type wireError struct {
	msg string
	err error
}

func (e *wireError) Error() string { return e.msg }
func (e *wireError) Unwrap() error { return e.err }

// Errorf is fmt.Errorf for extension authors who want to return a sentinel
// with context, e.g. Errorf(ErrNotFound, "tool %q", name). The message reads
// "tool \"x\": not found".
func Errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}

// Mark returns err with its message unchanged, matching sentinel too
// (errors.Is(Mark(err, ErrNotFound), ErrNotFound) holds, and so does
// errors.Is for everything err matched); a nil err stays nil. Use it to
// give another package's error the contract's meaning: errors.Join would
// append the sentinel's text on a line of its own ("…\nnot found").
func Mark(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return &markedError{err: err, sentinel: sentinel}
}

type markedError struct{ err, sentinel error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.err, e.sentinel} }
