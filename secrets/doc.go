// Package secrets stores agenthost's secrets: the tokens each user gives
// the extensions (for example their token for an MCP server) and the
// operator's shared credentials. The host owns the [Store]; extensions reach
// their user's secrets only through the host.
//
// # Keys and values
//
// A [Key] names one secret by extension, user and name. Operator (shared)
// credentials use User = [Operator], an ID no real user can have. Keys are
// validated by every backend alike (see [Key]); a bad one gives an error
// wrapping [ErrInvalid] that names the part.
//
// A [Value] holds a secret and redacts itself everywhere it could be
// printed or encoded: fmt, JSON, text encoders and slog all show
// "[redacted]". Only [Value.Reveal] returns the secret.
//
// # Backends
//
//   - [Keychain]: the operating system's keychain through zalando/go-keyring;
//     on Linux the freedesktop Secret Service (gnome-keyring, KeePassXC) on
//     the D-Bus session bus. The default where one is reachable.
//   - [File]: one file encrypted with AES-256-GCM, for headless servers; its
//     key lives in a 0600 key file or in the keychain.
//   - [Memory]: process memory, for tests and for embedding.
//
// All three pass the same conformance suite, package secretstest.
//
// # Choosing a backend
//
// The host probes the keychain once at startup and uses the encrypted file
// when the keychain is not reachable. It never falls back to plain text: if
// neither works it does not start, and says why.
//
//	kc, err := secrets.NewKeychain(nil)
//	if err == nil {
//		err = kc.Probe(ctx)
//	}
//	var store secrets.Store = kc
//	if err != nil {
//		logger.Info("OS keychain unavailable; using the encrypted file", "reason", err)
//		store, err = secrets.OpenFile(filepath.Join(dataDir, "secrets.enc"), nil)
//		if err != nil {
//			return fmt.Errorf("no secrets store: %w", err)
//		}
//	}
//	defer store.Close()
//
// On Linux, [Keychain.Probe] fails fast when DBUS_SESSION_BUS_ADDRESS is
// unset (a service, a container, an SSH session without a user bus): the
// package never lets D-Bus autolaunch a bus. It also fails when no Secret
// Service answers or the keyring is locked, each time with an error that
// says what to install or unlock.
//
// # Concurrency
//
// Every Store is safe for concurrent use by multiple goroutines, and every
// method takes a context and returns once it is done.
//
//   - Memory guards its maps with a mutex.
//   - Keychain reads run concurrently. Set, Delete and DeleteUser are
//     serialized within the Keychain, because each one also updates index
//     items (a keychain cannot list its items); they write the indexes before
//     a secret and remove a secret before its index entry, so DeleteUser
//     always finds everything. Each keychain call is bounded by
//     [KeychainOptions.Timeout]; a call given up on (go-keyring calls cannot
//     be cancelled) finishes in the background and holds the write lock
//     until it does, so it can never undo a later write. Two processes
//     writing one keychain service are not serialized against each other.
//   - File serializes writes with a mutex and, across processes, with a
//     flock on a lock file next to the store; reads take no file lock,
//     because every write replaces the file atomically.
//
// # Errors
//
// Errors wrap [ErrNotFound] (the backend answered: there is no such
// secret), [ErrUnavailable] (the backend did not answer or its data cannot
// be read) or [ErrInvalid] (a bad argument), or the caller's context error.
// They name the key, path or remedy, and never contain a secret value.
package secrets
