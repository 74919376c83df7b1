package auth

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ErrLockedOut is matched (errors.Is) by a [*LockoutError].
var ErrLockedOut = errors.New("too many failed attempts")

// LockoutError says that an address is locked out, and until when.
type LockoutError struct {
	// Addr is the locked-out address key.
	Addr string
	// Until is when the lockout ends.
	Until time.Time
	// RetryAfter is how long from now that is, rounded up to a second.
	RetryAfter time.Duration
}

// Error says what happened and when to try again, without the address.
func (e *LockoutError) Error() string {
	return fmt.Sprintf("too many failed attempts from this address: try again in %s", e.RetryAfter)
}

// Is reports whether target is [ErrLockedOut].
func (e *LockoutError) Is(target error) bool { return target == ErrLockedOut }

// LimiterOptions configures [NewLimiter]. A nil *LimiterOptions means the
// defaults; so does every zero field.
type LimiterOptions struct {
	// MaxFailures is how many failures within Window lock an address out
	// (default 5).
	MaxFailures int
	// Window is the span in which failures are counted (default 15 min).
	Window time.Duration
	// Lockout is how long a lockout lasts (default: Window).
	Lockout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger hears of each lockout (default: discard).
	Logger *slog.Logger
	_      struct{}
}

// Limiter counts failed attempts per client address and locks an address
// out after too many: MaxFailures failures within Window lock it out for
// Lockout; then it starts afresh. It keeps everything in memory, sweeps
// stale addresses as it goes, and starts no goroutine. It is safe for
// concurrent use; the zero value is not usable, call [NewLimiter].
type Limiter struct {
	max     int
	window  time.Duration
	lockout time.Duration
	now     func() time.Time
	logger  *slog.Logger

	mu        sync.Mutex
	addrs     map[string]*addrState
	lastSweep time.Time
}

type addrState struct {
	fails       []time.Time // within the window, oldest first
	lockedUntil time.Time
}

// sweepAbove is the number of tracked addresses above which Fail sweeps
// stale ones (at most once per minute).
const sweepAbove = 1024

// NewLimiter returns a Limiter.
func NewLimiter(opts *LimiterOptions) *Limiter {
	var o LimiterOptions
	if opts != nil {
		o = *opts
	}
	l := &Limiter{max: o.MaxFailures, window: orDefault(o.Window, 15*time.Minute), now: o.Now, logger: o.Logger,
		addrs: map[string]*addrState{}}
	if l.max <= 0 {
		l.max = 5
	}
	l.lockout = orDefault(o.Lockout, l.window)
	if l.now == nil {
		l.now = time.Now
	}
	if l.logger == nil {
		l.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// Allow returns a [*LockoutError] if addr is locked out, else nil. Call it
// before checking a credential, so that a locked-out address learns
// nothing about its guesses.
func (l *Limiter) Allow(addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.addrs[addr]
	if st == nil {
		return nil
	}
	now := l.now()
	if now.Before(st.lockedUntil) {
		return l.lockedErr(addr, st.lockedUntil, now)
	}
	return nil
}

// Fail records a failed attempt from addr. If it locks the address out, it
// logs that once and returns the [*LockoutError].
func (l *Limiter) Fail(addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	st := l.addrs[addr]
	if st == nil {
		st = &addrState{}
		l.addrs[addr] = st
	}
	if now.Before(st.lockedUntil) {
		return l.lockedErr(addr, st.lockedUntil, now)
	}
	st.fails = append(pruned(st.fails, now.Add(-l.window)), now)
	if len(st.fails) < l.max {
		return nil
	}
	st.fails, st.lockedUntil = nil, now.Add(l.lockout)
	l.logger.Warn("address locked out after failed attempts", "addr", addr, "failures", l.max,
		"window", l.window.String(), "until", st.lockedUntil.UTC().Format(time.RFC3339))
	return l.lockedErr(addr, st.lockedUntil, now)
}

// Succeed records a successful attempt from addr: its count of failures
// starts afresh. It does not lift a lockout (Allow refuses before a
// success can happen).
func (l *Limiter) Succeed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.addrs[addr]; st != nil && !l.now().Before(st.lockedUntil) {
		delete(l.addrs, addr)
	}
}

// Tracked returns how many addresses the limiter remembers (for tests and
// metrics).
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.addrs)
}

func (l *Limiter) lockedErr(addr string, until, now time.Time) error {
	wait := until.Sub(now)
	if r := wait % time.Second; r != 0 {
		wait += time.Second - r
	}
	return &LockoutError{Addr: addr, Until: until, RetryAfter: wait}
}

// sweep forgets addresses with no lockout and no failure in the window.
// It runs only when many addresses are tracked, at most once a minute.
func (l *Limiter) sweep(now time.Time) {
	if len(l.addrs) < sweepAbove || now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	cutoff := now.Add(-l.window)
	for a, st := range l.addrs {
		if now.Before(st.lockedUntil) {
			continue
		}
		if st.fails = pruned(st.fails, cutoff); len(st.fails) == 0 {
			delete(l.addrs, a)
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

// AddrKey turns a request's remote address ("host:port" or a bare IP)
// into the key the limiter counts by: the IP for IPv4 (and IPv4-mapped
// IPv6), the /64 prefix for IPv6, since one client commonly holds a whole
// /64. Anything unparsable is used as it is.
func AddrKey(remoteAddr string) string {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remoteAddr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return ip.String()
	}
	return p.String()
}
