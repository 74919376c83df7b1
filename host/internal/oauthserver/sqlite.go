package oauthserver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ory/fosite"

	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/settings/sqlitedb"
)

// FileName is the OAuth database's name in the host's data folder.
const FileName = "oauth.db"

// migrations are applied in order, each once; append new ones, never edit
// old ones. Times are unix milliseconds. A token is kept by fosite's
// signature (the HMAC of its random part, keyed with the secret in
// secrets): the database alone gives nobody a usable token.
var migrations = []string{
	1: `CREATE TABLE clients (
		id            TEXT    PRIMARY KEY,
		name          TEXT    NOT NULL,
		uri           TEXT    NOT NULL,
		redirect_uris TEXT    NOT NULL, -- JSON array
		grant_types   TEXT    NOT NULL, -- JSON array
		document      INTEGER NOT NULL CHECK (document IN (0, 1)),
		created_at    INTEGER NOT NULL
	) STRICT`,
	2: `CREATE TABLE grants (
		id           TEXT    PRIMARY KEY, -- fosite's request ID
		user_id      TEXT    NOT NULL,
		client_id    TEXT    NOT NULL,
		client_name  TEXT    NOT NULL,
		client_uri   TEXT    NOT NULL,
		scopes       TEXT    NOT NULL, -- space-separated
		created_at   INTEGER NOT NULL,
		last_used_at INTEGER NOT NULL DEFAULT 0
	) STRICT`,
	3: `CREATE INDEX grants_user ON grants (user_id)`,
	4: `CREATE TABLE tokens (
		kind       TEXT    NOT NULL CHECK (kind IN ('code', 'pkce', 'access', 'refresh')),
		signature  TEXT    NOT NULL,
		grant_id   TEXT    NOT NULL,
		active     INTEGER NOT NULL CHECK (active IN (0, 1)),
		expires_at INTEGER NOT NULL,
		request    TEXT    NOT NULL, -- JSON of storedRequest
		PRIMARY KEY (kind, signature)
	) STRICT, WITHOUT ROWID`,
	5: `CREATE INDEX tokens_grant ON tokens (grant_id)`,
	6: `CREATE TABLE secrets (
		name  TEXT PRIMARY KEY,
		value BLOB NOT NULL
	) STRICT`,
	// A revoked token stays (inactive, revoked) until it is swept, so that
	// it is answered "revoked", not taken for a guess.
	7: `ALTER TABLE tokens ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1))`,
}

// Token kinds, as stored.
const (
	kindCode    = "code"
	kindPKCE    = "pkce"
	kindAccess  = "access"
	kindRefresh = "refresh"
)

// keepExpired is how long expired tokens and dead grants stay before they
// are swept.
const keepExpired = 24 * time.Hour

// SQLite is the [Store] on one SQLite file. It is safe for concurrent
// use, also by several processes.
type SQLite struct {
	db   *sql.DB
	path string
	now  func() time.Time

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating if needed) the OAuth database at path,
// normally <dataDir>/oauth.db ([FileName]), with the same opener, modes
// and checks as the host's other databases (package sqlitedb). now is the
// clock (nil: time.Now).
func OpenSQLite(path string, now func() time.Time) (*SQLite, error) {
	if path == "" {
		return nil, errors.New("oauthserver: OpenSQLite: empty path")
	}
	if now == nil {
		now = time.Now
	}
	db, abs, err := sqlitedb.Open(path, 0, migrations)
	if err != nil {
		return nil, fmt.Errorf("opening OAuth database %s: %w", abs, err)
	}
	return &SQLite{db: db, path: abs, now: now}, nil
}

// Path returns the database file's absolute path.
func (s *SQLite) Path() string { return s.path }

// Close closes the database. It may be called more than once.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// txKey carries the transaction BeginTX started.
type txKey struct{}

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// q returns the transaction of ctx, or the database.
func (s *SQLite) q(ctx context.Context) (querier, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if tx, ok := ctx.Value(txKey{}).(*sql.Tx); ok {
		return tx, nil
	}
	return s.db, nil
}

