package auth

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Token describes an issued bearer token; the token itself is never
// stored and cannot be read back.
type Token struct {
	// ID names the token in listings and for revocation, e.g.
	// "tok_3f9a0c1d2e4b5a69".
	ID string `json:"id"`
	// User is the token's user; empty for an operator token.
	User string `json:"user,omitempty"`
	// Name is what its owner called it, e.g. "laptop".
	Name string `json:"name"`
	// Operator marks an operator token (the status page, no user data).
	Operator bool `json:"operator,omitempty"`
	// Created is when it was issued.
	Created time.Time `json:"created"`
	// LastUsed is when it was last accepted (recorded at most once per
	// Options.TouchEvery); zero if never.
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// Principal is who a token or a web session speaks for.
type Principal struct {
	// User is the acting user; empty for the operator.
	User string
	// TokenID is the token that authenticated the request, or, for a web
	// session, the token that opened it (empty when a login link did).
	TokenID string
	// Operator marks the operator: the status page, and no user's data.
	Operator bool
}

// CreateToken issues a bearer token for user. The plaintext is returned
// once and never stored: keep it or lose it. A user not yet known is
// created ([SourceOperator]: only the operator, or the user themselves,
// issues tokens); a disabled one is [ErrUserDisabled].
func (s *Store) CreateToken(ctx context.Context, user, name string) (string, Token, error) {
	if err := checkUser(user); err != nil {
		return "", Token{}, err
	}
	return s.createToken(ctx, user, name, false)
}

// CreateOperatorToken issues an operator token: its principal has
// Operator set and no user. It opens the status page, nothing else.
func (s *Store) CreateOperatorToken(ctx context.Context, name string) (string, Token, error) {
	return s.createToken(ctx, "", name, true)
}

func (s *Store) createToken(ctx context.Context, user, name string, operator bool) (string, Token, error) {
	if err := checkName(name); err != nil {
		return "", Token{}, err
	}
	plain := newSecret(TokenPrefix)
	t := Token{ID: newID("tok_"), User: user, Name: name, Operator: operator, Created: s.now().Truncate(time.Millisecond)}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if !operator {
			if err := admitUser(ctx, tx, user, SourceOperator, t.Created); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, user_id, name, operator, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			t.ID, user, name, boolInt(operator), hashOf(plain), ms(t.Created))
		return err
	})
	if err != nil {
		return "", Token{}, fmt.Errorf("creating token: %w", err)
	}
	return plain, t, nil
}

// ListTokens lists the tokens of user, or every token (the operator's too)
// when user is "", oldest first.
func (s *Store) ListTokens(ctx context.Context, user string) ([]Token, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	q := `SELECT id, user_id, name, operator, created_at, last_used_at FROM tokens`
	var args []any
	if user != "" {
		q += ` WHERE user_id = ?`
		args = append(args, user)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", s.mapErr(err))
	}
	defer rows.Close()
	out := []Token{}
	for rows.Next() {
		var (
			t         Token
			op        int
			created   int64
			lastUsed  int64
			userField string
		)
		if err := rows.Scan(&t.ID, &userField, &t.Name, &op, &created, &lastUsed); err != nil {
			return nil, fmt.Errorf("listing tokens: %w", err)
		}
		t.User, t.Operator, t.Created, t.LastUsed = userField, op == 1, fromMS(created), fromMS(lastUsed)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tokens: %w", s.mapErr(err))
	}
	return out, nil
}

// RevokeToken deletes a token and every web session it opened, then tells
// the [Store.OnRevoke] subscribers. From the moment it returns, the token
// and those sessions are refused. Revoking an unknown ID is [ErrNotFound].
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	now := s.now()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM revoked_tokens WHERE revoked_at < ?`, ms(now.Add(-keepRevoked))); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO revoked_tokens (hash, revoked_at) SELECT hash, ? FROM tokens WHERE id = ?`, ms(now), id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("token %q: %w", id, ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoking token: %w", err)
	}
	s.logger.Info("token revoked", "token", id)
	s.revoked.Run(id)
	return nil
}

// OnRevoke registers fn to be called with a token's ID whenever it is
// revoked, after the revocation is committed. fn runs on the revoking
// goroutine and must return quickly. The returned function unregisters
// fn; it may be called more than once.
func (s *Store) OnRevoke(fn func(tokenID string)) (cancel func()) {
	return s.revoked.Add(fn)
}

// Verify checks a bearer token and returns its principal, recording its
// last use. A malformed, unknown or revoked token is [ErrInvalidToken]; a
// revoked one is also [ErrRevoked].
// Verify counts nothing towards the lockout: use [Store.Authenticate] for
// requests from the network.
func (s *Store) Verify(ctx context.Context, token string) (Principal, error) {
	if s.closed.Load() {
		return Principal{}, ErrClosed
	}
	if !wellFormed(token, TokenPrefix) {
		return Principal{}, ErrInvalidToken
	}
	want := hashOf(token)
	var (
		p        Principal
		op       int
		lastUsed int64
		stored   []byte
	)
	err := s.db.QueryRowContext(ctx, `SELECT id, user_id, operator, hash, last_used_at FROM tokens WHERE hash = ?`, want).
		Scan(&p.TokenID, &p.User, &op, &stored, &lastUsed)
	if errors.Is(err, sql.ErrNoRows) {
		var one int
		rerr := s.db.QueryRowContext(ctx, `SELECT 1 FROM revoked_tokens WHERE hash = ?`, want).Scan(&one)
		if rerr == nil {
			return Principal{}, fmt.Errorf("%w: %w", ErrRevoked, ErrInvalidToken)
		}
		return Principal{}, ErrInvalidToken
	}
	if err != nil {
		return Principal{}, fmt.Errorf("verifying token: %w", s.mapErr(err))
	}
	// The lookup matched the hash already; comparing again in constant
	// time costs nothing and keeps the check independent of the index.
	if subtle.ConstantTimeCompare(stored, want) != 1 {
		return Principal{}, ErrInvalidToken
	}
	p.Operator = op == 1
	if !p.Operator {
		s.SeenUser(ctx, p.User)
	}
	if now := s.now(); now.Sub(fromMS(lastUsed)) >= s.touchEvery {
		// A lost update only delays the next one; the check stands.
		_ = s.write(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE tokens SET last_used_at = ? WHERE id = ?`, ms(now), p.TokenID)
			return err
		})
	}
	return p, nil
}

// Authenticate is [Store.Verify] for a request from addr (a key from
// [guard.TrustedProxies.Key]). The token is checked first, so a valid one
// is accepted whatever others failed from the same address. An invalid one
// counts towards the lockout of its address and of itself, and is logged
// (rate-limited) with its [Fingerprint], never the token; when either is
// locked out the error also matches [ErrLockedOut] and carries a
// [*LockoutError] for the 429's Retry-After.
func (s *Store) Authenticate(ctx context.Context, addr, token string) (Principal, error) {
	p, err := s.Verify(ctx, token)
	if !errors.Is(err, ErrInvalidToken) {
		return p, err
	}
	if errors.Is(err, ErrRevoked) {
		// Issued here: no guess; its client must learn to get a new one.
		s.refusals.Refused(s.logger, "revoked bearer token refused", "addr", addr, "token_sha256", Fingerprint(token))
		return Principal{}, err
	}
	lerr := s.limiter.Fail(addr, token)
	s.refusals.Refused(s.logger, "bearer token refused", "addr", addr, "token_sha256", Fingerprint(token),
		"locked_out", lerr != nil)
	if lerr != nil {
		return Principal{}, errors.Join(err, lerr)
	}
	return Principal{}, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
