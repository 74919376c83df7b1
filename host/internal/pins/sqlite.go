package pins

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// FileName is the pins database's name in the host's data folder.
const FileName = "pins.db"

// migrations are the pins database's schema, applied by goose through
// sqlitedb.Open: append new ones at the end.
var migrations = []string{
	1: `CREATE TABLE pins (
		user_id       TEXT    NOT NULL,
		server        TEXT    NOT NULL,
		tool          TEXT    NOT NULL, -- full name, server/tool
		by_operator   INTEGER NOT NULL,
		mode          TEXT    NOT NULL,
		hash          TEXT    NOT NULL, -- the approved baseline; '' for none
		def           TEXT    NOT NULL,
		approved_at   INTEGER NOT NULL, -- unix nanoseconds; 0 for none
		approved_by   TEXT    NOT NULL,
		pending_hash  TEXT    NOT NULL, -- '' when nothing waits
		pending_def   TEXT    NOT NULL,
		pending_since INTEGER NOT NULL,
		PRIMARY KEY (user_id, tool)
	) STRICT;
	CREATE INDEX pins_server ON pins (server, user_id);
	CREATE INDEX pins_pending ON pins (pending_hash) WHERE pending_hash != '';`,
}

// SQLite is the [Store] in one SQLite file.
type SQLite struct {
	db *sql.DB
}

// OpenSQLite opens (creating) the pins database at path (0600, in a 0700
// folder) and brings its schema up to date.
func OpenSQLite(path string) (*SQLite, error) {
	db, abs, err := sqlitedb.Open(path, 0, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening the pins database %s: %w", abs, err)
	}
	return &SQLite{db: db}, nil
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

const columns = `user_id, server, tool, by_operator, mode, hash, def, approved_at, approved_by, pending_hash, pending_def, pending_since`

// Rows implements [Store].
func (s *SQLite) Rows(ctx context.Context, f Filter) ([]Row, error) {
	var where []string
	var args []any
	if f.User != "" {
		where, args = append(where, "user_id = ?"), append(args, f.User)
	}
	if f.Server != "" {
		where, args = append(where, "server = ?"), append(args, f.Server)
	}
	if f.Tool != "" {
		where, args = append(where, "tool = ?"), append(args, f.Tool)
	}
	if f.PendingOnly {
		where = append(where, "pending_hash != ''")
	}
	q := "SELECT " + columns + " FROM pins"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY user_id, server, tool", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var byOp int
		var mode string
		var at, since int64
		if err := rows.Scan(&r.User, &r.Server, &r.Tool, &byOp, &mode, &r.Hash, &r.Def, &at, &r.ApprovedBy, &r.PendingHash, &r.PendingDef, &since); err != nil {
			return nil, err
		}
		r.ByOperator, r.Mode = byOp != 0, ext.PinMode(mode)
		if at != 0 {
			r.ApprovedAt = time.Unix(0, at).UTC()
		}
		if since != 0 {
			r.PendingSince = time.Unix(0, since).UTC()
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Put implements [Store].
func (s *SQLite) Put(ctx context.Context, rows []Row) error {
	return sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, "INSERT OR REPLACE INTO pins ("+columns+") VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")
		if err != nil {
			return err
		}
		defer st.Close()
		for _, r := range rows {
			byOp := 0
			if r.ByOperator {
				byOp = 1
			}
			if _, err := st.ExecContext(ctx, r.User, r.Server, r.Tool, byOp, string(r.Mode), r.Hash, r.Def, nanos(r.ApprovedAt),
				r.ApprovedBy, r.PendingHash, r.PendingDef, nanos(r.PendingSince)); err != nil {
				return err
			}
		}
		return nil
	})
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// ApprovedByOperator implements [Store].
func (s *SQLite) ApprovedByOperator(ctx context.Context, tool, hash string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pins WHERE tool = ? AND hash = ? AND by_operator = 1 AND approved_by = 'operator'", tool, hash).Scan(&n)
	return n > 0, err
}
