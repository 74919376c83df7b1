package auth

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// A scoped, expiring token keeps its scope and expiry in auth.db (read
// back by a second Open), its principal carries them, it is refused once
// expired (ErrExpired, not counted as a guess), listed as expired, and
// Authenticate (the settings page, the JSON API) refuses it while valid.
func TestScopedToken(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	path := filepath.Join(t.TempDir(), "auth.db")
	s, err := Open(path, &Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	sc := &ext.Scope{Servers: []string{"notes", "files", "notes"}, Tools: []string{"notes/list_*"}}
	plain, tok, err := s.CreateScopedToken(ctx, "alice", "agent", TokenOptions{Scope: sc, Expires: c.Now().Add(30 * time.Minute), Extension: "runner"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Servers) != 3 {
		t.Errorf("CreateScopedToken changed the caller's scope: %v", sc.Servers)
	}
	if got := tok.Scope.String(); got != "servers files,notes; tools notes/list_*" {
		t.Errorf("scope = %q", got)
	}
	s.Close()
	s, err = Open(path, &Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Verify(ctx, plain)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if p.User != "alice" || p.Scope.Key() != tok.Scope.Key() || !p.Expires.Equal(tok.Expires) {
		t.Errorf("principal = %+v, want alice with %v until %v", p, tok.Scope, tok.Expires)
	}
	if _, err := s.Authenticate(ctx, "1.2.3.4", plain); !errors.Is(err, ErrScoped) || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Authenticate of a scoped token: %v, want ErrScoped", err)
	}
	list, _ := s.ListTokens(ctx, "alice")
	if len(list) != 1 || list[0].Expired || list[0].Extension != "runner" || list[0].Scope == nil {
		t.Errorf("list = %+v", list)
	}

	c.Add(30 * time.Minute)
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrExpired) || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("Verify after expiry: %v, want ErrExpired", err)
	}
	for range 10 {
		if _, err := s.Authenticate(ctx, "1.2.3.4", plain); !errors.Is(err, ErrExpired) || errors.Is(err, ErrLockedOut) {
			t.Fatalf("Authenticate after expiry: %v, want ErrExpired and no lockout", err)
		}
	}
	list, _ = s.ListTokens(ctx, "alice")
	if len(list) != 1 || !list[0].Expired {
		t.Errorf("list after expiry = %+v, want it expired", list)
	}

	// An unscoped token is unchanged: no scope, no expiry, Authenticate
	// accepts it.
	plain2, _, err := s.CreateToken(ctx, "alice", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Authenticate(ctx, "1.2.3.4", plain2); err != nil || p.Scope != nil || !p.Expires.IsZero() {
		t.Errorf("unscoped token: %+v, %v", p, err)
	}
}

func TestScopedTokenRefusesBadOptions(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	for name, o := range map[string]TokenOptions{
		"no server":    {Scope: &ext.Scope{}},
		"slash":        {Scope: &ext.Scope{Servers: []string{"a/b"}}},
		"bad glob":     {Scope: &ext.Scope{Servers: []string{"a"}, Tools: []string{"a/["}}},
		"past expiry":  {Expires: c.Now().Add(-time.Second)},
		"expiry now":   {Expires: c.Now()},
		"empty server": {Scope: &ext.Scope{Servers: []string{""}}},
	} {
		if _, _, err := s.CreateScopedToken(ctx, "alice", "x", o); !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ext.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid argument", name, err)
		}
	}
}

// A glob is path.Match over "server/tool": "*" stops at "/", the server
// must be listed whatever the glob says.
func TestScopeMatching(t *testing.T) {
	sc := &ext.Scope{Servers: []string{"notes", "files"}, Tools: []string{"notes/list_*", "*/read"}}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"notes/list_all": true, "notes/list_": true, "notes/add": false,
		"files/read": true, "files/write": false, "mail/read": false,
		"notes/list_a/b": false, "notes": false, "": false,
	} {
		if got := sc.AllowsTool(name); got != want {
			t.Errorf("AllowsTool(%q) = %v, want %v", name, got, want)
		}
	}
	if !sc.AllowsPrompt("files/summarize") || sc.AllowsPrompt("mail/summarize") {
		t.Error("prompts are scoped by server")
	}
	servers := &ext.Scope{Servers: []string{"notes"}}
	if !servers.AllowsTool("notes/add") || servers.AllowsTool("files/read") {
		t.Error("a scope without globs reaches every tool of its servers only")
	}
	var all *ext.Scope
	if !all.AllowsTool("anything/x") || !all.AllowsServer("y") {
		t.Error("a nil scope reaches everything")
	}
	if !servers.Within(&ext.Scope{Servers: []string{"notes", "files"}}) || servers.Within(&ext.Scope{Servers: []string{"files"}}) ||
		all.Within(servers) || !servers.Within(nil) || servers.Within(sc) {
		t.Error("Within")
	}
}

// TestSessionEndsWithExpiringToken: a web session opened with an
// (unscoped) expiring token ends when the token expires, as one opened
// with a revoked token does.
func TestSessionEndsWithExpiringToken(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	plain, _, err := s.CreateScopedToken(ctx, "alice", "day pass", TokenOptions{Expires: c.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Authenticate(ctx, "1.2.3.4", plain)
	if err != nil || p.Scope != nil {
		t.Fatalf("Authenticate of an unscoped expiring token: %+v, %v", p, err)
	}
	id, _, err := s.CreateSession(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := s.Session(ctx, id)
	if err != nil || !ss.Expires.Equal(c.Now().Add(time.Hour)) {
		t.Fatalf("Session = %+v, %v; want it to end with the token", ss, err)
	}
	c.Add(time.Hour)
	if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
		t.Errorf("Session after the token expired: %v, want ErrNoSession", err)
	}
}

// TestExpiredTokensPruned: a token expired a week ago leaves the list when
// another is issued, and coming back it is still known (revoked: no
// guess, not counted).
func TestExpiredTokensPruned(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	old, _, err := s.CreateScopedToken(ctx, "alice", "old", TokenOptions{Expires: c.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Hour + 7*24*time.Hour - time.Second)
	_, _, _ = s.CreateToken(ctx, "alice", "keep")
	if l, _ := s.ListTokens(ctx, "alice"); len(l) != 2 {
		t.Fatalf("a token expired less than a week ago left the list: %+v", l)
	}
	c.Add(2 * time.Second)
	_, _, _ = s.CreateToken(ctx, "alice", "new")
	l, _ := s.ListTokens(ctx, "alice")
	if len(l) != 2 || l[0].Name != "keep" || l[1].Name != "new" {
		t.Errorf("after a week: %+v, want the expired token gone", l)
	}
	if _, err := s.Authenticate(ctx, "1.2.3.4", old); !errors.Is(err, ErrRevoked) {
		t.Errorf("the pruned token: %v, want ErrRevoked", err)
	}
}
