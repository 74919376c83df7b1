package oauthserver_test

import (
	"database/sql"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host/internal/oauthserver"
	"github.com/agenthost/agenthost/host/internal/web"
)

// rows counts the rows of table in the OAuth database at path, read with
// a connection of its own (the driver is the one the store registers).
func rows(t *testing.T, path, table string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sweeper opens a server on e's database whose store's clock is skew
// ahead of the real one, sweeping every every.
func (e *env) sweeper(skew *atomic.Int64, every time.Duration) *oauthserver.Server {
	e.t.Helper()
	st, err := oauthserver.OpenSQLite(e.path, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	if err != nil {
		e.t.Fatal(err)
	}
	oa, err := oauthserver.New(st, &oauthserver.Options{BaseURL: func() string { return e.srv.URL }, Sessions: web.NewSessions(e.a, nil),
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)), SweepEvery: every})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { oa.Close() })
	return oa
}

// waitEmpty waits until the tables have no rows (the sweep ran), failing after
// 10 s.
func waitEmpty(t *testing.T, path string, tables ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := 0
		for _, tb := range tables {
			left += rows(t, path, tb)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows of %v are still there: not swept", left, tables)
		}
	}
}

// TestSweep: expired tokens, codes and the grants left without any are
// deleted by the server's periodic sweep and by the sweep at its start,
// with no new grant (which sweeps too); live ones are kept.
func TestSweep(t *testing.T) {
	e := newEnv(t, nil)
	var skew atomic.Int64
	s := e.sweeper(&skew, 20*time.Millisecond)
	cfg := e.register(dcrMeta)
	e.browser("alice").tokens(cfg)
	if rows(t, e.path, "tokens") == 0 || rows(t, e.path, "grants") != 1 {
		t.Fatalf("no tokens or grant stored: tokens %d, grants %d", rows(t, e.path, "tokens"), rows(t, e.path, "grants"))
	}
	time.Sleep(100 * time.Millisecond) // several sweeps
	if n := rows(t, e.path, "tokens"); n == 0 || rows(t, e.path, "grants") != 1 {
		t.Fatalf("the sweep deleted live tokens or grants: %d tokens left", n)
	}
	// 60 days on, the refresh token (30 days) too is long expired.
	skew.Store(int64(60 * 24 * time.Hour))
	waitEmpty(t, e.path, "tokens", "grants", "clients")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The sweep at start: a server that would sweep next in an hour.
	skew.Store(0)
	e.browser("alice").tokens(e.register(dcrMeta))
	if rows(t, e.path, "tokens") == 0 {
		t.Fatal("no tokens stored")
	}
	skew.Store(int64(60 * 24 * time.Hour))
	e.sweeper(&skew, time.Hour)
	waitEmpty(t, e.path, "tokens", "grants", "clients")
}
