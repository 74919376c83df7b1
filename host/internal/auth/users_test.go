package auth

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// events records what OnUserChange subscribers hear.
type events struct {
	mu  sync.Mutex
	got []UserEvent
}

func (e *events) add(ev UserEvent) { e.mu.Lock(); e.got = append(e.got, ev); e.mu.Unlock() }
func (e *events) take() []UserEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.got
	e.got = nil
	return g
}

func TestUpsertUser(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	var ev events
	defer s.OnUserChange(ev.add)()

	u, err := s.UpsertUser(ctx, "alice", UserInfo{Source: SourceOIDC, Email: "alice@example.com",
		Issuer: "https://idp.example", Subject: "sub-a", Groups: []string{"eng", "ops", "eng"}})
	if err != nil {
		t.Fatalf("UpsertUser: %v", err)
	}
	if u.Name != "alice" || u.Source != SourceOIDC || u.Email != "alice@example.com" || u.Subject != "sub-a" ||
		!slices.Equal(u.Groups, []string{"eng", "ops"}) || !u.Created.Equal(c.Now()) || !u.LastSeen.Equal(c.Now()) || u.IsDisabled() {
		t.Errorf("new user = %+v", u)
	}
	if got := ev.take(); !slices.Equal(got, []UserEvent{{"alice", UserGroupsChanged}}) {
		t.Errorf("events = %v, want alice's groups changed", got)
	}

	// A second sign-in: the source stays, nil groups stay, email updates.
	c.Add(time.Hour)
	u, err = s.UpsertUser(ctx, "alice", UserInfo{Source: "demo", Email: "a@example.com", Issuer: "https://idp.example", Subject: "sub-a"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Source != SourceOIDC || u.Email != "a@example.com" || !slices.Equal(u.Groups, []string{"eng", "ops"}) || !u.LastSeen.Equal(c.Now()) {
		t.Errorf("after second sign-in = %+v", u)
	}
	if got := ev.take(); len(got) != 0 {
		t.Errorf("unchanged groups told %v", got)
	}
	// Groups replaced; an empty non-nil slice clears them.
	if u, _ = s.UpsertUser(ctx, "alice", UserInfo{Groups: []string{}}); len(u.Groups) != 0 {
		t.Errorf("groups after clearing = %v", u.Groups)
	}
	if got := ev.take(); len(got) != 1 {
		t.Errorf("clearing groups told %v", got)
	}

	// Identity binding.
	if _, err := s.UpsertUser(ctx, "alice", UserInfo{Issuer: "https://idp.example", Subject: "sub-other"}); !errors.Is(err, ErrConflict) {
		t.Errorf("alice with another subject = %v, want ErrConflict", err)
	}
	if _, err := s.UpsertUser(ctx, "mallory", UserInfo{Issuer: "https://idp.example", Subject: "sub-a"}); !errors.Is(err, ErrConflict) {
		t.Errorf("alice's identity as mallory = %v, want ErrConflict", err)
	}
	if _, err := s.User(ctx, "mallory"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused sign-in created mallory: %v", err)
	}
	if _, err := s.UpsertUser(ctx, "bob", UserInfo{Subject: "x"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("subject without issuer = %v, want ErrInvalidArgument", err)
	}
	for _, bad := range []string{"", " eng", "a,b", "tab\there"} {
		if _, err := s.UpsertUser(ctx, "bob", UserInfo{Groups: []string{bad}}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("group %q = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := s.UpsertUser(ctx, "-bad", UserInfo{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad name = %v", err)
	}
	if _, err := s.UpsertUser(ctx, "bob", UserInfo{Source: "Not A Word"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad source = %v", err)
	}

	// Operator groups join the provider's and survive sign-ins.
	if _, err := s.UpsertUser(ctx, "alice", UserInfo{Groups: []string{"eng"}}); err != nil {
		t.Fatal(err)
	}
	ev.take()
	u, err = s.SetOperatorGroups(ctx, "alice", []string{"admins", "eng"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(u.Groups, []string{"admins", "eng"}) || !slices.Equal(u.OperatorGroups, []string{"admins", "eng"}) {
		t.Errorf("after SetOperatorGroups = %+v", u)
	}
	if got := ev.take(); len(got) != 1 || got[0].Change != UserGroupsChanged {
		t.Errorf("SetOperatorGroups told %v", got)
	}
	u, _ = s.UpsertUser(ctx, "alice", UserInfo{Groups: []string{"ops"}})
	if !slices.Equal(u.Groups, []string{"admins", "eng", "ops"}) {
		t.Errorf("groups after a sign-in = %v, want the operator's kept", u.Groups)
	}
	if _, err := s.SetOperatorGroups(ctx, "nobody", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetOperatorGroups(nobody) = %v, want ErrNotFound", err)
	}

	list, err := s.ListUsers(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "alice" {
		t.Errorf("ListUsers = %+v, %v", list, err)
	}
}

// Tokens and login links name users as before, and now record them.
func TestCredentialsRecordUsers(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	if _, _, err := s.CreateToken(ctx, "alice", "laptop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateLoginLink(ctx, "bob", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateOperatorToken(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "alice" || list[0].Source != SourceOperator || list[0].Tokens != 1 ||
		list[1].Name != "bob" || list[1].Tokens != 0 {
		t.Errorf("ListUsers = %+v, want alice (1 token) and bob, no operator", list)
	}
	if n, err := s.RecordUsers(ctx, []string{"alice", "carol", "-bad"}); err != nil || n != 1 {
		t.Errorf("RecordUsers = %d, %v; want carol added", n, err)
	}
	if u, _ := s.User(ctx, "carol"); u.Source != SourceExisting {
		t.Errorf("carol = %+v", u)
	}
}

func TestDisableUser(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	var ev events
	defer s.OnUserChange(ev.add)()
	var revoked []string
	var mu sync.Mutex
	defer s.OnRevoke(func(id string) { mu.Lock(); revoked = append(revoked, id); mu.Unlock() })()

	plain, tok, _ := s.CreateToken(ctx, "alice", "laptop")
	bobPlain, _, _ := s.CreateToken(ctx, "bob", "laptop")
	opPlain, _, _ := s.CreateOperatorToken(ctx, "ops")
	code, _ := s.CreateLoginLink(ctx, "alice", 0)
	sid, _, err := s.CreateSession(ctx, Principal{User: "alice", TokenID: tok.ID})
	if err != nil {
		t.Fatal(err)
	}
	linkSid, _, _ := s.CreateSession(ctx, Principal{User: "alice"})

	if err := s.DisableUser(ctx, "alice", "operator"); err != nil {
		t.Fatalf("DisableUser: %v", err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrRevoked) {
		t.Errorf("Verify(alice's token) = %v, want ErrRevoked", err)
	}
	for _, id := range []string{sid, linkSid} {
		if _, err := s.Session(ctx, id); !errors.Is(err, ErrNoSession) {
			t.Errorf("Session after disable = %v, want ErrNoSession", err)
		}
	}
	if _, err := s.RedeemLoginLink(ctx, code); !errors.Is(err, ErrInvalidCode) {
		t.Errorf("login link after disable = %v, want ErrInvalidCode", err)
	}
	if _, err := s.Verify(ctx, bobPlain); err != nil {
		t.Errorf("bob's token after alice's disable: %v", err)
	}
	if _, err := s.Verify(ctx, opPlain); err != nil {
		t.Errorf("operator token after alice's disable: %v", err)
	}
	mu.Lock()
	if !slices.Equal(revoked, []string{tok.ID}) {
		t.Errorf("OnRevoke heard %v, want [%s]", revoked, tok.ID)
	}
	mu.Unlock()
	if got := ev.take(); !slices.Equal(got, []UserEvent{{"alice", UserDisabled}}) {
		t.Errorf("events = %v", got)
	}
	u, _ := s.User(ctx, "alice")
	if !u.IsDisabled() || u.DisabledBy != "operator" || !u.Disabled.Equal(c.Now()) || u.Tokens != 0 {
		t.Errorf("alice = %+v, want disabled by operator, no tokens", u)
	}

	// Everything that would let her in again is refused.
	if _, _, err := s.CreateToken(ctx, "alice", "again"); !errors.Is(err, ErrUserDisabled) {
		t.Errorf("CreateToken = %v, want ErrUserDisabled", err)
	}
	if _, err := s.CreateLoginLink(ctx, "alice", 0); !errors.Is(err, ErrUserDisabled) {
		t.Errorf("CreateLoginLink = %v, want ErrUserDisabled", err)
	}
	if _, _, err := s.CreateSession(ctx, Principal{User: "alice"}); !errors.Is(err, ErrUserDisabled) {
		t.Errorf("CreateSession = %v, want ErrUserDisabled", err)
	}
	if u, err := s.UpsertUser(ctx, "alice", UserInfo{Source: SourceOIDC}); !errors.Is(err, ErrUserDisabled) || u.Name != "alice" {
		t.Errorf("sign-in = %+v, %v; want ErrUserDisabled and the user", u, err)
	}

	// Disabling again keeps the first record.
	c.Add(time.Minute)
	if err := s.DisableUser(ctx, "alice", "oidc"); err != nil {
		t.Fatal(err)
	}
	if u2, _ := s.User(ctx, "alice"); u2.DisabledBy != "operator" || !u2.Disabled.Equal(u.Disabled) {
		t.Errorf("second disable changed the record: %+v", u2)
	}
	ev.take()

	// Enabled: she signs in again; her old token stays revoked.
	if err := s.EnableUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := ev.take(); !slices.Equal(got, []UserEvent{{"alice", UserEnabled}}) {
		t.Errorf("events = %v", got)
	}
	if _, err := s.UpsertUser(ctx, "alice", UserInfo{}); err != nil {
		t.Errorf("sign-in after enable: %v", err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrRevoked) {
		t.Errorf("old token after enable = %v, want ErrRevoked", err)
	}
	if _, _, err := s.CreateToken(ctx, "alice", "new"); err != nil {
		t.Errorf("CreateToken after enable: %v", err)
	}

	for _, f := range []func() error{
		func() error { return s.DisableUser(ctx, "nobody", "operator") },
		func() error { return s.EnableUser(ctx, "nobody") },
		func() error { return s.DeleteUser(ctx, "nobody") },
	} {
		if err := f(); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown user: %v, want ErrNotFound", err)
		}
	}
}

func TestDeleteUser(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, newClock(), nil)
	var ev events
	defer s.OnUserChange(ev.add)()
	plain, _, _ := s.CreateToken(ctx, "alice", "laptop")
	sid, _, _ := s.CreateSession(ctx, Principal{User: "alice"})
	if _, err := s.SetOperatorGroups(ctx, "alice", []string{"eng"}); err != nil {
		t.Fatal(err)
	}
	ev.take()
	if err := s.DeleteUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, plain); !errors.Is(err, ErrRevoked) {
		t.Errorf("Verify after delete = %v, want ErrRevoked", err)
	}
	if _, err := s.Session(ctx, sid); !errors.Is(err, ErrNoSession) {
		t.Errorf("Session after delete = %v", err)
	}
	if _, err := s.User(ctx, "alice"); !errors.Is(err, ErrNotFound) {
		t.Errorf("User after delete = %v, want ErrNotFound", err)
	}
	if got := ev.take(); !slices.Equal(got, []UserEvent{{"alice", UserDeleted}}) {
		t.Errorf("events = %v", got)
	}
	// The name is free: a new alice starts afresh.
	u, err := s.UpsertUser(ctx, "alice", UserInfo{Source: SourceOIDC})
	if err != nil || len(u.Groups) != 0 || u.Source != SourceOIDC {
		t.Errorf("new alice = %+v, %v", u, err)
	}
}

// Last seen is written at most once per TouchEvery per user, however
// many requests.
func TestLastSeenThrottled(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	s := openTest(t, c, nil)
	plain, _, _ := s.CreateToken(ctx, "alice", "laptop")
	start := c.Now()
	if _, err := s.Verify(ctx, plain); err != nil {
		t.Fatal(err)
	}
	u, _ := s.User(ctx, "alice")
	if !u.LastSeen.Equal(start) {
		t.Errorf("last seen = %v, want %v", u.LastSeen, start)
	}
	c.Add(30 * time.Second)
	sid, _, _ := s.CreateSession(ctx, Principal{User: "alice"})
	_, _ = s.Verify(ctx, plain)
	_, _ = s.Session(ctx, sid)
	if u, _ := s.User(ctx, "alice"); !u.LastSeen.Equal(start) {
		t.Errorf("last seen = %v within the minute, want still %v", u.LastSeen, start)
	}
	c.Add(31 * time.Second)
	_, _ = s.Session(ctx, sid)
	if u, _ := s.User(ctx, "alice"); !u.LastSeen.Equal(c.Now()) {
		t.Errorf("last seen = %v after the minute, want %v", u.LastSeen, c.Now())
	}
}

// An auth.db written before the users table: its users are backfilled
// from their tokens, sessions and login links.
func TestUsersBackfilled(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "auth.db")
	// Build the schema of version 7 by hand, as the older binaries did.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{}, migrations[1:8]...)
	stmts = append(stmts,
		`INSERT INTO tokens (id, user_id, name, operator, hash, created_at, last_used_at) VALUES ('tok_1', 'alice', 'x', 0, x'01', 1000, 5000)`,
		`INSERT INTO tokens (id, user_id, name, operator, hash, created_at) VALUES ('tok_2', 'alice', 'y', 0, x'02', 500)`,
		`INSERT INTO tokens (id, user_id, name, operator, hash, created_at) VALUES ('tok_3', '', 'ops', 1, x'03', 500)`,
		`INSERT INTO login_links (hash, user_id, created_at, expires_at) VALUES (x'04', 'bob', 2000, 3000)`,
		`INSERT INTO sessions (hash, user_id, operator, csrf, created_at, last_seen_at) VALUES (x'05', 'carol', 0, 'c', 3000, 4000)`,
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`,
	)
	for v := 1; v <= 7; v++ {
		stmts = append(stmts, `INSERT INTO schema_migrations VALUES (`+string(rune('0'+v))+`, 0)`)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListUsers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		name          string
		created, seen int64
	}
	var got []row
	for _, u := range list {
		if u.Source != SourceExisting {
			t.Errorf("%s source = %q", u.Name, u.Source)
		}
		got = append(got, row{u.Name, u.Created.UnixMilli(), u.LastSeen.UnixMilli()})
	}
	want := []row{{"alice", 500, 5000}, {"bob", 2000, fromMS(0).UnixMilli()}, {"carol", 3000, 4000}}
	if !slices.Equal(got, want) {
		t.Errorf("backfilled %v, want %v", got, want)
	}
}