// BeginTX starts an immediate (write) transaction that the other methods
// called with the returned context join. Transactions do not nest.
func (s *SQLite) BeginTX(ctx context.Context) (context.Context, error) {
	if s.closed.Load() {
		return ctx, ErrClosed
	}
	if _, ok := ctx.Value(txKey{}).(*sql.Tx); ok {
		return ctx, errors.New("oauthserver: nested transaction")
	}
	// database/sql rolls the transaction back if ctx ends first.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return ctx, s.mapErr(err)
	}
	return context.WithValue(ctx, txKey{}, tx), nil
}

// Commit commits the transaction of ctx.
func (s *SQLite) Commit(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	if !ok {
		return errors.New("oauthserver: Commit without a transaction")
	}
	return s.mapErr(tx.Commit())
}

// Rollback rolls back the transaction of ctx; after a Commit it does
// nothing.
func (s *SQLite) Rollback(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	if !ok {
		return errors.New("oauthserver: Rollback without a transaction")
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return s.mapErr(err)
	}
	return nil
}

// write runs fn in the transaction of ctx, or in one of its own.
func (s *SQLite) write(ctx context.Context, fn func(q querier) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if tx, ok := ctx.Value(txKey{}).(*sql.Tx); ok {
		return fn(tx)
	}
	return s.mapErr(sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error { return fn(tx) }))
}

