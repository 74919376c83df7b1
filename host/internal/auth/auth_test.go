package auth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func openTest(t *testing.T, c *clock, logs *syncBuffer) *Store {
	t.Helper()
	o := &Options{}
	if c != nil {
		o.Now = c.Now
	}
	if logs != nil {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	s, err := Open(filepath.Join(t.TempDir(), "data", "auth.db"), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTokenLifecycle(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, newClock(), nil)
	var revoked []string
	var mu sync.Mutex
	cancel := s.OnRevoke(func(id string) { mu.Lock(); revoked = append(revoked, id); mu.Unlock() })
	defer cancel()

	plain, tok, err := s.CreateToken(ctx, "alice", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, TokenPrefix) || len(plain) != len(TokenPrefix)+43 {
		t.Errorf("token %q: want %s + 43 base64url characters", plain, TokenPrefix)
	}
	if tok.User != "alice" || tok.Name != "laptop" || tok.Operator || !strings.HasPrefix(tok.ID, "tok_") {
		t.Errorf("token = %+v", tok)
	}
	p, err := s.Verify(ctx, plain)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if want := (Principal{User: "alice", TokenID: tok.ID}); p != want {
		t.Errorf("principal = %+v, want %+v", p, want)
	}
	_, bobTok, _ := s.CreateToken(ctx, "bob", "phone")
	list, err := s.ListTokens(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].ID != tok.ID || list[0].LastUsed.IsZero() {
		t.Errorf("ListTokens(alice) = %+v, %v; want alice's token, used", list, err)
	}
	all, _ := s.ListTokens(ctx, "")
	if len(all) != 2 {
		t.Errorf("ListTokens(\"\") has %d tokens, want 2", len(all))
	}

	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Verify after revoke = %v, want ErrInvalidToken", err)
	}
	if err := s.RevokeToken(ctx, tok.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second revoke = %v, want ErrNotFound", err)
	}
	mu.Lock()
	if len(revoked) != 1 || revoked[0] != tok.ID {
		t.Errorf("OnRevoke heard %v, want [%s]", revoked, tok.ID)
	}
	mu.Unlock()
	cancel()
	cancel() // idempotent
	if err := s.RevokeToken(ctx, bobTok.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(revoked) != 1 {
		t.Errorf("a cancelled subscriber heard %v", revoked)
	}
	mu.Unlock()
}

func TestVerifyRefusesMalformed(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, nil)
	plain, _, _ := s.CreateToken(ctx, "alice", "x")
	for name, tok := range map[string]string{
		"empty":        "",
		"no prefix":    strings.TrimPrefix(plain, TokenPrefix),
		"truncated":    plain[:len(plain)-1],
		"extra":        plain + "A",
		"changed":      plain[:len(plain)-1] + flip(plain[len(plain)-1]),
		"bad base64":   TokenPrefix + strings.Repeat("*", 43),
		"login prefix": "ahl_" + strings.TrimPrefix(plain, TokenPrefix),
	} {
		if _, err := s.Verify(ctx, tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: Verify = %v, want ErrInvalidToken", name, err)
		}
	}
	for name, c := range map[string]struct{ user, name string }{
		"bad user":   {"-alice", "x"},
		"empty user": {"", "x"},
		"bad name":   {"alice", "a\nb"},
		"empty name": {"alice", ""},
	} {
		if _, _, err := s.CreateToken(ctx, c.user, c.name); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: CreateToken = %v, want ErrInvalidArgument", name, err)
		}
	}
}

func flip(b byte) string {
	if b == 'A' {
		return "B"
	}
	return "A"
}

func TestOperatorToken(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, nil)
	plain, tok, err := s.CreateOperatorToken(ctx, "status page")
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Verify(ctx, plain)
	if err != nil || !p.Operator || p.User != "" || p.TokenID != tok.ID {
		t.Errorf("Verify = %+v, %v; want an operator principal without a user", p, err)
	}
	if l, _ := s.ListTokens(ctx, ""); len(l) != 1 || !l[0].Operator {
		t.Errorf("ListTokens = %+v", l)
	}
}

