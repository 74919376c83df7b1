package secrets

import "errors"

// Sentinel errors. Every error a Store returns for one of these conditions
// wraps the matching sentinel, so callers test with [errors.Is]; the message
// around it names the key, the path or the remedy, and never a secret value.
var (
	// ErrNotFound reports that no secret is stored under the key. It is
	// distinct from ErrUnavailable: the backend answered, and the answer was
	// "absent".
	ErrNotFound = errors.New("secrets: not found")

	// ErrUnavailable reports that the backend could not be reached or could
	// not answer: no Secret Service on the session bus, a locked keyring, a
	// timeout, an unreadable or corrupt store file, or a closed Store.
	ErrUnavailable = errors.New("secrets: unavailable")

	// ErrInvalid reports a malformed argument: a key part that is empty, too
	// long, not UTF-8 or holds a control character, a value over
	// [MaxValueSize], or inconsistent options. The message names the part.
	ErrInvalid = errors.New("secrets: invalid argument")
)