func (s *SQLite) mapErr(err error) error {
	if err != nil && s.closed.Load() {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return err
}

// storedRequest is a fosite request as it is kept: the client as it was
// then (fosite reads its ID and grant types from a stored request), the
// session (a *fosite.DefaultSession) as its JSON.
type storedRequest struct {
	ID                string          `json:"id"`
	RequestedAt       time.Time       `json:"requestedAt"`
	Client            storedClient    `json:"client"`
	RequestedScopes   []string        `json:"requestedScopes,omitempty"`
	GrantedScopes     []string        `json:"grantedScopes,omitempty"`
	RequestedAudience []string        `json:"requestedAudience,omitempty"`
	GrantedAudience   []string        `json:"grantedAudience,omitempty"`
	Form              url.Values      `json:"form,omitempty"`
	Session           json.RawMessage `json:"session"`
}

type storedClient struct {
	ID            string   `json:"id"`
	RedirectURIs  []string `json:"redirectUris,omitempty"`
	GrantTypes    []string `json:"grantTypes,omitempty"`
	ResponseTypes []string `json:"responseTypes,omitempty"`
	Scopes        []string `json:"scopes,omitempty"`
	Audience      []string `json:"audience,omitempty"`
	Public        bool     `json:"public"`
}

func encodeRequest(r fosite.Requester) ([]byte, error) {
	sess, err := json.Marshal(r.GetSession())
	if err != nil {
		return nil, fmt.Errorf("encoding the session: %w", err)
	}
	c := r.GetClient()
	sr := storedRequest{
		ID: r.GetID(), RequestedAt: r.GetRequestedAt(),
		Client: storedClient{ID: c.GetID(), RedirectURIs: c.GetRedirectURIs(), GrantTypes: c.GetGrantTypes(),
			ResponseTypes: c.GetResponseTypes(), Scopes: c.GetScopes(), Audience: c.GetAudience(), Public: c.IsPublic()},
		RequestedScopes: r.GetRequestedScopes(), GrantedScopes: r.GetGrantedScopes(),
		RequestedAudience: r.GetRequestedAudience(), GrantedAudience: r.GetGrantedAudience(),
		Form: r.GetRequestForm(), Session: sess,
	}
	return json.Marshal(sr)
}

// decodeRequest rebuilds a request, hydrating session (a fresh
// DefaultSession when nil).
func decodeRequest(b []byte, session fosite.Session) (*fosite.Request, error) {
	var sr storedRequest
	if err := json.Unmarshal(b, &sr); err != nil {
		return nil, fmt.Errorf("decoding a stored request: %w", err)
	}
	if session == nil {
		session = &fosite.DefaultSession{}
	}
	if err := json.Unmarshal(sr.Session, session); err != nil {
		return nil, fmt.Errorf("decoding a stored session: %w", err)
	}
	form := sr.Form
	if form == nil {
		form = url.Values{}
	}
	return &fosite.Request{
		ID: sr.ID, RequestedAt: sr.RequestedAt,
		Client: &fosite.DefaultClient{ID: sr.Client.ID, RedirectURIs: sr.Client.RedirectURIs, GrantTypes: sr.Client.GrantTypes,
			ResponseTypes: sr.Client.ResponseTypes, Scopes: sr.Client.Scopes, Audience: sr.Client.Audience, Public: sr.Client.Public},
		RequestedScope: sr.RequestedScopes, GrantedScope: sr.GrantedScopes,
		RequestedAudience: sr.RequestedAudience, GrantedAudience: sr.GrantedAudience,
		Form: form, Session: session,
	}, nil
}

// expiry is when a token of this type of r expires, in unix ms (never:
// the largest value).
func expiry(r fosite.Requester, t fosite.TokenType) int64 {
	if r.GetSession() != nil {
		if at := r.GetSession().GetExpiresAt(t); !at.IsZero() {
			return at.UnixMilli()
		}
	}
	return math.MaxInt64
}

func (s *SQLite) createToken(ctx context.Context, kind, signature string, r fosite.Requester, t fosite.TokenType) error {
	b, err := encodeRequest(r)
	if err != nil {
		return err
	}
	return s.write(ctx, func(q querier) error {
		_, err := q.ExecContext(ctx, `INSERT INTO tokens (kind, signature, grant_id, active, expires_at, request) VALUES (?, ?, ?, 1, ?, ?)`,
			kind, signature, r.GetID(), expiry(r, t), string(b))
		if err != nil {
			return fmt.Errorf("storing a %s: %w", kind, err)
		}
		return nil
	})
}

// getToken returns a stored token's request and whether it is active;
// fosite.ErrNotFound when there is none. An inactive token that was
// revoked is also [ErrRevoked].
func (s *SQLite) getToken(ctx context.Context, kind, signature string, session fosite.Session) (*fosite.Request, bool, error) {
	q, err := s.q(ctx)
	if err != nil {
		return nil, false, err
	}
	var (
		active, revoked int
		raw             string
	)
	err = q.QueryRowContext(ctx, `SELECT active, revoked, request FROM tokens WHERE kind = ? AND signature = ?`, kind, signature).Scan(&active, &revoked, &raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, fosite.ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading a %s: %w", kind, s.mapErr(err))
	}
	r, err := decodeRequest([]byte(raw), session)
	if err != nil {
		return nil, false, err
	}
	if revoked == 1 {
		return r, false, fmt.Errorf("%w: %w", fosite.ErrInactiveToken, ErrRevoked)
	}
	return r, active == 1, nil
}

func (s *SQLite) deleteToken(ctx context.Context, kind, signature string) error {
	return s.write(ctx, func(q querier) error {
		_, err := q.ExecContext(ctx, `DELETE FROM tokens WHERE kind = ? AND signature = ?`, kind, signature)
		return err
	})
}

// CreateAuthorizeCodeSession stores an authorization code's request.
func (s *SQLite) CreateAuthorizeCodeSession(ctx context.Context, code string, r fosite.Requester) error {
	return s.createToken(ctx, kindCode, code, r, fosite.AuthorizeCode)
}

// GetAuthorizeCodeSession returns a code's request; a used code's with
// fosite.ErrInvalidatedAuthorizeCode.
func (s *SQLite) GetAuthorizeCodeSession(ctx context.Context, code string, session fosite.Session) (fosite.Requester, error) {
	r, active, err := s.getToken(ctx, kindCode, code, session)
	if errors.Is(err, ErrRevoked) {
		return r, fosite.ErrInvalidatedAuthorizeCode
	}
	if err != nil {
		return nil, err
	}
	if !active {
		return r, fosite.ErrInvalidatedAuthorizeCode
	}
	return r, nil
}

// InvalidateAuthorizeCodeSession marks a code used. When a concurrent
// exchange used it first, this one fails with
// fosite.ErrInvalidatedAuthorizeCode.
func (s *SQLite) InvalidateAuthorizeCodeSession(ctx context.Context, code string) error {
	return s.write(ctx, func(q querier) error {
		res, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0 WHERE kind = ? AND signature = ? AND active = 1`, kindCode, code)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fosite.ErrInvalidatedAuthorizeCode
		}
		return nil
	})
}

// CreatePKCERequestSession stores a code's PKCE challenge.
func (s *SQLite) CreatePKCERequestSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.createToken(ctx, kindPKCE, signature, r, fosite.AuthorizeCode)
}

// GetPKCERequestSession returns a code's PKCE challenge request.
func (s *SQLite) GetPKCERequestSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	r, _, err := s.getToken(ctx, kindPKCE, signature, session)
	if err != nil && !errors.Is(err, ErrRevoked) {
		return nil, err
	}
	return r, nil
}

// DeletePKCERequestSession forgets a code's PKCE challenge.
func (s *SQLite) DeletePKCERequestSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindPKCE, signature)
}

// CreateAccessTokenSession stores an access token's request.
func (s *SQLite) CreateAccessTokenSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.createToken(ctx, kindAccess, signature, r, fosite.AccessToken)
}

// GetAccessTokenSession returns an access token's request; a revoked
// one's with fosite.ErrInactiveToken, also [ErrRevoked].
func (s *SQLite) GetAccessTokenSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	r, _, err := s.getToken(ctx, kindAccess, signature, session)
	if errors.Is(err, ErrRevoked) {
		return r, err
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// DeleteAccessTokenSession deletes an access token.
func (s *SQLite) DeleteAccessTokenSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindAccess, signature)
}

// CreateRefreshTokenSession stores a refresh token's request.
func (s *SQLite) CreateRefreshTokenSession(ctx context.Context, signature, _ string, r fosite.Requester) error {
	return s.createToken(ctx, kindRefresh, signature, r, fosite.RefreshToken)
}

// GetRefreshTokenSession returns a refresh token's request; a rotated or
// revoked one's with fosite.ErrInactiveToken (a revoked one's also
// [ErrRevoked]).
func (s *SQLite) GetRefreshTokenSession(ctx context.Context, signature string, session fosite.Session) (fosite.Requester, error) {
	r, active, err := s.getToken(ctx, kindRefresh, signature, session)
	if errors.Is(err, ErrRevoked) {
		return r, err
	}
	if err != nil {
		return nil, err
	}
	if !active {
		return r, fosite.ErrInactiveToken
	}
	return r, nil
}

// DeleteRefreshTokenSession deletes a refresh token.
func (s *SQLite) DeleteRefreshTokenSession(ctx context.Context, signature string) error {
	return s.deleteToken(ctx, kindRefresh, signature)
}

// RotateRefreshToken retires the refresh token being exchanged. It stays,
// inactive, so that a reuse is recognised as one (and revokes the grant).
// The grant's earlier access tokens live out their short life: requests
// of the client already on their way with one must not fail because it
// refreshed meanwhile. When a concurrent refresh retired the token first,
// this one fails with fosite.ErrSerializationFailure.
func (s *SQLite) RotateRefreshToken(ctx context.Context, _, signature string) error {
	return s.write(ctx, func(q querier) error {
		res, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0 WHERE kind = ? AND signature = ? AND active = 1`, kindRefresh, signature)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fosite.ErrSerializationFailure
		}
		return nil
	})
}

