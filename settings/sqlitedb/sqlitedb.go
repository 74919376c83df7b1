// Package sqlitedb opens the SQLite files of agenthost's stores (settings,
// and the host's tokens) the same way: the folder 0700 and the file 0600,
// an existing file or WAL file that is group- or world-writable refused
// (whoever can write it can change every user's data); WAL journal,
// foreign keys, immediate write transactions and a busy timeout; and the
// store's ordered migrations applied, recorded in schema_migrations.
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

// migrate applies the missing migrations in one immediate transaction, so
// two processes opening one file never apply one twice.
func migrate(db *sql.DB, migrations []string) error {
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL -- unix milliseconds
	) STRICT`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	latest := len(migrations) - 1
	if current > latest {
		return fmt.Errorf("schema version %d is newer than this program supports (%d)", current, latest)
	}
	for v := current + 1; v <= latest; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("applying migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().UnixMilli()); err != nil {
			return fmt.Errorf("recording migration %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
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
