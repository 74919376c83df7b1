// Package oauthserver is the host's OAuth 2.1 authorization server, so
// that apps speaking MCP authorization (Claude.ai and Claude Desktop
// custom connectors, go-sdk's client) connect to the MCP endpoint with its
// URL alone: they discover this server from the endpoint's 401, register,
// send the user here to sign in and consent, and get short-lived access
// tokens bound to the endpoint. The host's own bearer tokens keep working
// beside them.
//
// # Routes
//
// [Server.Mount] registers them all, in one place:
//
//	/.well-known/oauth-protected-resource[/mcp]  RFC 9728, go-sdk's handler: resource <base>/mcp, authorization_servers [<base>]
//	/.well-known/oauth-authorization-server      RFC 8414 metadata (PKCE S256 only, iss in responses, client ID metadata documents)
//	/.well-known/oauth-protected-resource<path>/mcp, /.well-known/oauth-authorization-server<path>,
//	/.well-known/openid-configuration            the same, when the base URL has a path (RFC 9728 and 8414 §3.1
//	                                             path insertion; the MCP spec's path appending, RFC 8414's document)
//	/oauth/authorize                             sign-in, consent, the code (RFC 9207 iss, RFC 8707 resource)
//	/oauth/token                                 authorization_code (+ PKCE S256, required) and refresh_token (rotated)
//	/oauth/register                              RFC 7591 dynamic registration of public clients
//	/oauth/revoke                                RFC 7009
//
// /oauth/callback and /oauth/client-metadata.json are not this package's:
// they belong to the host's outbound OAuth client. The routes are the
// host's without the base URL's path (the host strips it); the URLs the
// server gives (issuer, resource, endpoints, the pages' links) carry it.
//
// # Who the user is
//
// The authorization page uses the settings UI's sign-in ([Sessions],
// from package web): a signed-in browser sees the consent page at once;
// another is offered the settings sign-in (which comes back), or, when
// the operator set one ([Options.Passphrase]), a passphrase that stands
// for one user (a single-user install). Passphrases tried count in the
// sign-in's lockout ([Limiter]), per client and for the gate as a whole;
// unlike a token a passphrase can be guessed, so each is counted before
// it is checked (a right one too), and while either is locked out no
// passphrase is even checked: a burst of guesses sent at once gets no
// more checks than guesses sent one by one. The bcrypt checks run one at
// a time, a few waiting, more refused at once (429). Every route refuses a foreign Host
// on a loopback connection (DNS rebinding), as the other surfaces do. The consent page names the client (its
// client_name, marked unverified unless it comes from a metadata document
// at the client's own URL, its home page, the host it sends the user back
// to) and the scopes; it carries the session's CSRF token, is posted back
// with the request's parameters, cannot be framed (frame-ancestors 'none',
// X-Frame-Options DENY), and its form-action allows only this server and
// the client's redirect URI.
//
// # Clients
//
// Every client is public (token_endpoint_auth_method "none") and must
// use PKCE with S256. A client registers (POST /oauth/register: redirect
// URIs https, or http to a loopback address; 10 a minute per client
// address, then 30 and 1 a second in all; the operator may restrict
// https hosts; a loopback http one, localhost included, matches on any
// port, RFC 8252 §7.3), or its client_id is the https URL of a client ID metadata
// document: fetched through package netguard's dial-time guard (no
// loopback, private, link-local or other internal address, however the
// name resolves; [Options.DocumentAllow] opens prefixes), at most 5 KiB,
// within 5 s, no redirects, cached for [Options.DocumentTTL] (and up to a
// day longer while it cannot be fetched again: its host down), its
// client_id must be its own URL and the redirect URI must be listed.
// Anyone may name any URL, so fetches are bounded: 20 a minute per
// client address asking (checked first, so that one client cannot use up
// the rest for everyone), 16 at once and 60 a minute in all, 4 and 20
// per host of the document URL; a URL that failed
// is not fetched again for 30 s; the cache keeps 256 documents. A client
// over the limits is refused (invalid_client, saying so) without a fetch,
// and logged rate-limited.
//
// An authorization request refused before the user decided is sent back
// to its redirect URI only when that URI is trusted (RFC 9700 §4.11.2):
// a loopback http one, or one of a client with a grant on record (a user
// consented to it, seeing where it sends people back). Anyone may
// register any https URI, so another one's errors are shown on the page
// here: no open redirect.
//
// # Scopes
//
// [ScopeMCP] ("mcp": use the user's tools on /mcp) is always granted;
// [ScopeOfflineAccess] ("offline_access") adds a refresh token for a
// client registered with the refresh_token grant. Other requested scopes
// are ignored, not refused: clients send scopes of their own.
//
// # Tokens
//
// Access tokens live [Options.AccessTokenTTL] (1 h by default), refresh
// tokens [Options.RefreshTokenTTL] (30 days); codes 10 minutes, once. A
// refresh returns a new refresh token and retires the old one; a retired
// refresh token or a used code that comes back revokes the whole grant
// (someone else holds a copy). Revoked tokens stay in the store, marked,
// until swept: [Server.Verify] tells one ([ErrRevoked]) from an unknown
// token (a guess), and a refresh of a revoked grant is refused saying
// so, not as a reused token. The resource (RFC 8707) must be this
// server's /mcp, or is defaulted to it; it is the token's audience, and
// [Server.Verify] refuses a token for another one. Tokens are HMAC-signed
// random values; the [Store] keeps only their signatures (keyed with a
// secret it keeps), so a copy of the database yields no usable token.
// Tokens and codes are never logged: refusals are logged by error code.
//
// # Grants
//
// One consent is one grant; it keeps its ID across refreshes, and the MCP
// endpoint binds a session to it, so a session outlives a refresh.
// Revoking a grant (its user on the settings page or the JSON API, the
// client at /oauth/revoke, or a detected reuse) revokes all its tokens at
// once and calls the [Server.OnRevoke] subscribers, so that the endpoint
// closes its sessions. Everything lives in [Store] (SQLite: oauth.db in
// the data folder, [OpenSQLite]), so a restart loses no grant.
//
// # Library
//
// The OAuth mechanics are github.com/ory/fosite v0.49.0 (compose with the
// HMAC strategy, the explicit code, refresh, revocation and PKCE
// handlers); this package adds the store, the clients, the pages and
// RFC 8707/9207/7591/8414. Weighed against github.com/zitadel/oidc/v3
// v3.52.0 (package op):
//
//   - PKCE required: fosite enforces it for every client and refuses
//     plain (EnforcePKCE, EnablePKCEPlainChallengeMethod); zitadel checks
//     it at the token endpoint for public clients and accepts plain.
//   - Refresh rotation and reuse detection: fosite rotates and, on a
//     reused refresh token or code, revokes the whole grant (its request
//     ID); zitadel leaves rotation and reuse detection to the storage
//     implementation, that is to us.
//   - Revocation (RFC 7009): both have an endpoint.
//   - RFC 8707: neither has the resource parameter; fosite has audiences
//     with an exact matching strategy, which carry it (resource is checked
//     here, then granted as the audience); zitadel has audiences only in
//     OIDC and token exchange.
//   - Storage: fosite's interfaces are about 18 small methods on
//     serialised requests; zitadel's op.Storage is about 25, half of them
//     OIDC (userinfo, ID token claims, JWT profiles), and it needs signing
//     keys and a JWKS even for plain OAuth.
//   - Weight: zitadel is lighter (about 170 packages with the standard
//     library; go-jose v4, chi, otel's API); fosite pulls about 270 (ory/x
//     with otel exporters, logrus, gobuffalo/pop's logging, go-jose v3, and
//     testify/gomock through fosite/storage). Both keep the host's grpc
//     v1.85.0.
//
// fosite gives the security-critical parts (PKCE enforcement, rotation
// with family revocation, code reuse revocation) done and tested; with
// zitadel we would have written those ourselves in the store. The weight
// is the price, confined to this package by the host's dependency test.
//
// # Concurrency
//
// Every method of [Server] and [SQLite] is safe for concurrent use. A
// [Server] owns one goroutine, started by [New] and joined by Close: it
// sweeps the store at start and every [Options.SweepEvery] (1 h), so
// expired tokens, codes and grants go also when nobody signs in.
// Metadata document fetches run on the requesting goroutine (concurrent
// fetches of one URL share one).
// [Server.OnRevoke] callbacks run synchronously on the revoking goroutine,
// after the revocation is committed, and must return quickly. Close may be
// called more than once.
package oauthserver