// RevokeRefreshToken revokes every refresh token of a grant.
func (s *SQLite) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.write(ctx, func(q querier) error {
		_, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0, revoked = 1 WHERE kind = ? AND grant_id = ?`, kindRefresh, requestID)
		return err
	})
}

// RevokeAccessToken revokes every access token of a grant; they stay,
// revoked, until swept, so that one coming back is known as revoked.
func (s *SQLite) RevokeAccessToken(ctx context.Context, requestID string) error {
	return s.write(ctx, func(q querier) error {
		_, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0, revoked = 1 WHERE kind = ? AND grant_id = ?`, kindAccess, requestID)
		return err
	})
}

// Client returns a stored client.
func (s *SQLite) Client(ctx context.Context, id string) (*Client, error) {
	q, err := s.q(ctx)
	if err != nil {
		return nil, err
	}
	var (
		c              Client
		redirs, grants string
		doc            int
		created        int64
	)
	err = q.QueryRowContext(ctx, `SELECT id, name, uri, redirect_uris, grant_types, document, created_at FROM clients WHERE id = ?`, id).
		Scan(&c.ID, &c.Name, &c.URI, &redirs, &grants, &doc, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("client %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading client: %w", s.mapErr(err))
	}
	if err := json.Unmarshal([]byte(redirs), &c.RedirectURIs); err != nil {
		return nil, fmt.Errorf("reading client %q: %w", id, err)
	}
	if err := json.Unmarshal([]byte(grants), &c.GrantTypes); err != nil {
		return nil, fmt.Errorf("reading client %q: %w", id, err)
	}
	c.Document, c.Created = doc == 1, time.UnixMilli(created)
	return &c, nil
}

