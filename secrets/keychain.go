package secrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zalando/go-keyring"
)

// Keychain defaults.
const (
	// DefaultKeychainService is the keychain service name agenthost uses
	// unless [KeychainOptions.Service] says otherwise.
	DefaultKeychainService = "agenthost"

	// DefaultKeychainTimeout bounds one keychain call unless
	// [KeychainOptions.Timeout] says otherwise.
	DefaultKeychainTimeout = 10 * time.Second
)

// maxKeychainCalls bounds the keychain calls in flight, those abandoned
// after a timeout included: go-keyring calls cannot be cancelled, so a hung
// Secret Service would otherwise pile up one goroutine per request.
const maxKeychainCalls = 16

// KeychainOptions configure [NewKeychain]. A nil *KeychainOptions, or the
// zero value, selects the defaults.
type KeychainOptions struct {
	// Service is the keychain service name that every item of this Store is
	// filed under (DefaultKeychainService when empty). Tests, and several
	// hosts sharing one desktop keychain, use distinct names. It follows the
	// rules of a Key part.
	Service string

	// Timeout bounds each call into the keychain (DefaultKeychainTimeout
	// when zero). go-keyring waits for an unlock prompt without any time
	// limit, so a locked desktop keyring would otherwise hang the caller. A
	// call that times out returns an error wrapping ErrUnavailable and
	// context.DeadlineExceeded, while the abandoned call finishes in the
	// background.
	Timeout time.Duration

	_ struct{}
}

// keyringAPI is the part of go-keyring that Keychain uses. Tests substitute
// a fake: go-keyring's own MockInit is not safe for concurrent use.
type keyringAPI interface {
	Set(service, account, secret string) error
	Get(service, account string) (string, error)
	Delete(service, account string) error
}

// osKeyring is the real keychain: the Secret Service over D-Bus on Linux
// and the BSDs, Keychain Services on macOS, the Credential Manager on
// Windows.
type osKeyring struct{}

func (osKeyring) Set(service, account, secret string) error {
	return keyring.Set(service, account, secret)
}

func (osKeyring) Get(service, account string) (string, error) {
	return keyring.Get(service, account)
}

func (osKeyring) Delete(service, account string) error {
	return keyring.Delete(service, account)
}

// Keychain is a Store backed by the operating system's keychain through
// zalando/go-keyring: on Linux the freedesktop Secret Service (for example
// gnome-keyring) on the D-Bus session bus.
//
// A keychain cannot list its items, so Keychain keeps, next to the secrets,
// an index item per (extension, user) with that pair's secret names and a
// user index with the extensions where a user has secrets; List and
// DeleteUser read them. Mutations (Set, Delete, DeleteUser) are serialized
// within the Keychain, so concurrent Sets never lose an index entry. They
// write the indexes before the secret and remove the secret before its index
// entry, so however a call ends the indexes list at least every stored
// secret: DeleteUser never leaves one behind. (After a crash or a timeout
// List may therefore name a secret that was never written; Get reports it as
// ErrNotFound.) A keychain call that times out
// cannot be cancelled; it finishes in the background, and the mutation it
// belongs to keeps the write lock until it has, so it never lands after a
// later mutation. Two processes that write the same service at the same
// time are not serialized against each other; the host is the only writer.
//
// Items are filed under the service name with a "user" attribute that
// encodes the key injectively: "s/<extension>/<user>/<name>" with '%', '/',
// control characters and invalid UTF-8 percent-escaped ("n/…" and "u/…" are
// the indexes), so `secret-tool search service agenthost` shows them
// readably.
//
// Size limits are the keychain's: the Secret Service took 1 MiB values in
// tests, while macOS and Windows keep only a few KiB per item and refuse
// more with an error wrapping ErrInvalid.
//
// On Linux and the BSDs Keychain never lets D-Bus autolaunch a session bus
// (which would leak a dbus-daemon per process): when DBUS_SESSION_BUS_ADDRESS
// is unset every call fails with ErrUnavailable without touching D-Bus.
type Keychain struct {
	service string
	timeout time.Duration
	kr      keyringAPI
	getenv  func(string) string
	goos    string

	// writing is a one-slot semaphore (a mutex that honours contexts)
	// serializing the index updates of Set, Delete and DeleteUser.
	writing chan struct{}
	// calls bounds the keychain calls in flight, see maxKeychainCalls.
	calls  chan struct{}
	closed atomic.Bool
}

