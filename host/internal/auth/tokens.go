package auth

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/ext"
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
	// Scope, when set, narrows the token to some of its user's servers
	// and tools; nil reaches everything the user has.
	Scope *ext.Scope `json:"scope,omitempty"`
	// Expires, when set, is when the token stops working.
	Expires time.Time `json:"expires,omitzero"`
	// Expired is set in listings of a token past Expires (kept until
	// revoked, so that its owner sees why it stopped).
	Expired bool `json:"expired,omitempty"`
	// Extension names the extension that minted the token (for its
	// agent), empty for one made by a person.
	Extension string `json:"extension,omitempty"`
}

// keepExpired is how long an expired token stays listed (as expired)
// before the next token issued removes it.
const keepExpired = 7 * 24 * time.Hour

// TokenOptions narrows a token made with [Store.CreateScopedToken].
type TokenOptions struct {
	// Scope, when set, is what the token reaches (validated; see
	// [ext.Scope]). Nil: everything its user has.
	Scope *ext.Scope
	// Expires, when set, is when it stops working; it must be in the
	// future.
	Expires time.Time
	// Extension names the extension minting it (shown in listings).
	Extension string
	_         struct{}
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
	// Scope, when set, narrows a token to some of its user's servers and
	// tools (MCP only: [Store.Authenticate] refuses a scoped token).
	Scope *ext.Scope
	// Expires, when set, is when the token stops working.
	Expires time.Time
}

// CreateToken issues a bearer token for user. The plaintext is returned
// once and never stored: keep it or lose it. A user not yet known is
// created ([SourceOperator]: only the operator, or the user themselves,
// issues tokens); a disabled one is [ErrUserDisabled].
func (s *Store) CreateToken(ctx context.Context, user, name string) (string, Token, error) {
	if err := checkUser(user); err != nil {
		return "", Token{}, err
	}
	return s.createToken(ctx, user, name, false, TokenOptions{})
}

// CreateScopedToken issues a bearer token for user narrowed by o: a scope
// (servers, tool globs) and an expiry. A scoped token opens /mcp only
// (see [ErrScoped]). The plaintext is returned once and never stored.
func (s *Store) CreateScopedToken(ctx context.Context, user, name string, o TokenOptions) (string, Token, error) {
	if err := checkUser(user); err != nil {
		return "", Token{}, err
	}
	if o.Scope != nil {
		sc := *o.Scope
		sc.Servers = append([]string(nil), sc.Servers...)
		sc.Tools = append([]string(nil), sc.Tools...)
		if err := sc.Validate(); err != nil {
			return "", Token{}, fmt.Errorf("token %q: %w", name, err)
		}
		o.Scope = &sc
	}
	if !o.Expires.IsZero() && !o.Expires.After(s.now()) {
		return "", Token{}, fmt.Errorf("token %q: expiry %s is not in the future: %w", name, o.Expires.Format(time.RFC3339), ErrInvalidArgument)
	}
	return s.createToken(ctx, user, name, false, o)
}

// CheckTokenName reports whether name is a valid token name
// ([ErrInvalidArgument] if not), for forms that say which field is at
// fault.
func CheckTokenName(name string) error { return checkName(name) }

// CreateOperatorToken issues an operator token: its principal has
// Operator set and no user. It opens the status page, nothing else.
func (s *Store) CreateOperatorToken(ctx context.Context, name string) (string, Token, error) {
	return s.createToken(ctx, "", name, true, TokenOptions{})
}

func (s *Store) createToken(ctx context.Context, user, name string, operator bool, o TokenOptions) (string, Token, error) {
	if err := checkName(name); err != nil {
		return "", Token{}, err
	}
	plain := newSecret(TokenPrefix)
	t := Token{ID: newID("tok_"), User: user, Name: name, Operator: operator, Created: s.now().Truncate(time.Millisecond),
		Scope: o.Scope, Expires: o.Expires.Truncate(time.Millisecond), Extension: o.Extension}
	var expires int64 // 0: never
	if !t.Expires.IsZero() {
		expires = ms(t.Expires)
	}
	scope := ""
	if o.Scope != nil {
		b, _ := json.Marshal(scopeRow{Scope: *o.Scope, Extension: o.Extension})
		scope = string(b)
	} else if o.Extension != "" {
		b, _ := json.Marshal(scopeRow{Extension: o.Extension})
		scope = string(b)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if !operator {
			if err := admitUser(ctx, tx, user, SourceOperator, t.Created); err != nil {
				return err
			}
		}
		if err := pruneExpired(ctx, tx, t.Created); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, user_id, name, operator, hash, created_at, scope, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			t.ID, user, name, boolInt(operator), hashOf(plain), ms(t.Created), scope, expires)
		return err
	})
	if err != nil {
		return "", Token{}, fmt.Errorf("creating token: %w", err)
	}
	s.event("token issued", user, t.ID)
	return plain, t, nil
}

