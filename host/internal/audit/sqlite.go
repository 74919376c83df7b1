package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// FileName is the audit database's name in the host's data folder.
const FileName = "audit.db"

// migrations are the audit database's schema, applied by goose through
// sqlitedb.Open: append new ones at the end.
var migrations = []string{
	1: `CREATE TABLE records (
		id          INTEGER PRIMARY KEY AUTOINCREMENT,
		at          INTEGER NOT NULL, -- unix nanoseconds
		kind        TEXT    NOT NULL,
		user_id     TEXT    NOT NULL,
		credential  TEXT    NOT NULL,
		session     TEXT    NOT NULL,
		server      TEXT    NOT NULL,
		tool        TEXT    NOT NULL,
		tool_hash   TEXT    NOT NULL,
		duration_ns INTEGER NOT NULL,
		outcome     TEXT    NOT NULL,
		reason      TEXT    NOT NULL,
		req_bytes   INTEGER NOT NULL,
		res_bytes   INTEGER NOT NULL,
		arguments   TEXT    NOT NULL,
		result      TEXT    NOT NULL
	) STRICT;
	CREATE INDEX records_at ON records (at);
	CREATE INDEX records_user ON records (user_id, id);`,
}

// SQLite is the [Store] in one SQLite file.
type SQLite struct {
	db     *sql.DB
	wmu    sync.Mutex
	closed atomic.Bool
	// inserts are the prepared multi-row INSERTs by their number of rows
	// (guarded by wmu; closed by Close): compiling one per transaction
	// was 40% of the writer's CPU.
	inserts map[int]*sql.Stmt
}

// OpenSQLite opens (creating) the audit database at path (0600, in a 0700
// folder) and brings its schema up to date.
func OpenSQLite(path string) (*SQLite, error) {
	db, abs, err := sqlitedb.Open(path, 0, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening the audit database %s: %w", abs, err)
	}
	return &SQLite{db: db}, nil
}

// Close closes the database.
func (s *SQLite) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.wmu.Lock()
	for _, st := range s.inserts {
		_ = st.Close()
	}
	s.inserts = nil
	s.wmu.Unlock()
	return s.db.Close()
}

// Append implements [Store].
func (s *SQLite) Append(ctx context.Context, recs []Record) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(recs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		// Multi-row INSERTs of up to insertRows rows: several times the
		// rate of one statement a row.
		for len(recs) > 0 {
			n := min(len(recs), insertRows)
			st, err := s.insert(ctx, n)
			if err != nil {
				return err
			}
			args := make([]any, 0, n*15)
			for _, r := range recs[:n] {
				args = append(args, r.Time.UnixNano(), r.Kind, r.User, r.Credential, r.Session, r.Server, r.Tool, r.ToolHash,
					int64(r.Duration), r.Outcome, r.Reason, r.ReqBytes, r.ResBytes, r.Arguments, r.Result)
			}
			if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
				return fmt.Errorf("audit: writing %d records: %w", n, err)
			}
			recs = recs[n:]
		}
		return nil
	})
}

// insert returns the prepared INSERT of n rows; s.wmu is held.
func (s *SQLite) insert(ctx context.Context, n int) (*sql.Stmt, error) {
	if st := s.inserts[n]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, insertHead+strings.Repeat(insertRow+",", n-1)+insertRow)
	if err != nil {
		return nil, fmt.Errorf("audit: preparing the insert of %d records: %w", n, err)
	}
	if s.inserts == nil {
		s.inserts = map[int]*sql.Stmt{}
	}
	s.inserts[n] = st
	return st, nil
}

const (
	insertRows = 64 // 64 × 15 parameters, well below SQLite's 32766
	insertHead = `INSERT INTO records (at, kind, user_id, credential, session, server, tool, tool_hash,
		duration_ns, outcome, reason, req_bytes, res_bytes, arguments, result) VALUES `
	insertRow = `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
)

// Query implements [Store].
func (s *SQLite) Query(ctx context.Context, f Filter) ([]Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	var where []string
	var args []any
	add := func(cond string, v any) {
		where = append(where, cond)
		args = append(args, v)
	}
	if f.User != "" {
		add("user_id = ?", f.User)
	}
	if f.Server != "" {
		add("server = ?", f.Server)
	}
	if f.Tool != "" {
		add("tool = ?", f.Tool)
	}
	if f.Outcome != "" {
		add("outcome = ?", f.Outcome)
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if !f.Since.IsZero() {
		add("at >= ?", f.Since.UnixNano())
	}
	if f.AfterID > 0 {
		add("id > ?", f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT id, at, kind, user_id, credential, session, server, tool, tool_hash, duration_ns, outcome, reason,
		req_bytes, res_bytes, arguments, result FROM records`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: querying: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		var at, dur int64
		if err := rows.Scan(&r.ID, &at, &r.Kind, &r.User, &r.Credential, &r.Session, &r.Server, &r.Tool, &r.ToolHash, &dur,
			&r.Outcome, &r.Reason, &r.ReqBytes, &r.ResBytes, &r.Arguments, &r.Result); err != nil {
			return nil, fmt.Errorf("audit: reading a record: %w", err)
		}
		r.Time, r.Duration = time.Unix(0, at).UTC(), time.Duration(dur)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: reading records: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Sweep implements [Store].
func (s *SQLite) Sweep(ctx context.Context, before time.Time, maxRows int64) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var n int64
	err := sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM records WHERE at < ?`, before.UnixNano())
		if err != nil {
			return fmt.Errorf("audit: deleting records before %s: %w", before.Format(time.RFC3339), err)
		}
		n, _ = res.RowsAffected()
		if maxRows <= 0 {
			return nil
		}
		res, err = tx.ExecContext(ctx, `DELETE FROM records WHERE id <= (SELECT id FROM records ORDER BY id DESC LIMIT 1 OFFSET ?)`, maxRows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("audit: deleting records beyond %d rows: %w", maxRows, err)
		}
		m, _ := res.RowsAffected()
		n += m
		return nil
	})
	return n, err
}