// NewKeychain returns a Store backed by the OS keychain. It validates opts
// but does not contact the keychain; call [Keychain.Probe] to learn whether
// the keychain is reachable.
func NewKeychain(opts *KeychainOptions) (*Keychain, error) {
	return newKeychain(opts, osKeyring{}, os.Getenv, runtime.GOOS)
}

// newKeychain is NewKeychain with its environment made explicit for tests.
func newKeychain(opts *KeychainOptions, kr keyringAPI, getenv func(string) string, goos string) (*Keychain, error) {
	var o KeychainOptions
	if opts != nil {
		o.Service, o.Timeout = opts.Service, opts.Timeout
	}
	if o.Service == "" {
		o.Service = DefaultKeychainService
	}
	if err := validatePart("keychain service", o.Service, false); err != nil {
		return nil, err
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultKeychainTimeout
	case o.Timeout < 0:
		return nil, fmt.Errorf("%w: keychain timeout %v is negative", ErrInvalid, o.Timeout)
	}
	return &Keychain{
		service: o.Service,
		timeout: o.Timeout,
		kr:      kr,
		getenv:  getenv,
		goos:    goos,
		writing: make(chan struct{}, 1),
		calls:   make(chan struct{}, maxKeychainCalls),
	}, nil
}

// Service returns the keychain service name this Keychain files its items
// under.
func (k *Keychain) Service() string { return k.service }

// Probe reports whether the keychain is reachable and unlocked, by looking up
// an item that is never written. It returns nil when the keychain answered,
// and otherwise an error wrapping ErrUnavailable whose message says what to
// install or unlock. The host calls Probe once at startup to choose between
// the Keychain and the encrypted [File] store.
func (k *Keychain) Probe(ctx context.Context) error {
	_, err := k.get(ctx, nil, encodeAccount(kindProbe, "probe"))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return wrapOp("probing the keychain", err)
	}
	return nil
}

// Get implements [Store.Get].
func (k *Keychain) Get(ctx context.Context, key Key) (Value, error) {
	if err := key.Validate(); err != nil {
		return Value{}, err
	}
	s, err := k.get(ctx, nil, secretAccount(key))
	if err != nil {
		return Value{}, wrapOp("getting "+key.String(), err)
	}
	return Value{s: s}, nil
}

// Set implements [Store.Set].
func (k *Keychain) Set(ctx context.Context, key Key, v Value) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if err := validateValue(v); err != nil {
		return err
	}
	op := "setting " + key.String()
	w, err := k.lock(ctx)
	if err != nil {
		return wrapOp(op, err)
	}
	defer k.unlock(w)

	// Indexes first: whatever happens next, they list the secret.
	if _, err := k.addToList(ctx, w, userIndexAccount(key.User), key.Extension); err != nil {
		return wrapOp(op, err)
	}
	added, err := k.addToList(ctx, w, nameIndexAccount(key.Extension, key.User), key.Name)
	if err != nil {
		return wrapOp(op, err)
	}
	err = k.set(ctx, w, secretAccount(key), v.s)
	if err == nil {
		return nil
	}
	// The secret was definitely not written: take back the index entry
	// this call added, so List does not show a secret that is not there. If
	// the call was abandoned it may still land, and the entry must stay.
	if added && !isAbandoned(err) {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.timeout)
		_, _ = k.removeFromList(cleanup, w, nameIndexAccount(key.Extension, key.User), key.Name)
		cancel()
	}
	return wrapOp(op, scrub(err, v.s))
}

// Delete implements [Store.Delete].
func (k *Keychain) Delete(ctx context.Context, key Key) error {
	if err := key.Validate(); err != nil {
		return err
	}
	op := "deleting " + key.String()
	w, err := k.lock(ctx)
	if err != nil {
		return wrapOp(op, err)
	}
	defer k.unlock(w)

	// The secret first, then its index entries.
	if err := k.del(ctx, w, secretAccount(key)); err != nil {
		return wrapOp(op, err)
	}
	left, err := k.removeFromList(ctx, w, nameIndexAccount(key.Extension, key.User), key.Name)
	if err != nil {
		return wrapOp(op, err)
	}
	if left == 0 {
		if _, err := k.removeFromList(ctx, w, userIndexAccount(key.User), key.Extension); err != nil {
			return wrapOp(op, err)
		}
	}
	return nil
}