// ListTokens lists the tokens of user, or every token (the operator's too)
// when user is "", oldest first.
func (s *Store) ListTokens(ctx context.Context, user string) ([]Token, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	q := `SELECT id, user_id, name, operator, created_at, last_used_at, scope, expires_at FROM tokens`
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
			scope     string
			expires   int64
		)
		if err := rows.Scan(&t.ID, &userField, &t.Name, &op, &created, &lastUsed, &scope, &expires); err != nil {
			return nil, fmt.Errorf("listing tokens: %w", err)
		}
		t.User, t.Operator, t.Created, t.LastUsed = userField, op == 1, fromMS(created), fromMS(lastUsed)
		row, err := parseScope(scope)
		if err != nil {
			return nil, fmt.Errorf("listing tokens: token %s: %w", t.ID, err)
		}
		t.Scope, t.Extension = row.scope(), row.Extension
		t.Expires = fromMS(expires)
		t.Expired = !t.Expires.IsZero() && !s.now().Before(t.Expires)
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
	var owner string
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM revoked_tokens WHERE revoked_at < ?`, ms(now.Add(-keepRevoked))); err != nil {
			return err
		}
		_ = tx.QueryRowContext(ctx, `SELECT user_id FROM tokens WHERE id = ?`, id).Scan(&owner)
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
	s.event("token revoked", owner, id)
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
// last use. A malformed, unknown, revoked or expired token is
// [ErrInvalidToken]; a revoked one is also [ErrRevoked], an expired one
// [ErrExpired]. A scoped token's principal carries its scope: Verify is
// for /mcp, which serves that scope; the other surfaces use
// [Store.Authenticate], which refuses it.
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
		scope    string
		expires  int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT id, user_id, operator, hash, last_used_at, scope, expires_at FROM tokens WHERE hash = ?`, want).
		Scan(&p.TokenID, &p.User, &op, &stored, &lastUsed, &scope, &expires)
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
	now := s.now()
	if p.Expires = fromMS(expires); !p.Expires.IsZero() && !now.Before(p.Expires) {
		return Principal{}, fmt.Errorf("%w: %w", ErrExpired, ErrInvalidToken)
	}
	row, err := parseScope(scope)
	if err != nil {
		// A row this store cannot read never widens to "unscoped".
		return Principal{}, fmt.Errorf("verifying token %s: %w", p.TokenID, err)
	}
	p.Scope = row.scope()
	if !p.Operator {
		s.SeenUser(ctx, p.User)
	}
	if now.Sub(fromMS(lastUsed)) >= s.touchEvery {
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
	if err == nil && p.Scope != nil {
		s.refusals.Refused(s.logger, "scoped bearer token refused outside /mcp", "addr", addr, "token", p.TokenID)
		return Principal{}, fmt.Errorf("%w: %w", ErrScoped, ErrInvalidToken)
	}
	if !errors.Is(err, ErrInvalidToken) {
		return p, err
	}
	if errors.Is(err, ErrExpired) {
		s.refusals.Refused(s.logger, "expired bearer token refused", "addr", addr, "token_sha256", Fingerprint(token))
		return Principal{}, err
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

// pruneExpired removes the tokens expired keepExpired before now, keeping
// their hashes as revoked (so that one coming back is still no guess): a
// runner minting a token per session must not grow the table without
// end.
func pruneExpired(ctx context.Context, tx *sql.Tx, now time.Time) error {
	cut := ms(now.Add(-keepExpired))
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO revoked_tokens (hash, revoked_at) SELECT hash, ? FROM tokens WHERE expires_at != 0 AND expires_at < ?`, ms(now), cut); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE expires_at != 0 AND expires_at < ?`, cut)
	return err
}

// scopeRow is the tokens.scope column: the scope and the minting
// extension, as JSON (” for neither).
type scopeRow struct {
	ext.Scope
	Extension string `json:"extension,omitempty"`
}

func (r scopeRow) scope() *ext.Scope {
	if len(r.Servers) == 0 {
		return nil
	}
	sc := r.Scope
	return &sc
}

func parseScope(col string) (scopeRow, error) {
	var r scopeRow
	if col == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(col), &r); err != nil {
		return r, fmt.Errorf("reading the token's scope: %w", err)
	}
	return r, nil
}
