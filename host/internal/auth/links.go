package auth

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// codePrefix starts every login code.
const codePrefix = "ahl_"

// CreateLoginLink issues a one-time login code for user, valid for ttl (0
// means Options.LoginLinkTTL, 15 minutes by default). Put it in a link
// such as /settings/login?code=CODE. Only its hash is stored. A user not
// yet known is created ([SourceOperator]); a disabled one is
// [ErrUserDisabled] (disabling voids their links).
func (s *Store) CreateLoginLink(ctx context.Context, user string, ttl time.Duration) (string, error) {
	if err := checkUser(user); err != nil {
		return "", err
	}
	if ttl <= 0 {
		ttl = s.linkTTL
	}
	code := newSecret(codePrefix)
	now := s.now()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM login_links WHERE expires_at <= ?`, ms(now)); err != nil {
			return err
		}
		if err := admitUser(ctx, tx, user, SourceOperator, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO login_links (hash, user_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			hashOf(code), user, ms(now), ms(now.Add(ttl)))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("creating login link: %w", err)
	}
	return code, nil
}

// LoginLinkUser returns the user a login code would sign in, without
// using it up, so that a page can ask "sign in as alice?" before
// [Store.RedeemLoginLink]. An unknown, used or expired code is
// [ErrInvalidCode].
func (s *Store) LoginLinkUser(ctx context.Context, code string) (string, error) {
	if s.closed.Load() {
		return "", ErrClosed
	}
	if !wellFormed(code, codePrefix) {
		return "", ErrInvalidCode
	}
	var user string
	err := s.db.QueryRowContext(ctx, `SELECT user_id FROM login_links WHERE hash = ? AND expires_at > ?`, hashOf(code), ms(s.now())).Scan(&user)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrInvalidCode
	}
	if err != nil {
		return "", fmt.Errorf("reading login link: %w", s.mapErr(err))
	}
	return user, nil
}

// RedeemLoginLink uses up a login code and returns its user. A code works
// once: of two concurrent redemptions, one wins. An unknown, used or
// expired code is [ErrInvalidCode].
func (s *Store) RedeemLoginLink(ctx context.Context, code string) (string, error) {
	if s.closed.Load() {
		return "", ErrClosed
	}
	if !wellFormed(code, codePrefix) {
		return "", ErrInvalidCode
	}
	var (
		user    string
		expires int64
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `DELETE FROM login_links WHERE hash = ? RETURNING user_id, expires_at`, hashOf(code)).
			Scan(&user, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrInvalidCode
		}
		if err != nil {
			return err
		}
		var disabled int64
		if err := tx.QueryRowContext(ctx, `SELECT disabled_at FROM users WHERE name = ?`, user).Scan(&disabled); err == nil && disabled != 0 {
			return fmt.Errorf("user %q: %w", user, ErrUserDisabled)
		}
		return nil
	})
	if err == nil && expires <= ms(s.now()) {
		err = ErrInvalidCode // expired: deleted all the same
	}
	if err != nil {
		if errors.Is(err, ErrInvalidCode) || errors.Is(err, ErrUserDisabled) {
			return "", err
		}
		return "", fmt.Errorf("redeeming login link: %w", err)
	}
	return user, nil
}
