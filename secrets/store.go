package secrets

import (
	"context"
	"fmt"
)

// Store keeps secrets per extension and per user.
//
// All methods are safe for concurrent use by multiple goroutines. Every
// method takes a context and returns promptly once it is done; an error
// caused by the caller's context wraps ctx.Err(). No error ever contains a
// secret value. Keys and (extension, user) arguments are validated as
// described at [Key]; a malformed one gives an error wrapping [ErrInvalid]
// that names the part, before the backend is touched.
type Store interface {
	// Get returns the secret stored under k, or an error wrapping
	// ErrNotFound when there is none.
	Get(ctx context.Context, k Key) (Value, error)

	// Set stores v under k, replacing any previous value. v may be empty and
	// holds at most MaxValueSize bytes of any content.
	Set(ctx context.Context, k Key, v Value) error

	// Delete removes the secret stored under k. Deleting a missing secret is
	// not an error.
	Delete(ctx context.Context, k Key) error

	// List returns the names of the secrets of user in extension, sorted,
	// and an empty list (not an error) when there are none. It never returns
	// values.
	List(ctx context.Context, extension, user string) ([]string, error)

	// DeleteUser removes every secret of user, in every extension. Other
	// users' secrets are untouched. A user without secrets is not an error.
	DeleteUser(ctx context.Context, user string) error

	// Close releases the Store's resources. Close may be called more than
	// once and concurrently; later calls return nil. Other methods called
	// after Close return an error wrapping ErrUnavailable.
	Close() error
}

// Compile-time checks that every backend implements Store.
var (
	_ Store = (*Memory)(nil)
	_ Store = (*Keychain)(nil)
	_ Store = (*File)(nil)
)

// errClosed is returned by the methods of a closed Store.
var errClosed = fmt.Errorf("%w: the secret store is closed", ErrUnavailable)

// ctxErr wraps the context's error, if any, with the operation's context.
func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// wrapOp prefixes err with the operation that failed.
func wrapOp(op string, err error) error {
	return fmt.Errorf("%s: %w", op, err)
}