// List implements [Store.List].
func (k *Keychain) List(ctx context.Context, extension, user string) ([]string, error) {
	if err := validateListArgs(extension, user); err != nil {
		return nil, err
	}
	names, err := k.readList(ctx, nil, nameIndexAccount(extension, user))
	if err != nil {
		return nil, wrapOp("listing the secrets of "+describeScope(extension, user), err)
	}
	return names, nil
}

// DeleteUser implements [Store.DeleteUser].
func (k *Keychain) DeleteUser(ctx context.Context, user string) error {
	if err := validatePart("key user", user, true); err != nil {
		return err
	}
	op := "deleting the secrets of user " + describeUser(user)
	w, err := k.lock(ctx)
	if err != nil {
		return wrapOp(op, err)
	}
	defer k.unlock(w)

	exts, err := k.readList(ctx, w, userIndexAccount(user))
	if err != nil {
		return wrapOp(op, err)
	}
	for _, ext := range exts {
		idx := nameIndexAccount(ext, user)
		names, err := k.readList(ctx, w, idx)
		if err != nil {
			return wrapOp(op, err)
		}
		for _, name := range names {
			if err := k.del(ctx, w, secretAccount(Key{Extension: ext, User: user, Name: name})); err != nil {
				return wrapOp(op, err)
			}
		}
		if err := k.del(ctx, w, idx); err != nil {
			return wrapOp(op, err)
		}
	}
	if err := k.del(ctx, w, userIndexAccount(user)); err != nil {
		return wrapOp(op, err)
	}
	return nil
}

// Close implements [Store.Close]. The shared D-Bus connection that
// go-keyring uses stays open: it belongs to the process, not to the Store.
func (k *Keychain) Close() error {
	k.closed.Store(true)
	return nil
}

// writeOp tracks the keychain calls of one mutation (Set, Delete,
// DeleteUser), so that the write semaphore is released only when every one
// of them has returned, abandoned ones included. Otherwise a call abandoned
// after a timeout could land after the next mutation and undo its work, for
// example re-create a secret that DeleteUser just removed from the indexes.
type writeOp struct {
	wg      sync.WaitGroup
	pending atomic.Int32
}

// lock takes the write semaphore, or gives up when ctx ends or the
// Keychain's timeout passes (an earlier mutation may still wait for a hung
// keychain).
func (k *Keychain) lock(ctx context.Context) (*writeOp, error) {
	timer := time.NewTimer(k.timeout)
	defer timer.Stop()
	select {
	case k.writing <- struct{}{}:
		return &writeOp{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return nil, fmt.Errorf("%w: an earlier keychain write has waited for the keychain for more than %v: "+
			"unlock the keyring, or use the encrypted file store (%w)", ErrUnavailable, k.timeout, context.DeadlineExceeded)
	}
}

// unlock releases the write semaphore once every call of w has returned.
func (k *Keychain) unlock(w *writeOp) {
	if w.pending.Load() == 0 {
		<-k.writing
		return
	}
	go func() {
		w.wg.Wait()
		<-k.writing
	}()
}

// get reads one item. A missing item gives an error wrapping ErrNotFound.
func (k *Keychain) get(ctx context.Context, w *writeOp, account string) (string, error) {
	s, err := callKeyring(ctx, k, w, func() (string, error) { return k.kr.Get(k.service, account) })
	return s, k.mapErr(err)
}

// set writes one item.
func (k *Keychain) set(ctx context.Context, w *writeOp, account, secret string) error {
	_, err := callKeyring(ctx, k, w, func() (struct{}, error) { return struct{}{}, k.kr.Set(k.service, account, secret) })
	return k.mapErr(err)
}

// del deletes one item; a missing item is not an error.
func (k *Keychain) del(ctx context.Context, w *writeOp, account string) error {
	_, err := callKeyring(ctx, k, w, func() (struct{}, error) { return struct{}{}, k.kr.Delete(k.service, account) })
	if err = k.mapErr(err); errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// readList reads an index item: a sorted JSON array of strings. A missing
// item is an empty list.
func (k *Keychain) readList(ctx context.Context, w *writeOp, account string) ([]string, error) {
	s, err := k.get(ctx, w, account)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return nil, fmt.Errorf("%w: the keychain index item %q of service %q is corrupt; remove it (secret-tool clear service %s username %s) and set the secrets again",
			ErrUnavailable, account, k.service, k.service, account)
	}
	slices.Sort(list)
	return slices.Compact(list), nil
}

// writeList writes an index item, or deletes it when the list is empty.
func (k *Keychain) writeList(ctx context.Context, w *writeOp, account string, list []string) error {
	if len(list) == 0 {
		return k.del(ctx, w, account)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return fmt.Errorf("encoding the keychain index item %q: %w", account, err)
	}
	return k.set(ctx, w, account, string(b))
}

// addToList adds s to the index item and reports whether it was absent.
func (k *Keychain) addToList(ctx context.Context, w *writeOp, account, s string) (bool, error) {
	list, err := k.readList(ctx, w, account)
	if err != nil {
		return false, err
	}
	i, found := slices.BinarySearch(list, s)
	if found {
		return false, nil
	}
	return true, k.writeList(ctx, w, account, slices.Insert(list, i, s))
}

// removeFromList removes s from the index item and returns how many
// entries are left.
func (k *Keychain) removeFromList(ctx context.Context, w *writeOp, account, s string) (int, error) {
	list, err := k.readList(ctx, w, account)
	if err != nil {
		return 0, err
	}
	i, found := slices.BinarySearch(list, s)
	if !found {
		return len(list), nil
	}
	list = slices.Delete(list, i, i+1)
	return len(list), k.writeList(ctx, w, account, list)
}

// fileKey reads the encryption key of the store file at path (absolute).
// A missing key gives an error wrapping ErrNotFound.
func (k *Keychain) fileKey(ctx context.Context, path string) ([]byte, error) {
	s, err := k.get(ctx, nil, encodeAccount(kindFileKey, path))
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) != fileKeySize {
		return nil, fmt.Errorf("%w: the keychain item holding the key of %s is malformed", ErrUnavailable, path)
	}
	return key, nil
}

