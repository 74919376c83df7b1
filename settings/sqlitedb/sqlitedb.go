// Package sqlitedb opens the SQLite files of agenthost's stores (settings,
// and the host's tokens) the same way: the folder 0700 and the file 0600,
// an existing file or WAL file that is group- or world-writable refused
// (whoever can write it can change every user's data); WAL journal,
// foreign keys, immediate write transactions and a busy timeout; and the
// store's ordered migrations applied with goose, the one migration tool of
// every store (recorded in goose_db_version, mirrored in
// schema_migrations for the binaries before goose; see migrate).
//
// Open is safe for concurrent use, also by several processes on one file.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	_ "modernc.org/sqlite" // the pure Go driver, registered as "sqlite"
)

// Open opens (creating if needed) the database at path and applies
// migrations: migrations[v] brings the schema to version v; index 0 is
// unused. A database whose schema is newer than len(migrations)-1 is
// refused. It returns the database and the file's absolute path.
func Open(path string, busyTimeout time.Duration, migrations []string) (*sql.DB, string, error) {
	if busyTimeout <= 0 {
		busyTimeout = 5 * time.Second
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, path, err
	}
	if err := prepareFile(abs); err != nil {
		return nil, abs, err
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, abs, err
	}
	if err := check(db); err != nil {
		_ = db.Close()
		return nil, abs, err
	}
	if err := migrate(db, migrations); err != nil {
		_ = db.Close()
		return nil, abs, err
	}
	return db, abs, nil
}

// prepareFile creates the folder (0700) and the file (0600), or checks the
// modes of an existing file and its WAL files.
func prepareFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return prepareFile(path) // another process created it first
		}
		if err != nil {
			return err
		}
		return f.Close()
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (mode %s)", fi.Mode())
	}
	if runtime.GOOS == "windows" {
		return nil // no Unix permission bits
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if m := fi.Mode().Perm(); m&0o022 != 0 {
			return fmt.Errorf("%s is group- or world-writable (mode %04o); run chmod 600 on it", p, m)
		}
	}
	return nil
}

// check makes sure the pragmas took.
func check(db *sql.DB) error {
	ctx := context.Background() // opening is not cancellable; it is short
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("checking journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode is %q, want \"wal\"", mode)
	}
	var fk int
	if err := db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		return fmt.Errorf("foreign keys are not enabled (%d, %v)", fk, err)
	}
	return nil
}

// migrate brings the schema up to date with goose (pressly/goose), the one
// migration tool of every store: migrations[v] is version v, run in its
// own transaction, recorded in goose_db_version. The whole step holds the
// database's migration lock (migrationLock), so two processes opening one
// file never apply one twice.
//
// A database of the binaries before goose (versions in schema_migrations
// only) is adopted: its versions are recorded in goose_db_version first.
// Every version applied is also recorded in schema_migrations, so those
// older binaries refuse a newer schema ("schema version N is newer than
// this program supports") instead of running on it; so does this one.
func migrate(db *sql.DB, migrations []string) error {
	ctx := context.Background()
	latest := int64(len(migrations) - 1)
	gm := make([]*goose.Migration, 0, len(migrations))
	for v := 1; v < len(migrations); v++ {
		stmt := migrations[v]
		gm = append(gm, goose.NewGoMigration(int64(v), &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, stmt)
			return err
		}}, nil))
	}
	unlock, err := migrationLock(ctx, db)
	if err != nil {
		return err
	}
	defer unlock()
	if err := adoptLegacy(ctx, db); err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, nil,
		goose.WithGoMigrations(gm...), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if _, err := db.ExecContext(ctx, legacyTable); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var legacy int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&legacy); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	current = max(current, legacy)
	if current > latest {
		return fmt.Errorf("schema version %d is newer than this program supports (%d): it was written by a newer agenthost; run that one, or restore a backup taken before the upgrade", current, latest)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return mirrorLegacy(ctx, db, latest)
}

// legacyTable is where the binaries before goose recorded versions.
const legacyTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL -- unix milliseconds
	) STRICT`

// adoptLegacy records in goose_db_version the versions a database of the
// binaries before goose has in schema_migrations, when goose has not
// recorded any yet.
func adoptLegacy(ctx context.Context, db *sql.DB) error {
	var adopted, legacy int
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'goose_db_version'),
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations')`).Scan(&adopted, &legacy); err != nil {
		return fmt.Errorf("reading the schema's tables: %w", err)
	}
	if adopted > 0 || legacy == 0 {
		return nil
	}
	store, err := database.NewStore(database.DialectSQLite3, "goose_db_version")
	if err != nil {
		return err
	}
	return InTx(ctx, db, func(tx *sql.Tx) error {
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&n); err != nil {
			return fmt.Errorf("reading the schema version before goose: %w", err)
		}
		if err := store.CreateVersionTable(ctx, tx); err != nil {
			return fmt.Errorf("creating goose_db_version: %w", err)
		}
		for v := int64(0); v <= n; v++ {
			if err := store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
				return fmt.Errorf("recording version %d in goose_db_version: %w", v, err)
			}
		}
		return nil
	})
}

// mirrorLegacy records versions 1..latest in schema_migrations (see
// migrate).
func mirrorLegacy(ctx context.Context, db *sql.DB, latest int64) error {
	return InTx(ctx, db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, legacyTable); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		for v := int64(1); v <= latest; v++ {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().UnixMilli()); err != nil {
				return fmt.Errorf("recording version %d in schema_migrations: %w", v, err)
			}
		}
		return nil
	})
}

// Migration lock bounds: a holder older than staleLock died mid-way (a
// migration takes milliseconds), and its lock is taken over.
const staleLock = 2 * time.Minute

// migrationLock takes the database's migration lock, a row of
// agenthost_migration_lock that one process at a time can insert: SQLite
// has no advisory lock, and goose's own lockers are PostgreSQL's. It
// polls (up to a minute) while another process holds it, and takes over a
// lock older than staleLock. The returned function releases it.
func migrationLock(ctx context.Context, db *sql.DB) (unlock func(), err error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS agenthost_migration_lock (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		taken INTEGER NOT NULL -- unix milliseconds
	) STRICT`); err != nil {
		return nil, fmt.Errorf("creating the migration lock: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	delay := time.Millisecond
	for {
		now := time.Now()
		res, err := db.ExecContext(ctx, `INSERT INTO agenthost_migration_lock (id, taken) VALUES (1, ?)
			ON CONFLICT (id) DO UPDATE SET taken = excluded.taken WHERE taken < ?`,
			now.UnixMilli(), now.Add(-staleLock).UnixMilli())
		if err != nil {
			return nil, fmt.Errorf("taking the migration lock: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return func() { _, _ = db.ExecContext(context.Background(), `DELETE FROM agenthost_migration_lock`) }, nil
		}
		if now.After(deadline) {
			return nil, errors.New("another process has held the migration lock for over a minute")
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// InTx runs fn in a write transaction of db (BEGIN IMMEDIATE): it commits
// when fn returns nil and rolls back when fn fails, returning fn's error
// untouched.
func InTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
