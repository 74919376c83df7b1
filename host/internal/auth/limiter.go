package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/agenthost/agenthost/host/internal/guard"
)

// ErrLockedOut is matched (errors.Is) by a [*LockoutError].
var ErrLockedOut = errors.New("too many failed attempts")

// LockoutError says that failed attempts are refused for now: those from
// an address, or those with one credential, and until when.
type LockoutError struct {
	// Addr is the locked-out address key; empty when the credential is
	// what is locked out.
	Addr string
	// Credential is set when the presented credential is locked out
	// (failed too often, from wherever).
	Credential bool
	// Until is when the lockout ends.
	Until time.Time
	// RetryAfter is how long from now that is, rounded up to a second.
	RetryAfter time.Duration
}

// Error says what happened and when to try again, without the address or
// the credential.
func (e *LockoutError) Error() string {
	return fmt.Sprintf("too many failed attempts: try again in %s", e.RetryAfter)
}

// Is reports whether target is [ErrLockedOut].
func (e *LockoutError) Is(target error) bool { return target == ErrLockedOut }

// RetryAfterSeconds is the value of the Retry-After header of the 429.
func (e *LockoutError) RetryAfterSeconds() int { return int(e.RetryAfter / time.Second) }

// LimiterOptions configures [NewLimiter]. A nil *LimiterOptions means the
// defaults; so does every zero field.
type LimiterOptions struct {
	// MaxFailures is how many failures within Window lock an address, or a
	// credential, out (default 5).
	MaxFailures int
	// Window is the span in which failures are counted (default 15 min).
	Window time.Duration
	// Lockout is how long a lockout lasts (default: Window).
	Lockout time.Duration
	// MaxTracked bounds the addresses, and the credentials, the limiter
	// remembers (default 65536 each); see [Limiter].
	MaxTracked int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger hears of each lockout (default: discard).
	Logger *slog.Logger
	// Refusals rate-limits those lines (nil: every one is logged).
	Refusals *guard.RefusalLog
	_        struct{}
}

// Limiter throttles failed attempts. It counts them per client address
// key ([guard.TrustedProxies.Key]) and per presented credential (by a
// keyed hash that only this Limiter can compute; the credential itself is
// never kept):
// MaxFailures failures within Window lock the address, or the credential,
// out for Lockout; then it starts afresh. A success resets nothing: an
// attacker holding a valid token of his own could otherwise clear his
// count between guesses.
//
// A Limiter never stops a valid credential: callers check the credential
// first and call [Limiter.Fail] only when it is invalid (see the package
// doc). It keeps everything in memory, sweeps stale entries as it goes,
// and starts no goroutine. When MaxTracked entries are in use and none is
// stale, a new address or credential is not tracked (its failures are
// answered, not throttled) rather than evicting one that is locked out. It
// is safe for concurrent use; the zero value is not usable, call
// [NewLimiter].
type Limiter struct {
	max        int
	window     time.Duration
	lockout    time.Duration
	maxTracked int
	now        func() time.Time
	logger     *slog.Logger
	refusals   *guard.RefusalLog
	key        []byte // HMAC key of credential fingerprints

	mu        sync.Mutex
	addrs     map[string]*failState
	creds     map[[sha256.Size]byte]*failState
	lastSweep time.Time
}

type failState struct {
	fails       []time.Time // within the window, oldest first
	lockedUntil time.Time
}

// sweepAbove is the number of tracked entries above which Fail sweeps
// stale ones (at most once per minute, or at once when MaxTracked is
// reached).
const sweepAbove = 1024