// setFileKey stores the encryption key of the store file at path.
func (k *Keychain) setFileKey(ctx context.Context, path string, key []byte) error {
	err := k.set(ctx, nil, encodeAccount(kindFileKey, path), base64.StdEncoding.EncodeToString(key))
	return scrub(err, base64.StdEncoding.EncodeToString(key))
}

// busCheck refuses to let godbus autolaunch a session bus: with no
// DBUS_SESSION_BUS_ADDRESS it would run dbus-launch and leak a dbus-daemon
// and a gnome-keyring-daemon per process (LIBRARIES.md §0 item 9).
func (k *Keychain) busCheck() error {
	switch k.goos {
	case "darwin", "windows", "ios", "android", "plan9", "js", "wasip1":
		return nil
	}
	addr := k.getenv("DBUS_SESSION_BUS_ADDRESS")
	if addr == "" {
		return fmt.Errorf("%w: DBUS_SESSION_BUS_ADDRESS is not set, so there is no D-Bus session bus to reach the Secret Service "+
			"(agenthost never autolaunches one): run the host in a desktop session, or under dbus-run-session with "+
			"gnome-keyring-daemon --unlock, or use the encrypted file store", ErrUnavailable)
	}
	for a := range strings.SplitSeq(addr, ";") {
		if strings.HasPrefix(a, "autolaunch:") {
			return fmt.Errorf("%w: DBUS_SESSION_BUS_ADDRESS asks for an autolaunched bus, which agenthost never starts: "+
				"point it at a running session bus, or use the encrypted file store", ErrUnavailable)
		}
	}
	return nil
}

// abandonedError marks a keychain call that was given up on (timeout or
// the caller's context): its outcome is unknown and it may still complete.
type abandonedError struct{ err error }

func (e *abandonedError) Error() string { return e.err.Error() }
func (e *abandonedError) Unwrap() error { return e.err }

func isAbandoned(err error) bool {
	var a *abandonedError
	return errors.As(err, &a)
}

// callResult carries the outcome of a keychain call to its waiter.
type callResult[T any] struct {
	v   T
	err error
}

