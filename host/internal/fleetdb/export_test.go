package fleetdb

import "context"

// PutRaw keeps raw as user's entries, as they are (tests: a row that
// does not decode).
func (s *SQLite) PutRaw(ctx context.Context, user, raw string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO kept (user_id, entries, updated) VALUES (?, ?, 0)`, user, raw)
	return err
}
