// Package fleetdb keeps what the operator's fleet view remembers of users
// who are not active: the resources that were not well when each was last
// deactivated, so that a restart of the host does not forget them until
// the user is active again. [SQLite] is its store, one file in the data
// folder ([FileName]) whose schema goose brings up to date through
// settings/sqlitedb, as every store's. A Store is safe for concurrent
// use; the host calls it on deactivations, deletions and when a kept
// user is active again, never on a tool call.
package fleetdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// FileName is the fleet database's name in the host's data folder.
const FileName = "fleet.db"

// Store keeps each user's entries.
type Store interface {
	// Put replaces what is kept of user with entries (none: forgets the
	// user).
	Put(ctx context.Context, user string, entries []api.FleetEntry) error
	// Delete forgets user.
	Delete(ctx context.Context, user string) error
	// All returns what is kept, by user.
	All(ctx context.Context) (map[string][]api.FleetEntry, error)
	Close() error
}

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("fleetdb: the store is closed")

// migrations are the schema, applied by goose through sqlitedb.Open:
// append new ones at the end.
var migrations = []string{
	1: `CREATE TABLE kept (
		user_id TEXT    NOT NULL PRIMARY KEY,
		entries TEXT    NOT NULL, -- JSON: the user's FleetEntry list
		updated INTEGER NOT NULL  -- unix nanoseconds
	) STRICT;`,
}

// SQLite is the [Store] in one SQLite file.
type SQLite struct {
	db     *sql.DB
	closed atomic.Bool
}

// OpenSQLite opens (creating) the fleet database at path (0600, in a 0700
// folder) and brings its schema up to date.
func OpenSQLite(path string) (*SQLite, error) {
	db, abs, err := sqlitedb.Open(path, 0, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening the fleet database %s: %w", abs, err)
	}
	return &SQLite{db: db}, nil
}

// Put implements [Store].
func (s *SQLite) Put(ctx context.Context, user string, entries []api.FleetEntry) error {
	if len(entries) == 0 {
		return s.Delete(ctx, user)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return fmt.Errorf("fleetdb: encoding the entries of user %q: %w", user, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO kept (user_id, entries, updated) VALUES (?, ?, ?)
		ON CONFLICT (user_id) DO UPDATE SET entries = excluded.entries, updated = excluded.updated`,
		user, string(raw), time.Now().UnixNano()); err != nil {
		return fmt.Errorf("fleetdb: keeping the entries of user %q: %w", user, err)
	}
	return nil
}

// Delete implements [Store].
func (s *SQLite) Delete(ctx context.Context, user string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM kept WHERE user_id = ?`, user); err != nil {
		return fmt.Errorf("fleetdb: forgetting user %q: %w", user, err)
	}
	return nil
}

// All implements [Store]. A row that does not decode is left out and
// named in the error, beside the others.
func (s *SQLite) All(ctx context.Context) (map[string][]api.FleetEntry, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.db.QueryContext(ctx, `SELECT user_id, entries FROM kept ORDER BY user_id`)
	if err != nil {
		return nil, fmt.Errorf("fleetdb: reading: %w", err)
	}
	defer rows.Close()
	out := map[string][]api.FleetEntry{}
	var errs []error
	for rows.Next() {
		var user, raw string
		if err := rows.Scan(&user, &raw); err != nil {
			return nil, fmt.Errorf("fleetdb: reading a row: %w", err)
		}
		var entries []api.FleetEntry
		if err := json.Unmarshal([]byte(raw), &entries); err != nil {
			errs = append(errs, fmt.Errorf("fleetdb: the entries of user %q do not decode: %w", user, err))
			continue
		}
		out[user] = entries
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fleetdb: reading: %w", err)
	}
	return out, errors.Join(errs...)
}

// Close implements [Store].
func (s *SQLite) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

var _ Store = (*SQLite)(nil)