// NewLimiter returns a Limiter.
func NewLimiter(opts *LimiterOptions) *Limiter {
	var o LimiterOptions
	if opts != nil {
		o = *opts
	}
	l := &Limiter{max: o.MaxFailures, window: orDefault(o.Window, 15*time.Minute), maxTracked: o.MaxTracked,
		now: o.Now, logger: o.Logger, refusals: o.Refusals,
		addrs: map[string]*failState{}, creds: map[[sha256.Size]byte]*failState{}}
	if l.max <= 0 {
		l.max = 5
	}
	if l.maxTracked <= 0 {
		l.maxTracked = 1 << 16
	}
	l.lockout = orDefault(o.Lockout, l.window)
	if l.now == nil {
		l.now = time.Now
	}
	if l.logger == nil {
		l.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l.key = make([]byte, 32)
	_, _ = rand.Read(l.key)
	return l
}

// Fail records a failed attempt from the address key addr with the
// credential presented (a token, a login code; "" when the request had
// none). Call it only after the credential was checked and found invalid.
// It returns a [*LockoutError] when the address or the credential is
// locked out, already or by this failure (answer 429 with its
// Retry-After), else nil (answer 401). A failure from an address already
// locked out is not recorded against the credential: the address's
// lockout answers it, and memory stays bounded by the addresses.
func (l *Limiter) Fail(addr, credential string) error {
	fp := l.fingerprint(credential)
	l.mu.Lock()
	now := l.now()
	l.sweep(now, time.Minute)
	return l.fail(addr, credential, entry(l, l.addrs, addr, now), fp, now)
}

// fail records a failure against a (addr's state; nil when untracked)
// and the credential fp. l.mu is held; fail releases it.
func (l *Limiter) fail(addr, credential string, a *failState, fp [sha256.Size]byte, now time.Time) error {
	if a != nil && now.Before(a.lockedUntil) {
		l.mu.Unlock()
		return l.lockedErr(addr, false, a.lockedUntil, now)
	}
	c := entry(l, l.creds, fp, now)
	var lockedAddr, lockedCred bool
	if a != nil {
		lockedAddr = l.record(a, now)
	}
	if c != nil && !now.Before(c.lockedUntil) {
		lockedCred = l.record(c, now)
	}
	var err error
	switch {
	case a != nil && now.Before(a.lockedUntil):
		err = l.lockedErr(addr, false, a.lockedUntil, now)
	case c != nil && now.Before(c.lockedUntil):
		err = l.lockedErr("", true, c.lockedUntil, now)
	}
	until := now.Add(l.lockout).UTC().Format(time.RFC3339)
	l.mu.Unlock()
	if lockedAddr {
		l.refusals.Refused(l.logger, "address locked out after failed attempts", "addr", addr,
			"failures", l.max, "window", l.window.String(), "until", until)
	}
	if lockedCred {
		l.refusals.Refused(l.logger, "credential locked out after failed attempts", "credential_sha256", Fingerprint(credential),
			"failures", l.max, "window", l.window.String(), "until", until)
	}
	return err
}

// Attempt counts a guess before it is checked, as a failure whatever
// the check finds: for a credential that can be guessed and is slow to
// check (a passphrase's bcrypt hash), where checking first and counting
// the failure after would let a burst of concurrent guesses all pass a
// lock that none of them has recorded yet. So at most MaxFailures
// guesses are checked per address, and per credential, within a Window,
// however many arrive at once; a right one counts too (it clears
// nothing, as with [Limiter.Fail]).
//
// refused, a [*LockoutError], means the address or the credential was
// locked out already: do not check the guess (answer 429). Otherwise
// check it; locked, when not nil, is the lockout this very attempt began
// (it was the last one allowed): a wrong guess is then answered 429 with
// it, a right one is accepted.
//
// Unlike [Limiter.Fail] this refuses to check a credential from a
// locked-out address: use it only for guessable credentials (see the
// package doc), never for tokens.
func (l *Limiter) Attempt(addr, credential string) (locked, refused error) {
	fp := l.fingerprint(credential)
	l.mu.Lock()
	now := l.now()
	l.sweep(now, time.Minute)
	a := entry(l, l.addrs, addr, now)
	c := entry(l, l.creds, fp, now)
	for _, st := range []*failState{a, c} {
		if st != nil && now.Before(st.lockedUntil) {
			l.mu.Unlock()
			return nil, l.lockedErr(addr, st == c, st.lockedUntil, now)
		}
	}
	return l.fail(addr, credential, a, fp, now), nil
}

// record adds a failure at now to st and reports whether that locked it
// out; l.mu is held.
func (l *Limiter) record(st *failState, now time.Time) bool {
	st.fails = append(pruned(st.fails, now.Add(-l.window)), now)
	if len(st.fails) < l.max {
		return false
	}
	st.fails, st.lockedUntil = nil, now.Add(l.lockout)
	return true
}

// entry returns m's state of key, creating it unless MaxTracked entries
// are in use even after a sweep (then nil); l.mu is held.
func entry[K comparable](l *Limiter, m map[K]*failState, key K, now time.Time) *failState {
	if st := m[key]; st != nil {
		return st
	}
	if len(m) >= l.maxTracked {
		l.sweep(now, time.Second)
		if len(m) >= l.maxTracked {
			return nil
		}
	}
	st := &failState{}
	m[key] = st
	return st
}

// Tracked returns how many addresses and credentials the limiter
// remembers (for tests and metrics).
func (l *Limiter) Tracked() (addrs, credentials int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.addrs), len(l.creds)
}

// fingerprint is the keyed hash a credential is counted by.
func (l *Limiter) fingerprint(credential string) [sha256.Size]byte {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(credential))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

func (l *Limiter) lockedErr(addr string, cred bool, until, now time.Time) error {
	wait := until.Sub(now)
	if r := wait % time.Second; r != 0 {
		wait += time.Second - r
	}
	return &LockoutError{Addr: addr, Credential: cred, Until: until, RetryAfter: wait}
}

// sweep forgets entries with no lockout and no failure in the window. It
// runs only when many are tracked, at most once per gap (a minute; a
// second when MaxTracked is reached, so that a full table costs a flood
// one sweep a second, not one per request); l.mu is held.
func (l *Limiter) sweep(now time.Time, gap time.Duration) {
	if len(l.addrs)+len(l.creds) < sweepAbove || now.Sub(l.lastSweep) < gap {
		return
	}
	l.lastSweep = now
	cutoff := now.Add(-l.window)
	sweepMap(l.addrs, now, cutoff)
	sweepMap(l.creds, now, cutoff)
}

func sweepMap[K comparable](m map[K]*failState, now, cutoff time.Time) {
	for k, st := range m {
		if now.Before(st.lockedUntil) {
			continue
		}
		if st.fails = pruned(st.fails, cutoff); len(st.fails) == 0 {
			delete(m, k)
		}
	}
}

// pruned drops the times at or before cutoff from the sorted slice ts.
func pruned(ts []time.Time, cutoff time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(cutoff) {
		i++
	}
	return ts[i:]
}