// callKeyring runs f, one go-keyring call, on its own goroutine so that it
// can be bounded by the Keychain's timeout and by ctx. go-keyring calls
// cannot be cancelled: a call given up on keeps its goroutine (and its slot
// in k.calls, and the write semaphore when w is set) until it returns. A panic in f (go-keyring type-asserts what
// the Secret Service sends) becomes an error.
func callKeyring[T any](ctx context.Context, k *Keychain, w *writeOp, f func() (T, error)) (T, error) {
	var zero T
	if k.closed.Load() {
		return zero, errClosed
	}
	if err := k.busCheck(); err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	timer := time.NewTimer(k.timeout)
	defer timer.Stop()
	select {
	case k.calls <- struct{}{}:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-timer.C:
		return zero, k.timeoutError()
	}
	done := make(chan callResult[T], 1)
	if w != nil {
		w.wg.Add(1)
		w.pending.Add(1)
	}
	go func() {
		defer func() {
			if w != nil {
				w.pending.Add(-1)
				w.wg.Done()
			}
			<-k.calls
		}()
		defer func() {
			if p := recover(); p != nil {
				detail := ""
				if re, ok := p.(runtime.Error); ok {
					detail = ": " + re.Error()
				}
				done <- callResult[T]{err: fmt.Errorf("%w: the keychain library panicked on an unexpected answer from the keychain%s", ErrUnavailable, detail)}
			}
		}()
		v, err := f()
		done <- callResult[T]{v: v, err: err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, &abandonedError{fmt.Errorf("the keychain did not answer before the call was given up: %w", ctx.Err())}
	case <-timer.C:
		return zero, k.timeoutError()
	}
}

func (k *Keychain) timeoutError() error {
	return &abandonedError{fmt.Errorf("%w: the keychain did not answer within %v; a locked keyring may be waiting for an unlock "+
		"prompt that cannot be shown: unlock it, or use the encrypted file store (%w)", ErrUnavailable, k.timeout, context.DeadlineExceeded)}
}

// mapErr translates a go-keyring or D-Bus error into this package's
// sentinels, with a message that says what to do.
func (k *Keychain) mapErr(err error) error {
	if err == nil || isAbandoned(err) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch {
	case errors.Is(err, keyring.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, keyring.ErrSetDataTooBig):
		return fmt.Errorf("%w: the keychain refused the value as too big", ErrInvalid)
	case errors.Is(err, keyring.ErrUnsupportedPlatform):
		return fmt.Errorf("%w: go-keyring supports no keychain on %s: use the encrypted file store", ErrUnavailable, k.goos)
	}
	switch dbusErrorName(err) {
	case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
		"org.freedesktop.DBus.Error.Spawn.ServiceNotFound", "org.freedesktop.DBus.Error.Spawn.ChildExited":
		return fmt.Errorf("%w: no Secret Service on the session bus: install and start gnome-keyring "+
			"(or another Secret Service provider such as KeePassXC), or use the encrypted file store: %w", ErrUnavailable, err)
	case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
		return fmt.Errorf("%w: the Secret Service did not reply: %w", ErrUnavailable, err)
	case "":
	default:
		return fmt.Errorf("%w: the Secret Service failed: %w", ErrUnavailable, err)
	}
	msg := err.Error()
	var opErr *net.OpError
	var errno syscall.Errno
	switch {
	case strings.Contains(msg, "failed to unlock"):
		return fmt.Errorf("%w: the keyring is locked or has no default collection: unlock it (headless: "+
			"printf %%s \"$PASSWORD\" | gnome-keyring-daemon --unlock --components=secrets), or use the encrypted file store: %w", ErrUnavailable, err)
	case errors.As(err, &opErr), errors.As(err, &errno), strings.HasPrefix(msg, "dbus: "):
		return fmt.Errorf("%w: cannot reach the D-Bus session bus at DBUS_SESSION_BUS_ADDRESS=%q: start a session bus "+
			"(dbus-run-session) with gnome-keyring, or use the encrypted file store: %w", ErrUnavailable, k.getenv("DBUS_SESSION_BUS_ADDRESS"), err)
	}
	return fmt.Errorf("%w: the keychain failed: %w", ErrUnavailable, err)
}

// scrub withholds an error message that would repeat the secret: no backend
// is known to do that, and this keeps it so. The sentinels are preserved.
func scrub(err error, secret string) error {
	if err == nil || len(secret) < 4 || !strings.Contains(err.Error(), secret) {
		return err
	}
	switch {
	case errors.Is(err, ErrInvalid):
		return fmt.Errorf("%w: the keychain refused the value (its message repeated the secret and was withheld)", ErrInvalid)
	case errors.Is(err, ErrNotFound):
		return ErrNotFound
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("the keychain call was given up (message withheld): %w", context.Canceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: the keychain call timed out (message withheld): %w", ErrUnavailable, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: the keychain failed (its message repeated the secret and was withheld)", ErrUnavailable)
}
