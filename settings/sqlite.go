package settings

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// SQLiteOptions configures [OpenSQLite]. A nil *SQLiteOptions means the
// defaults.
type SQLiteOptions struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection (for instance another process) before failing. Zero means
	// 5 seconds.
	BusyTimeout time.Duration
}

// SQLiteStore is a [Store] in one SQLite file (modernc.org/sqlite, pure
// Go, WAL mode). It is safe for concurrent use, and several processes may
// open the same file: Update's version check keeps their writes from
// overwriting each other.
type SQLiteStore struct {
	db    *sql.DB
	path  string
	locks keyLocks
	// wmu serializes this process's writes: SQLite has one writer at a
	// time, and queueing here is cheaper than SQLite's sleeping busy
	// handler. busy_timeout still covers other processes.
	wmu sync.Mutex

	get, set, insert, swap *sql.Stmt

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// migrations are applied in order, each once, and recorded in
// schema_migrations; append new ones, never edit old ones.
var migrations = []string{
	1: `CREATE TABLE settings (
		ext        TEXT    NOT NULL,
		user_id    TEXT    NOT NULL,
		section    TEXT    NOT NULL,
		value      TEXT    NOT NULL CHECK (json_valid(value) AND json_type(value) = 'object'),
		version    INTEGER NOT NULL DEFAULT 1,
		updated_at INTEGER NOT NULL, -- unix milliseconds
		PRIMARY KEY (ext, user_id, section)
	) STRICT, WITHOUT ROWID`,
	2: `CREATE INDEX settings_user ON settings (user_id)`,
}

// OpenSQLite opens (creating if needed) the settings database at path.
// The folder is created with mode 0700 and the file with mode 0600; an
// existing file that is group- or world-writable is refused, since anyone
// who can write it can change every user's settings. Migrations run on
// open. Close the store when done.
func OpenSQLite(path string, opts *SQLiteOptions) (*SQLiteStore, error) {
	if path == "" {
		return nil, errors.New("settings: OpenSQLite: empty path")
	}
	if opts == nil {
		opts = &SQLiteOptions{}
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	db, abs, err := sqlitedb.Open(path, busy, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening settings database %s: %w", abs, err)
	}
	s := &SQLiteStore{db: db, path: abs}
	if err := s.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening settings database %s: %w", abs, err)
	}
	return s, nil
}

// init prepares the statements.
func (s *SQLiteStore) init() error {
	ctx := context.Background() // opening is not cancellable; it is short
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.get, `SELECT value, version FROM settings WHERE ext = ? AND user_id = ? AND section = ?`},
		{&s.set, `INSERT INTO settings (ext, user_id, section, value, version, updated_at) VALUES (?, ?, ?, ?, 1, ?)
			ON CONFLICT (ext, user_id, section) DO UPDATE SET value = excluded.value, version = settings.version + 1, updated_at = excluded.updated_at`},
		{&s.insert, `INSERT INTO settings (ext, user_id, section, value, version, updated_at) VALUES (?, ?, ?, ?, 1, ?)
			ON CONFLICT (ext, user_id, section) DO NOTHING`},
		{&s.swap, `UPDATE settings SET value = ?, version = version + 1, updated_at = ?
			WHERE ext = ? AND user_id = ? AND section = ? AND version = ?`},
	} {
		st, err := s.db.PrepareContext(ctx, p.sql)
		if err != nil {
			return fmt.Errorf("preparing statement: %w", err)
		}
		*p.stmt = st
	}
	return nil
}

// Path returns the database file's absolute path.
func (s *SQLiteStore) Path() string { return s.path }

// fail turns a database error into the store's error, reporting ErrClosed
// once the store is closed.
func (s *SQLiteStore) fail(err error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return err
}

// Get returns the section's values, or "{}" when none are set.
func (s *SQLiteStore) Get(ctx context.Context, ext, user, section string) (json.RawMessage, error) {
	v, _, err := s.read(ctx, ext, user, section)
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", sectionRef(ext, user, section), err)
	}
	return v, nil
}

func (s *SQLiteStore) read(ctx context.Context, ext, user, section string) (json.RawMessage, int64, error) {
	if err := checkKey(ext, user, section); err != nil {
		return nil, 0, err
	}
	if s.closed.Load() {
		return nil, 0, ErrClosed
	}
	var (
		v       []byte
		version int64
	)
	err := s.get.QueryRowContext(ctx, ext, user, section).Scan(&v, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return json.RawMessage("{}"), 0, nil
	}
	if err != nil {
		return nil, 0, s.fail(err)
	}
	return v, version, nil
}

