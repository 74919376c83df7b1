package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/guard"
	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrInvalidToken is returned for a token that is malformed, unknown
	// or revoked. It never says which.
	ErrInvalidToken = errors.New("invalid or revoked token")
	// ErrRevoked marks (errors.Is) the [ErrInvalidToken] of a token this
	// store issued and then revoked (within keepRevoked): no guess, so
	// it counts nothing towards the lockout; its client must be told to
	// get a new one (401), never 429.
	ErrRevoked = errors.New("token revoked")
	// ErrInvalidCode is returned for a login code that is unknown, used or
	// expired.
	ErrInvalidCode = errors.New("invalid, used or expired login link")
	// ErrNoSession is returned for a web session that does not exist, has
	// expired, or died with its token.
	ErrNoSession = errors.New("no such session, or it has expired")
	// ErrExpired marks (errors.Is) the [ErrInvalidToken] of a genuine
	// token past its expiry: no guess, so not counted towards the
	// lockout.
	ErrExpired = errors.New("token expired")
	// ErrScoped marks (errors.Is) the [ErrInvalidToken] that
	// [Store.Authenticate] returns for a scoped token: it opens /mcp only,
	// never the settings page or the JSON API (where it could mint an
	// unscoped token).
	ErrScoped = errors.New("a scoped token opens /mcp only")
	// ErrNotFound is returned when revoking a token that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument is returned for a malformed user ID or name.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed is returned by a Store used after Close.
	ErrClosed = errors.New("auth store closed")
)

// Options configures [Open]. A nil *Options means the defaults; so does
// every zero field.
type Options struct {
	// Logger receives failed attempts and lockouts (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now); tests inject a fake one.
	Now func() time.Time
	// Limiter counts failed attempts for [Store.Authenticate]. Nil means a
	// new Limiter with default options, the same Logger, Refusals and
	// clock.
	Limiter *Limiter
	// Refusals rate-limits the log lines of refused tokens (nil: every
	// one is logged). Share the server's, so that every surface draws on
	// one budget per reason.
	Refusals *guard.RefusalLog
	// OnEvent, when set, hears each token issued or revoked and each web
	// sign-in (a session created), for the audit log: kind is "token
	// issued", "token revoked" or "signin", credential the token's ID or
	// "session" — never a secret. Called after the change, outside any
	// transaction.
	OnEvent func(kind, user, credential string)
	// LoginLinkTTL is how long a login link stays valid (default 15 min).
	LoginLinkTTL time.Duration
	// SessionIdle ends a web session unused for that long (default 12 h).
	SessionIdle time.Duration
	// SessionMaxAge ends a web session that old, however busy (default 7
	// days).
	SessionMaxAge time.Duration
	// TouchEvery throttles the writes that record a token's last use and a
	// session's last activity (default 1 min).
	TouchEvery time.Duration
	// BusyTimeout is how long a statement waits for a lock held by another
	// process (default 5 s).
	BusyTimeout time.Duration
	_           struct{}
}

