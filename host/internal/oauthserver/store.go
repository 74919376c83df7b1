package oauthserver

import (
	"context"
	"errors"
	"time"

	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/pkce"
	"github.com/ory/fosite/storage"

	"github.com/agenthost/agenthost/host/internal/api"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrNotFound is returned for a client or grant that does not exist
	// (or, for a grant, is not the user's).
	ErrNotFound = errors.New("not found")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("oauth store closed")
	// ErrRevoked marks (errors.Is) the fosite.ErrInactiveToken of a
	// stored token that was revoked, not only used or rotated; and, from
	// [Server.Verify], an [ErrInvalidToken] for a revoked access token.
	ErrRevoked = errors.New("token revoked")
)

// Store keeps everything the authorization server must not lose on a
// restart: registered clients, authorization codes, access and refresh
// tokens (by their HMAC signatures, never the tokens), the grants they
// belong to, and the secret the tokens are signed with. [OpenSQLite] is
// the implementation; another database (PostgreSQL, for several hosts)
// implements the same interface.
//
// The fosite storage interfaces it embeds are fosite's contract: a
// "request ID" is a grant (fosite keeps it across refreshes), a Get of an
// invalidated code returns the request with
// fosite.ErrInvalidatedAuthorizeCode, and a Get of a rotated refresh
// token returns it with fosite.ErrInactiveToken, so that fosite can
// revoke the whole grant on reuse. Requests a Get returns carry the
// client as it was when they were stored (the live client comes from the
// server). Methods join the transaction [storage.Transactional] put in
// their context, if any. Revocations are not announced by the store: the
// server does that after the transaction commits.
//
// Every method is safe for concurrent use.
type Store interface {
	oauth2.CoreStorage
	oauth2.TokenRevocationStorage
	pkce.PKCERequestStorage
	storage.Transactional

	// Client returns a dynamically registered client. Unknown IDs are
	// [ErrNotFound]. (Metadata-document clients are fetched, not stored.)
	Client(ctx context.Context, id string) (*Client, error)
	// SaveClient stores c, replacing a client with the same ID.
	SaveClient(ctx context.Context, c *Client) error
	// CreateGrant records a grant the user just consented to, before its
	// authorization code is stored (g.ID is fosite's request ID).
	CreateGrant(ctx context.Context, g api.Grant) error
	// Grants lists user's live grants (those with an unexpired, active
	// access or refresh token), newest first.
	Grants(ctx context.Context, user string) ([]api.Grant, error)
	// RevokeGrant revokes every token of grant id, which must be user's
	// (else [ErrNotFound]).
	RevokeGrant(ctx context.Context, user, id string) error
	// RevokeUserGrants revokes every grant of user (a user disabled or
	// deleted) and returns their IDs.
	RevokeUserGrants(ctx context.Context, user string) ([]string, error)
	// ClientGranted reports whether any user's grant of client id is on
	// record (one not swept yet): a user consented to it, having seen
	// where it sends them back.
	ClientGranted(ctx context.Context, id string) (bool, error)
	// TouchGrant records that grant id was used at t.
	TouchGrant(ctx context.Context, id string, t time.Time) error
	// Sweep deletes what has expired: tokens and codes (used, rotated
	// and revoked ones too) some time after they expire, the grants left
	// without any, registrations never used. The server calls it at start
	// and periodically ([Options.SweepEvery]).
	Sweep(ctx context.Context) error
	// HMACSecret returns the secret tokens are signed with, made at
	// random and stored on first use.
	HMACSecret(ctx context.Context) ([]byte, error)
	// Close releases the store; it may be called more than once.
	Close() error
}

// Client is an OAuth client the server knows. Every client is public (it
// holds no secret, token_endpoint_auth_method "none") and uses the
// authorization code grant with PKCE.
type Client struct {
	// ID is the client_id: "cl_" and random hex for a dynamic
	// registration, the document's https URL for a metadata-document
	// client.
	ID string
	// Name is client_name as the client gave it (unverified); may be "".
	Name string
	// URI is client_uri, the client's home page; may be "".
	URI string
	// RedirectURIs are the registered redirect URIs, matched exactly
	// (loopback ones on any port, RFC 8252).
	RedirectURIs []string
	// GrantTypes are "authorization_code" and optionally "refresh_token".
	GrantTypes []string
	// Document marks a client ID metadata document client (never
	// stored).
	Document bool
	// Created is when it registered, or when its document was fetched.
	Created time.Time
}

// displayName is the client's name for people: its client_name, else its
// ID.
func (c *Client) displayName() string {
	if c.Name != "" {
		return c.Name
	}
	return c.ID
}