// Set replaces the section's values.
func (s *SQLiteStore) Set(ctx context.Context, ext, user, section string, values json.RawMessage) error {
	if err := s.write(ctx, ext, user, section, values, -1); err != nil {
		return fmt.Errorf("setting %s: %w", sectionRef(ext, user, section), err)
	}
	return nil
}

// write stores values if the row's version is want (0: absent), or
// unconditionally when want is -1.
func (s *SQLiteStore) write(ctx context.Context, ext, user, section string, values json.RawMessage, want int64) error {
	if err := checkKey(ext, user, section); err != nil {
		return err
	}
	v, err := compactObject(values)
	if err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	now := time.Now().UnixMilli()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var res sql.Result
	switch {
	case want < 0:
		res, err = s.set.ExecContext(ctx, ext, user, section, string(v), now)
	case want == 0:
		res, err = s.insert.ExecContext(ctx, ext, user, section, string(v), now)
	default:
		res, err = s.swap.ExecContext(ctx, string(v), now, ext, user, section, want)
	}
	if err != nil {
		return s.fail(err)
	}
	if want >= 0 {
		n, err := res.RowsAffected()
		if err != nil {
			return s.fail(err)
		}
		if n == 0 {
			return errConflict
		}
	}
	return nil
}

// Update is an atomic read-modify-write of one section; see [Store]. It
// runs fn outside any database transaction, then writes only if the row's
// version is still the one fn saw, retrying otherwise.
func (s *SQLiteStore) Update(ctx context.Context, ext, user, section string, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	if err := update(ctx, &s.locks, rowKey{ext, user, section}, s.read, s.write, fn); err != nil {
		return fmt.Errorf("updating %s: %w", sectionRef(ext, user, section), err)
	}
	return nil
}

// Sections returns every section the user has values for in ext.
func (s *SQLiteStore) Sections(ctx context.Context, ext, user string) (map[string]json.RawMessage, error) {
	out, err := s.sections(ctx, ext, user)
	if err != nil {
		return nil, fmt.Errorf("listing sections of extension %q for user %q: %w", ext, user, err)
	}
	return out, nil
}

func (s *SQLiteStore) sections(ctx context.Context, ext, user string) (map[string]json.RawMessage, error) {
	if err := checkKey(ext, user, "-"); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, `SELECT section, value FROM settings WHERE ext = ? AND user_id = ?`, ext, user)
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var (
			section string
			v       []byte
		)
		if err := rows.Scan(&section, &v); err != nil {
			return nil, s.fail(err)
		}
		out[section] = v
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(err)
	}
	return out, nil
}

// DeleteUser removes all of the user's values, in every extension.
func (s *SQLiteStore) DeleteUser(ctx context.Context, user string) error {
	err := checkKey("-", user, "-")
	if err == nil && s.closed.Load() {
		err = ErrClosed
	}
	if err == nil {
		s.wmu.Lock()
		_, err = s.db.ExecContext(ctx, `DELETE FROM settings WHERE user_id = ?`, user)
		s.wmu.Unlock()
		err = s.failIf(err)
	}
	if err != nil {
		return fmt.Errorf("deleting user %q: %w", user, err)
	}
	return nil
}

// failIf is fail for a possibly nil error.
func (s *SQLiteStore) failIf(err error) error {
	if err == nil {
		return nil
	}
	return s.fail(err)
}

// Users returns, sorted, the users that have values in ext.
func (s *SQLiteStore) Users(ctx context.Context, ext string) ([]string, error) {
	users, err := s.users(ctx, ext)
	if err != nil {
		return nil, fmt.Errorf("listing users of extension %q: %w", ext, err)
	}
	return users, nil
}

func (s *SQLiteStore) users(ctx context.Context, ext string) ([]string, error) {
	if err := checkKey(ext, "-", "-"); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT user_id FROM settings WHERE ext = ? ORDER BY user_id`, ext)
	if err != nil {
		return nil, s.fail(err)
	}
	defer rows.Close()
	users := []string{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, s.fail(err)
		}
		users = append(users, u)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(err)
	}
	return users, nil
}

// Close closes the database. It may be called more than once,
// concurrently; later calls return the first call's result. Calls that are
// running when Close is called may fail with [ErrClosed].
func (s *SQLiteStore) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		var errs []error
		for _, st := range []*sql.Stmt{s.get, s.set, s.insert, s.swap} {
			if st != nil {
				errs = append(errs, st.Close())
			}
		}
		errs = append(errs, s.db.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("closing settings database %s: %w", s.path, err)
		}
	})
	return s.closeErr
}
