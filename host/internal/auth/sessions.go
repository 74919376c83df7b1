package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// sessionPrefix starts every web session ID (the cookie's value).
const sessionPrefix = "ahs_"

// Session is a signed-in browser: a principal, its CSRF token and its
// lifetimes.
type Session struct {
	Principal
	// CSRF is the token every state-changing form of this session must
	// carry. It is random per session and constant for its life.
	CSRF string
	// Created is when the session was opened.
	Created time.Time
	// LastSeen is its last recorded activity (recorded at most once per
	// Options.TouchEvery).
	LastSeen time.Time
	// Expires is when it ends unless used again: the earlier of LastSeen
	// plus the idle limit and Created plus the maximum age.
	Expires time.Time
}

// CreateSession opens a web session for p and returns its ID (for the
// cookie) and CSRF token. A session opened with a token (p.TokenID set)
// ends when that token is revoked. Only the ID's hash is stored. A
// disabled user's is [ErrUserDisabled].
func (s *Store) CreateSession(ctx context.Context, p Principal) (id, csrf string, err error) {
	if p.Operator {
		if p.User != "" {
			return "", "", fmt.Errorf("an operator session has no user: %w", ErrInvalidArgument)
		}
	} else if err := checkUser(p.User); err != nil {
		return "", "", err
	}
	id, csrf = newSecret(sessionPrefix), newSecret("")
	now := s.now()
	var tokenID any // NULL for a session a login link opened
	if p.TokenID != "" {
		tokenID = p.TokenID
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE last_seen_at <= ? OR created_at <= ?`,
			ms(now.Add(-s.idle)), ms(now.Add(-s.maxAge))); err != nil {
			return err
		}
		if !p.Operator {
			if err := admitUser(ctx, tx, p.User, SourceOperator, now); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions (hash, user_id, operator, token_id, csrf, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			hashOf(id), p.User, boolInt(p.Operator), tokenID, csrf, ms(now), ms(now))
		return err
	})
	if err != nil {
		// A foreign key failure means the token was revoked meanwhile.
		return "", "", fmt.Errorf("creating session: %w", err)
	}
	cred := "session"
	if p.TokenID != "" {
		cred = "session of token " + p.TokenID
	}
	s.event("signin", p.User, cred)
	return id, csrf, nil
}

// Session returns the live session with this ID and records its activity.
// An unknown ID, an expired session (idle too long or too old) and one
// whose token was revoked or has expired are all [ErrNoSession].
func (s *Store) Session(ctx context.Context, id string) (*Session, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if !wellFormed(id, sessionPrefix) {
		return nil, ErrNoSession
	}
	h := hashOf(id)
	var (
		ss                Session
		op                int
		tokenID           sql.NullString
		created, lastSeen int64
		tokenExpires      int64 // of the token that opened it; 0: never
	)
	err := s.db.QueryRowContext(ctx, `SELECT s.user_id, s.operator, s.token_id, s.csrf, s.created_at, s.last_seen_at, COALESCE(t.expires_at, 0)
		FROM sessions s LEFT JOIN tokens t ON t.id = s.token_id WHERE s.hash = ?`, h).
		Scan(&ss.User, &op, &tokenID, &ss.CSRF, &created, &lastSeen, &tokenExpires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("reading session: %w", s.mapErr(err))
	}
	ss.Operator, ss.TokenID = op == 1, tokenID.String
	ss.Created, ss.LastSeen = fromMS(created), fromMS(lastSeen)
	now := s.now()
	tokenEnd := fromMS(tokenExpires)
	if !now.Before(ss.LastSeen.Add(s.idle)) || !now.Before(ss.Created.Add(s.maxAge)) || (!tokenEnd.IsZero() && !now.Before(tokenEnd)) {
		_ = s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE hash = ?`, h)
			return err
		})
		return nil, ErrNoSession
	}
	if !ss.Operator {
		s.SeenUser(ctx, ss.User)
	}
	if now.Sub(ss.LastSeen) >= s.touchEvery {
		if err := s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE sessions SET last_seen_at = ? WHERE hash = ?`, ms(now), h)
			return err
		}); err == nil {
			ss.LastSeen = now
		}
	}
	ss.Expires = ss.LastSeen.Add(s.idle)
	if abs := ss.Created.Add(s.maxAge); abs.Before(ss.Expires) {
		ss.Expires = abs
	}
	if !tokenEnd.IsZero() && tokenEnd.Before(ss.Expires) {
		ss.Expires = tokenEnd // it ends with the expiring token that opened it
	}
	return &ss, nil
}

// DeleteSession ends a session (sign-out). Deleting an unknown or expired
// session is not an error.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE hash = ?`, hashOf(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting session: %w", err)
	}
	return nil
}

// DeleteUserSessions ends every web session of user ("sign out
// everywhere") and returns how many there were.
func (s *Store) DeleteUserSessions(ctx context.Context, user string) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE user_id = ? AND operator = 0`, user)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("deleting sessions: %w", err)
	}
	return int(n), nil
}