// TestHashOnlyStorage greps the database files for every secret the store
// handed out: none may be there.
func TestHashOnlyStorage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(filepath.Join(dir, "auth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for i := range 5 {
		plain, _, err := s.CreateToken(ctx, "alice", "t"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Verify(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		id, csrf, err := s.CreateSession(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		code, err := s.CreateLoginLink(ctx, "alice", 0)
		if err != nil {
			t.Fatal(err)
		}
		_ = csrf // the CSRF token is stored: it is useless without the session ID
		secrets = append(secrets, plain, id, code)
	}
	var blob []byte
	read := func() {
		blob = nil
		for _, f := range []string{"auth.db", "auth.db-wal", "auth.db-shm"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err == nil {
				blob = append(blob, b...)
			}
		}
	}
	read() // with the WAL still in use
	check := func(when string) {
		for _, sec := range secrets {
			body := sec[strings.IndexByte(sec, '_')+1:]
			if bytes.Contains(blob, []byte(body)) || bytes.Contains(blob, []byte(body[:16])) {
				t.Errorf("%s: secret %s… found in the database files", when, sec[:8])
			}
		}
	}
	check("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	read()
	check("closed")
	if len(blob) == 0 {
		t.Fatal("read no database bytes")
	}
}

func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(filepath.Join(dir, "auth.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %04o, want 0700", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Join(dir, "auth.db")); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %04o, want 0600", fi.Mode().Perm())
	}
	if err := os.Chmod(filepath.Join(dir, "auth.db"), 0o620); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(dir, "auth.db"), nil); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("Open of a group-writable file = %v, want a refusal", err)
	}
	// Reopening a good file keeps its data and runs no migration twice.
	if err := os.Chmod(filepath.Join(dir, "auth.db"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(filepath.Join(dir, "auth.db"), nil)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, _, err := s.CreateToken(context.Background(), "alice", "x"); err != nil {
		t.Fatal(err)
	}
}

func TestClosedStore(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, nil)
	plain, _, _ := s.CreateToken(ctx, "alice", "x")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrClosed) {
		t.Errorf("Verify after Close = %v, want ErrClosed", err)
	}
	if _, _, err := s.CreateToken(ctx, "alice", "y"); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateToken after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Session(ctx, "ahs_x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Session after Close = %v, want ErrClosed", err)
	}
}

