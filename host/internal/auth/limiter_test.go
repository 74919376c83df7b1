package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/internal/guard"
)

func guess(i int) string { return fmt.Sprintf("ah_guess%039d", i) }

// TestLimiterCountsAddressAndCredential: failures count per address key
// and per credential; either locks out after 5 in the window, for 15
// minutes, with the Retry-After of the 429; other addresses and other
// credentials are untouched, and the log names neither credential.
func TestLimiterCountsAddressAndCredential(t *testing.T) {
	c := newClock()
	var logs syncBuffer
	l := NewLimiter(&LimiterOptions{Now: c.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const a = "192.0.2.7"
	for i := range 4 {
		if err := l.Fail(a, guess(i)); err != nil {
			t.Fatalf("failure %d locked out: %v", i+1, err)
		}
	}
	err := l.Fail(a, guess(4))
	var le *LockoutError
	if !errors.As(err, &le) || !errors.Is(err, ErrLockedOut) || le.Addr != a || le.Credential ||
		le.RetryAfter != 15*time.Minute || le.RetryAfterSeconds() != 900 {
		t.Fatalf("fifth failure = %#v, want a 15 min lockout of the address", err)
	}
	_, creds := l.Tracked()
	if err := l.Fail(a, guess(5)); !errors.As(err, &le) || le.Addr != a {
		t.Errorf("a failure while locked out = %v", err)
	}
	if _, n := l.Tracked(); n != creds {
		t.Errorf("a locked-out address's failure was tracked by credential: %d → %d", creds, n)
	}
	if err := l.Fail("192.0.2.8", guess(6)); err != nil {
		t.Errorf("another address: %v", err)
	}

	// One credential replayed from five addresses is locked out
	// everywhere; a sixth address may still fail with another one.
	const replayed = "ah_revoked-token-in-a-fleet-of-clients-xxxxx"
	for i := range 5 {
		err = l.Fail(fmt.Sprintf("198.51.100.%d", i), replayed)
	}
	if !errors.As(err, &le) || !le.Credential || le.Addr != "" {
		t.Fatalf("fifth failure of one credential = %#v, want the credential locked out", err)
	}
	if err := l.Fail("198.51.100.200", replayed); !errors.As(err, &le) || !le.Credential {
		t.Errorf("the locked-out credential from a new address = %v", err)
	}
	if err := l.Fail("198.51.100.201", guess(7)); err != nil {
		t.Errorf("another credential from a new address: %v", err)
	}

	c.Add(14 * time.Minute)
	if err := l.Fail(a, guess(8)); !errors.As(err, &le) || le.RetryAfter != time.Minute {
		t.Errorf("after 14 min = %v, want 1 min left", err)
	}
	c.Add(time.Minute)
	if err := l.Fail(a, guess(9)); err != nil {
		t.Errorf("after the lockout the count did not start afresh: %v", err)
	}

	// Failures spread beyond the window do not add up.
	for i := range 10 {
		if err := l.Fail("203.0.113.1", guess(100+i)); err != nil {
			t.Fatalf("spread failures locked out: %v", err)
		}
		c.Add(4 * time.Minute)
	}

	out := logs.String()
	if strings.Count(out, "address locked out") != 1 || strings.Count(out, "credential locked out") != 1 {
		t.Errorf("want one lockout line of each kind, got:\n%s", out)
	}
	if strings.Contains(out, "guess0") || strings.Contains(out, "fleet-of-clients") {
		t.Errorf("a credential is in the log:\n%s", out)
	}
	if !strings.Contains(out, "credential_sha256="+Fingerprint(replayed)) {
		t.Errorf("the credential's lockout names no fingerprint:\n%s", out)
	}

	// Configurable.
	l2 := NewLimiter(&LimiterOptions{MaxFailures: 2, Window: time.Minute, Lockout: time.Hour, Now: c.Now})
	l2.Fail(a, "x")
	if err := l2.Fail(a, "y"); !errors.As(err, &le) || le.RetryAfter != time.Hour {
		t.Errorf("custom limiter = %v", err)
	}
}

// TestLimiterFingerprintKeyed: the credential is counted by an HMAC under
// a key of each limiter's own, never by itself or a plain hash.
func TestLimiterFingerprintKeyed(t *testing.T) {
	l1, l2 := NewLimiter(nil), NewLimiter(nil)
	const cred = "ah_some-credential"
	f1, f2 := l1.fingerprint(cred), l2.fingerprint(cred)
	if f1 == f2 || f1 != l1.fingerprint(cred) || f1 == [32]byte(hashOf(cred)) {
		t.Errorf("fingerprints %x, %x: want stable within a limiter, different across, and not SHA-256", f1, f2)
	}
	l1.Fail("192.0.2.1", cred)
	for fp := range l1.creds {
		if strings.Contains(string(fp[:]), cred) {
			t.Error("the credential is kept")
		}
	}
}

// TestLimiterLoopbackOneKey: rotating the source over 127/8 (and ::1,
// ::ffff:127.x) is one address key: the fifth failure locks all of
// loopback out.
func TestLimiterLoopbackOneKey(t *testing.T) {
	l := NewLimiter(nil)
	var err error
	for i, src := range []string{"127.0.0.1:1000", "127.0.0.2:1000", "127.1.2.3:9", "[::1]:7777", "[::ffff:127.0.0.9]:1"} {
		err = l.Fail(guard.AddrKey(src), guess(i))
	}
	var le *LockoutError
	if !errors.As(err, &le) || le.Addr != guard.LoopbackKey {
		t.Fatalf("fifth loopback failure = %v, want loopback locked out", err)
	}
	if err := l.Fail(guard.AddrKey("127.0.0.255:5"), guess(9)); !errors.Is(err, ErrLockedOut) {
		t.Errorf("127.0.0.255 = %v, want locked out with the rest of loopback", err)
	}
}

func TestLimiterBounded(t *testing.T) {
	c := newClock()
	l := NewLimiter(&LimiterOptions{Now: c.Now, MaxTracked: 2000})
	for i := range 3000 {
		l.Fail("10.0."+itoa(i/250)+"."+itoa(i%250), guess(i))
	}
	if a, cr := l.Tracked(); a != 2000 || cr != 2000 {
		t.Fatalf("tracked %d addresses and %d credentials, want the cap of 2000 each", a, cr)
	}
	c.Add(16 * time.Minute)
	l.Fail("192.0.2.1", "x")
	if a, cr := l.Tracked(); a != 1 || cr != 1 {
		t.Errorf("after the sweep %d addresses and %d credentials are tracked, want 1 each", a, cr)
	}
}

// TestAuthenticateValidFirst: five bad tokens lock the address out, yet
// the valid token from that very address is accepted; the guesser's next
// failures get ErrLockedOut (success cleared nothing); no token is logged,
// and the log lines of a flood are rate-limited.
func TestAuthenticateValidFirst(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Open(t.TempDir()+"/auth.db", &Options{Now: c.Now, Logger: logger,
		Refusals: guard.NewRefusalLog(&guard.RefusalLogOptions{Now: c.Now})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	plain, _, _ := s.CreateToken(ctx, "alice", "laptop")
	const addr = "203.0.113.9"
	wrong := []string{plain + "x", "ah_" + strings.Repeat("A", 43), "", "nope", plain[:len(plain)-1]}
	for i, w := range wrong {
		_, err := s.Authenticate(ctx, addr, w)
		if !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("attempt %d: %v, want ErrInvalidToken", i+1, err)
		}
		if locked := errors.Is(err, ErrLockedOut); locked != (i == 4) {
			t.Errorf("attempt %d: locked out = %v", i+1, locked)
		}
	}
	if p, err := s.Authenticate(ctx, addr, plain); err != nil || p.User != "alice" {
		t.Errorf("the valid token from the locked-out address: %+v, %v; want alice", p, err)
	}
	for i := range 100 {
		if _, err := s.Authenticate(ctx, addr, guess(i)); !errors.Is(err, ErrLockedOut) {
			t.Fatalf("a guess after a success from the locked-out address: %v, want ErrLockedOut", err)
		}
	}
	out := logs.String()
	for _, w := range append(wrong, plain) {
		if len(w) > 8 && strings.Contains(out, w[3:]) {
			t.Errorf("a token is in the log:\n%s", out)
		}
	}
	if !strings.Contains(out, "token_sha256="+Fingerprint(wrong[0])) {
		t.Errorf("the log names no fingerprint:\n%s", out)
	}
	if n := strings.Count(out, "bearer token refused"); n > 5 {
		t.Errorf("105 refusals at once logged %d lines, want the burst of 5:\n%s", n, out)
	}
	c.Add(time.Second)
	s.Authenticate(ctx, addr, guess(1000))
	if out := logs.String(); !strings.Contains(out, "similar refusals suppressed") || !strings.Contains(out, "suppressed=100") {
		t.Errorf("no summary of the suppressed lines:\n%s", out)
	}
}

// TestLimiterAttempt: a guess is counted before it is checked, so 100
// concurrent guesses get at most MaxFailures checks; the fifth is told
// it locked the gate, and later ones (from other addresses too, on the
// same credential) are refused unchecked.
func TestLimiterAttempt(t *testing.T) {
	c := newClock()
	l := NewLimiter(&LimiterOptions{Now: c.Now})
	const gate = "the gate"
	var checked, lockedBy, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			locked, ref := l.Attempt(fmt.Sprintf("192.0.2.%d", i), gate)
			switch {
			case ref != nil:
				if !errors.Is(ref, ErrLockedOut) {
					t.Errorf("refused with %v", ref)
				}
				refused.Add(1)
			case locked != nil:
				lockedBy.Add(1)
				checked.Add(1)
			default:
				checked.Add(1)
			}
		})
	}
	wg.Wait()
	if checked.Load() != 5 || lockedBy.Load() != 1 || refused.Load() != 95 {
		t.Errorf("100 concurrent attempts: %d checked (%d locking), %d refused; want 5 (1), 95", checked.Load(), lockedBy.Load(), refused.Load())
	}
	c.Add(16 * time.Minute)
	if locked, ref := l.Attempt("192.0.2.1", gate); locked != nil || ref != nil {
		t.Errorf("after the lockout: %v, %v", locked, ref)
	}
}