// unusedClientAge is how long a dynamically registered client that never
// got a grant is kept.
const unusedClientAge = 30 * 24 * time.Hour

// SaveClient stores a client, and sweeps registrations that were never
// used.
func (s *SQLite) SaveClient(ctx context.Context, c *Client) error {
	redirs, _ := json.Marshal(nonNil(c.RedirectURIs))
	grants, _ := json.Marshal(nonNil(c.GrantTypes))
	doc := 0
	if c.Document {
		doc = 1
	}
	return s.write(ctx, func(q querier) error {
		if err := s.sweepClients(ctx, q); err != nil {
			return err
		}
		_, err := q.ExecContext(ctx, `INSERT OR REPLACE INTO clients (id, name, uri, redirect_uris, grant_types, document, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.Name, c.URI, string(redirs), string(grants), doc, c.Created.UnixMilli())
		if err != nil {
			return fmt.Errorf("storing client: %w", err)
		}
		return nil
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// sweepClients deletes the registrations that never got a grant within
// unusedClientAge.
func (s *SQLite) sweepClients(ctx context.Context, q querier) error {
	if _, err := q.ExecContext(ctx, `DELETE FROM clients WHERE document = 0 AND created_at < ? AND id NOT IN (SELECT client_id FROM grants)`,
		s.now().Add(-unusedClientAge).UnixMilli()); err != nil {
		return fmt.Errorf("sweeping clients: %w", err)
	}
	return nil
}

// sweepTokens deletes the tokens and codes (used, rotated or revoked ones
// included) expired for more than keepExpired, then the grants left
// without any.
func (s *SQLite) sweepTokens(ctx context.Context, q querier) error {
	cutoff := s.now().Add(-keepExpired).UnixMilli()
	if _, err := q.ExecContext(ctx, `DELETE FROM tokens WHERE expires_at < ?`, cutoff); err != nil {
		return fmt.Errorf("sweeping tokens: %w", err)
	}
	if _, err := q.ExecContext(ctx, `DELETE FROM grants WHERE created_at < ? AND id NOT IN (SELECT grant_id FROM tokens)`, cutoff); err != nil {
		return fmt.Errorf("sweeping grants: %w", err)
	}
	return nil
}

// Sweep deletes what has expired: tokens and codes expired for more than
// a day, the grants left without any, and registrations never used.
func (s *SQLite) Sweep(ctx context.Context) error {
	return s.write(ctx, func(q querier) error {
		if err := s.sweepTokens(ctx, q); err != nil {
			return err
		}
		return s.sweepClients(ctx, q)
	})
}

// CreateGrant records a grant, and sweeps expired tokens and dead grants.
func (s *SQLite) CreateGrant(ctx context.Context, g api.Grant) error {
	return s.write(ctx, func(q querier) error {
		if err := s.sweepTokens(ctx, q); err != nil {
			return err
		}
		_, err := q.ExecContext(ctx, `INSERT INTO grants (id, user_id, client_id, client_name, client_uri, scopes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			g.ID, g.User, g.ClientID, g.Client, g.ClientURI, strings.Join(g.Scopes, " "), g.Created.UnixMilli())
		if err != nil {
			return fmt.Errorf("storing grant: %w", err)
		}
		return nil
	})
}

// Grants lists user's live grants, newest first.
func (s *SQLite) Grants(ctx context.Context, user string) ([]api.Grant, error) {
	q, err := s.q(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, `SELECT g.id, g.user_id, g.client_id, g.client_name, g.client_uri, g.scopes, g.created_at, g.last_used_at
		FROM grants g WHERE g.user_id = ? AND EXISTS (
			SELECT 1 FROM tokens t WHERE t.grant_id = g.id AND t.kind IN ('access', 'refresh') AND t.active = 1 AND t.expires_at > ?)
		ORDER BY g.created_at DESC, g.id`, user, s.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("listing grants: %w", s.mapErr(err))
	}
	defer rows.Close()
	out := []api.Grant{}
	for rows.Next() {
		var (
			g                 api.Grant
			scopes            string
			created, lastUsed int64
		)
		if err := rows.Scan(&g.ID, &g.User, &g.ClientID, &g.Client, &g.ClientURI, &scopes, &created, &lastUsed); err != nil {
			return nil, fmt.Errorf("listing grants: %w", err)
		}
		g.Scopes = strings.Fields(scopes)
		g.Created = time.UnixMilli(created)
		if lastUsed != 0 {
			g.LastUsed = time.UnixMilli(lastUsed)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing grants: %w", s.mapErr(err))
	}
	return out, nil
}

// RevokeGrant deletes a grant of user and revokes every token of it
// (they stay, revoked, until swept).
func (s *SQLite) RevokeGrant(ctx context.Context, user, id string) error {
	return s.write(ctx, func(q querier) error {
		res, err := q.ExecContext(ctx, `DELETE FROM grants WHERE id = ? AND user_id = ?`, id, user)
		if err != nil {
			return fmt.Errorf("revoking grant: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("grant %q: %w", id, ErrNotFound)
		}
		if _, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0, revoked = 1 WHERE grant_id = ?`, id); err != nil {
			return fmt.Errorf("revoking grant: %w", err)
		}
		return nil
	})
}

// RevokeUserGrants deletes every grant of user and revokes their tokens.
func (s *SQLite) RevokeUserGrants(ctx context.Context, user string) ([]string, error) {
	var ids []string
	err := s.write(ctx, func(q querier) error {
		ids = nil
		rows, err := q.QueryContext(ctx, `DELETE FROM grants WHERE user_id = ? RETURNING id`, user)
		if err != nil {
			return fmt.Errorf("revoking the grants of %q: %w", user, err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := q.ExecContext(ctx, `UPDATE tokens SET active = 0, revoked = 1 WHERE grant_id = ?`, id); err != nil {
				return fmt.Errorf("revoking the grants of %q: %w", user, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// TouchGrant records a grant's last use.
func (s *SQLite) TouchGrant(ctx context.Context, id string, t time.Time) error {
	return s.write(ctx, func(q querier) error {
		_, err := q.ExecContext(ctx, `UPDATE grants SET last_used_at = ? WHERE id = ?`, t.UnixMilli(), id)
		return err
	})
}

// ClientGranted reports whether a grant of client id is on record.
func (s *SQLite) ClientGranted(ctx context.Context, id string) (bool, error) {
	q, err := s.q(ctx)
	if err != nil {
		return false, err
	}
	var one int
	err = q.QueryRowContext(ctx, `SELECT 1 FROM grants WHERE client_id = ? LIMIT 1`, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("looking up client %q's grants: %w", clip(id), s.mapErr(err))
	}
	return true, nil
}

// hmacSecretName names the token signing secret in the secrets table.
const hmacSecretName = "hmac"

// HMACSecret returns the token signing secret, creating it once.
func (s *SQLite) HMACSecret(ctx context.Context) ([]byte, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	var out []byte
	err := s.write(ctx, func(q querier) error {
		if _, err := q.ExecContext(ctx, `INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)`, hmacSecretName, b); err != nil {
			return err
		}
		return q.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, hmacSecretName).Scan(&out)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the signing secret: %w", err)
	}
	if len(out) < 32 {
		return nil, fmt.Errorf("the stored signing secret is too short (%d bytes)", len(out))
	}
	return out, nil
}