func TestLoginLink(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	code, err := s.CreateLoginLink(ctx, "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := s.LoginLinkUser(ctx, code); u != "alice" || err != nil {
		t.Errorf("LoginLinkUser = %q, %v", u, err)
	}
	if u, err := s.RedeemLoginLink(ctx, code); u != "alice" || err != nil {
		t.Fatalf("RedeemLoginLink = %q, %v", u, err)
	}
	if _, err := s.RedeemLoginLink(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("second redemption = %v, want ErrInvalidCode", err)
	}
	if _, err := s.LoginLinkUser(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("LoginLinkUser of a used code = %v, want ErrInvalidCode", err)
	}

	// Expiry: the default TTL is 15 minutes.
	code, _ = s.CreateLoginLink(ctx, "alice", 0)
	c.Add(15*time.Minute - time.Millisecond)
	if _, err := s.LoginLinkUser(ctx, code); err != nil {
		t.Errorf("just before expiry: %v", err)
	}
	c.Add(time.Millisecond)
	if _, err := s.LoginLinkUser(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("LoginLinkUser at expiry = %v, want ErrInvalidCode", err)
	}
	if _, err := s.RedeemLoginLink(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("RedeemLoginLink at expiry = %v, want ErrInvalidCode", err)
	}
	code, _ = s.CreateLoginLink(ctx, "alice", time.Minute)
	c.Add(time.Minute)
	if _, err := s.RedeemLoginLink(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("custom TTL: RedeemLoginLink = %v, want ErrInvalidCode", err)
	}
	for _, bad := range []string{"", "ahl_", "nope", strings.Repeat("a", 47)} {
		if _, err := s.RedeemLoginLink(ctx, bad); !errors.Is(err, ErrInvalidCode) {
			t.Errorf("RedeemLoginLink(%q) = %v", bad, err)
		}
	}

	// Single use under concurrency: one redemption of many wins.
	code, _ = s.CreateLoginLink(ctx, "alice", 0)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := s.RedeemLoginLink(ctx, code); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, ErrInvalidCode) {
				t.Errorf("concurrent redemption: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d concurrent redemptions won, want 1", wins.Load())
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	plain, tok, _ := s.CreateToken(ctx, "alice", "laptop")
	p, _ := s.Verify(ctx, plain)

	id, csrf, err := s.CreateSession(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := s.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if ss.User != "alice" || ss.TokenID != tok.ID || ss.CSRF != csrf || ss.Operator || len(csrf) < 40 {
		t.Errorf("session = %+v", ss)
	}
	if want := c.Now().Add(12 * time.Hour); !ss.Expires.Equal(want) {
		t.Errorf("Expires = %v, want %v", ss.Expires, want)
	}

	t.Run("idle expiry", func(t *testing.T) {
		id, _, _ := s.CreateSession(ctx, Principal{User: "alice"})
		c.Add(11 * time.Hour)
		if _, err := s.Session(ctx, id); err != nil {
			t.Fatalf("after 11 h: %v", err)
		}
		c.Add(11 * time.Hour) // 11 h since the last use
		if _, err := s.Session(ctx, id); err != nil {
			t.Fatalf("11 h after the last use: %v", err)
		}
		c.Add(12 * time.Hour)
		if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
			t.Errorf("12 h idle: %v, want ErrNoSession", err)
		}
	})
	t.Run("absolute expiry", func(t *testing.T) {
		id, _, _ := s.CreateSession(ctx, Principal{User: "alice"})
		created := c.Now()
		for range 20 { // busy for 7 days and more
			c.Add(11 * time.Hour)
			if _, err := s.Session(ctx, id); err != nil {
				if c.Now().Sub(created) < 7*24*time.Hour {
					t.Fatalf("ended early: %v", err)
				}
				return
			}
		}
		t.Error("a busy session outlived its 7-day maximum")
	})
	t.Run("revocation cascade", func(t *testing.T) {
		plain, tok, _ := s.CreateToken(ctx, "alice", "tablet")
		p, _ := s.Verify(ctx, plain)
		id1, _, _ := s.CreateSession(ctx, p)
		id2, _, _ := s.CreateSession(ctx, p)
		other, _, _ := s.CreateSession(ctx, Principal{User: "alice"})
		if err := s.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{id1, id2} {
			if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
				t.Errorf("session of a revoked token: %v, want ErrNoSession", err)
			}
		}
		if _, err := s.Session(ctx, other); err != nil {
			t.Errorf("a login-link session died with an unrelated token: %v", err)
		}
		// A session for a token revoked meanwhile cannot be created.
		if _, _, err := s.CreateSession(ctx, p); err == nil {
			t.Error("CreateSession with a revoked token succeeded")
		}
	})
	t.Run("sign out", func(t *testing.T) {
		id, _, _ := s.CreateSession(ctx, Principal{User: "bob"})
		id2, _, _ := s.CreateSession(ctx, Principal{User: "bob"})
		keep, _, _ := s.CreateSession(ctx, Principal{User: "carol"})
		if err := s.DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
			t.Errorf("deleted session: %v", err)
		}
		if n, err := s.DeleteUserSessions(ctx, "bob"); n != 1 || err != nil {
			t.Errorf("DeleteUserSessions = %d, %v; want 1", n, err)
		}
		if _, err := s.Session(ctx, id2); !errors.Is(err, ErrNoSession) {
			t.Errorf("session after sign-out everywhere: %v", err)
		}
		if _, err := s.Session(ctx, keep); err != nil {
			t.Errorf("another user's session: %v", err)
		}
	})
	t.Run("bad principals", func(t *testing.T) {
		for _, p := range []Principal{{}, {User: "-x"}, {User: "alice", Operator: true}} {
			if _, _, err := s.CreateSession(ctx, p); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("CreateSession(%+v) = %v", p, err)
			}
		}
		if _, err := s.Session(ctx, "ahs_nope"); !errors.Is(err, ErrNoSession) {
			t.Errorf("Session(bad) = %v", err)
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, nil)
	var heard atomic.Int32
	defer s.OnRevoke(func(string) { heard.Add(1) })()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			user := "user" + itoa(g)
			for range 10 {
				plain, tok, err := s.CreateToken(ctx, user, "t")
				if err != nil {
					t.Error(err)
					return
				}
				p, err := s.Authenticate(ctx, "192.0.2."+itoa(g), plain)
				if err != nil || p.User != user {
					t.Errorf("Authenticate: %+v, %v", p, err)
					return
				}
				id, _, err := s.CreateSession(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				if ss, err := s.Session(ctx, id); err != nil || ss.User != user {
					t.Errorf("Session: %+v, %v", ss, err)
				}
				if err := s.RevokeToken(ctx, tok.ID); err != nil {
					t.Error(err)
				}
				if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrInvalidToken) {
					t.Errorf("revoked token verified: %v", err)
				}
				if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
					t.Errorf("session of a revoked token: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if heard.Load() != 80 {
		t.Errorf("heard %d revocations, want 80", heard.Load())
	}
}

func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	s, err := Open(filepath.Join(b.TempDir(), "auth.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	plain, _, _ := s.CreateToken(ctx, "alice", "x")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(ctx, plain); err != nil {
			b.Fatal(err)
		}
	}
}