// Store keeps tokens, login links and web sessions in one SQLite file. It
// is safe for concurrent use.
type Store struct {
	db       *sql.DB
	path     string
	logger   *slog.Logger
	onEvent  func(kind, user, credential string)
	now      func() time.Time
	limiter  *Limiter
	refusals *guard.RefusalLog

	linkTTL, idle, maxAge, touchEvery time.Duration

	// wmu serializes this process's writes: SQLite has one writer at a
	// time, and queueing here is cheaper than its sleeping busy handler.
	wmu sync.Mutex

	revoked    api.Callbacks[string]    // revocation listeners, by token or grant ID
	userEvents api.Callbacks[UserEvent] // user listeners (disabled, deleted, groups)

	// seen is when each user's last activity was recorded (SeenUser's
	// throttle), guarded by seenMu.
	seenMu sync.Mutex
	seen   map[string]time.Time

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// migrations are applied in order, each once, and recorded in
// schema_migrations; append new ones, never edit old ones. Times are unix
// milliseconds; hashes are SHA-256 of the secret.
var migrations = []string{
	1: `CREATE TABLE tokens (
		id           TEXT    PRIMARY KEY,
		user_id      TEXT    NOT NULL, -- '' for operator tokens
		name         TEXT    NOT NULL,
		operator     INTEGER NOT NULL CHECK (operator IN (0, 1)),
		hash         BLOB    NOT NULL UNIQUE,
		created_at   INTEGER NOT NULL,
		last_used_at INTEGER NOT NULL DEFAULT 0
	) STRICT`,
	2: `CREATE INDEX tokens_user ON tokens (user_id)`,
	3: `CREATE TABLE login_links (
		hash       BLOB    PRIMARY KEY,
		user_id    TEXT    NOT NULL,
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL
	) STRICT, WITHOUT ROWID`,
	4: `CREATE TABLE sessions (
		hash         BLOB    PRIMARY KEY,
		user_id      TEXT    NOT NULL,
		operator     INTEGER NOT NULL CHECK (operator IN (0, 1)),
		token_id     TEXT    REFERENCES tokens (id) ON DELETE CASCADE,
		csrf         TEXT    NOT NULL,
		created_at   INTEGER NOT NULL,
		last_seen_at INTEGER NOT NULL
	) STRICT, WITHOUT ROWID`,
	5: `CREATE INDEX sessions_token ON sessions (token_id)`,
	6: `CREATE INDEX sessions_user ON sessions (user_id)`,
	// The hashes of revoked tokens, kept keepRevoked, so that one coming
	// back is known as revoked, not taken for a guess.
	7: `CREATE TABLE revoked_tokens (
		hash       BLOB    PRIMARY KEY,
		revoked_at INTEGER NOT NULL
	) STRICT, WITHOUT ROWID`,
	// The users the host knows (issue 19). Groups are JSON arrays of
	// strings; disabled_at 0 means enabled.
	8: `CREATE TABLE users (
		name            TEXT    PRIMARY KEY,
		created_at      INTEGER NOT NULL,
		last_seen_at    INTEGER NOT NULL DEFAULT 0,
		source          TEXT    NOT NULL,
		email           TEXT    NOT NULL DEFAULT '',
		oidc_issuer     TEXT    NOT NULL DEFAULT '',
		oidc_subject    TEXT    NOT NULL DEFAULT '',
		provider_groups TEXT    NOT NULL DEFAULT '[]',
		operator_groups TEXT    NOT NULL DEFAULT '[]',
		disabled_at     INTEGER NOT NULL DEFAULT 0,
		disabled_by     TEXT    NOT NULL DEFAULT ''
	) STRICT, WITHOUT ROWID`,
	9: `CREATE UNIQUE INDEX users_oidc ON users (oidc_issuer, oidc_subject) WHERE oidc_subject != ''`,
	// Before the users table, a user was a name in a token, a session or
	// a login link: each such name becomes a user, created when the
	// earliest of them was. (Names only in the settings store are added
	// by the host at start, RecordUsers.)
	10: `INSERT OR IGNORE INTO users (name, created_at, last_seen_at, source)
		SELECT user_id, min(created_at), max(last_seen), 'existing' FROM (
			SELECT user_id, created_at, last_used_at AS last_seen FROM tokens WHERE operator = 0 AND user_id != ''
			UNION ALL SELECT user_id, created_at, last_seen_at FROM sessions WHERE operator = 0 AND user_id != ''
			UNION ALL SELECT user_id, created_at, 0 FROM login_links
		) GROUP BY user_id`,
	// A token's scope (ext.Scope as JSON; '' = every tool of its user)
	// and expiry (0 = never). Older tokens get the defaults: unscoped,
	// never expiring.
	11: `ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT ''`,
	12: `ALTER TABLE tokens ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0`,
}

// keepRevoked is how long a revoked token is remembered as revoked
// (then it is unknown, as if never issued).
const keepRevoked = 90 * 24 * time.Hour

// FileName is the auth database's name in the host's data folder.
const FileName = "auth.db"

// Open opens (creating if needed) the auth database at path, normally
// <dataDir>/auth.db ([FileName]). The folder is created with mode 0700 and the file
// with mode 0600; an existing file that is group- or world-writable is
// refused, since whoever can write it can mint tokens. Close the store
// when done.
func Open(path string, opts *Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("auth: Open: empty path")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	lim := o.Limiter
	if lim == nil {
		lim = NewLimiter(&LimiterOptions{Now: now, Logger: logger, Refusals: o.Refusals})
	}
	db, abs, err := sqlitedb.Open(path, o.BusyTimeout, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening auth database %s: %w", abs, err)
	}
	s := &Store{
		db: db, path: abs, logger: logger, now: now, limiter: lim, refusals: o.Refusals, onEvent: o.OnEvent,
		linkTTL:    orDefault(o.LoginLinkTTL, 15*time.Minute),
		idle:       orDefault(o.SessionIdle, 12*time.Hour),
		maxAge:     orDefault(o.SessionMaxAge, 7*24*time.Hour),
		touchEvery: orDefault(o.TouchEvery, time.Minute),
		seen:       map[string]time.Time{},
	}
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Close closes the database. It may be called more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// Limiter returns the limiter that [Store.Authenticate] uses, for the
// other places that check credentials (the web sign-in, login links, the
// MCP endpoint, an authorization server): check the credential, then call
// [Limiter.Fail] when it is invalid.
func (s *Store) Limiter() *Limiter { return s.limiter }

// Path returns the database file's absolute path.
func (s *Store) Path() string { return s.path }

// write runs fn in an immediate transaction, one writer of this process at
// a time.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.mapErr(sqlitedb.InTx(ctx, s.db, fn))
}

// mapErr turns the error of a closed database into ErrClosed.
func (s *Store) mapErr(err error) error {
	if err != nil && s.closed.Load() {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

// Secret lengths and prefixes.
const (
	// TokenPrefix starts every bearer token, so that a leaked one is easy
	// to grep for.
	TokenPrefix = "ah_"
	// secretBytes is the entropy of every token, code and session ID.
	secretBytes = 32
)

// encodedLen is the length of secretBytes in unpadded base64url.
var encodedLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// newSecret returns prefix followed by 32 random bytes in unpadded
// base64url.
func newSecret(prefix string) string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// wellFormed reports whether secret looks like one newSecret(prefix) made.
func wellFormed(secret, prefix string) bool {
	if len(secret) != len(prefix)+encodedLen || secret[:len(prefix)] != prefix {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(secret[len(prefix):])
	return err == nil
}

// newID returns a short random identifier with the given prefix.
func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func hashOf(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// Fingerprint names a secret in logs without revealing it: the first 8
// hex digits of its SHA-256. It is safe to log for high-entropy secrets
// only (tokens, codes), never for passwords.
func Fingerprint(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:4])
}

// validUser is the host's shape of a user ID (host.ValidUser); it is
// repeated here because the host imports this package, not the reverse.
var validUser = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// validName is what a token's name may look like: printable, short.
var validName = regexp.MustCompile(`^[\p{L}\p{N} ._@+:/()-]{1,64}$`)

func checkUser(user string) error {
	if !validUser.MatchString(user) {
		return fmt.Errorf("user ID %q is not valid (want 1-128 of A-Z a-z 0-9 . _ @ + -, starting with a letter or digit): %w", user, ErrInvalidArgument)
	}
	return nil
}

func checkName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("token name %q is not valid (want 1-64 letters, digits, spaces or . _ @ + : / ( ) -): %w", name, ErrInvalidArgument)
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// event tells Options.OnEvent, when set.
func (s *Store) event(kind, user, credential string) {
	if s.onEvent != nil {
		s.onEvent(kind, user, credential)
	}
}
