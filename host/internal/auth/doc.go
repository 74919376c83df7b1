// Package auth keeps the host's access control in one SQLite file
// (auth.db in the data folder): the bearer tokens the host issues to users
// and to the operator, one-time login links for the settings web UI, the
// web sessions they open, and a [Limiter] that locks out an address after
// repeated failures.
//
// # Secrets at rest
//
// Tokens, login codes and session IDs are 32 random bytes. Only their
// SHA-256 hashes are stored: a copy of auth.db lets nobody sign in. A
// token is shown once, when it is created; it starts with [TokenPrefix] so
// that a leaked one is easy to find (in a log, a repository, a paste).
//
// # Revocation
//
// [Store.RevokeToken] deletes the token and, in the same transaction, every
// web session opened with it. Every check reads the database, so a revoked
// token or session is refused by the very next request; subscribers
// registered with [Store.OnRevoke] hear of it at once, so that the MCP
// endpoint can close that token's open sessions.
//
// # Lockout
//
// [Limiter] counts failed attempts (bearer tokens, sign-in tokens, login
// links) per client address (IPv6 per /64). By default 5 failures within
// 15 minutes lock the address out for 15 minutes. [Store.Authenticate]
// combines the limiter with [Store.Verify] and logs failures without the
// token, naming it at most by [Fingerprint].
//
// # Concurrency
//
// Every method of [Store] and [Limiter] is safe for concurrent use. Close
// may be called more than once; a Store used after Close returns
// [ErrClosed]. Revocation callbacks run synchronously on the revoking
// goroutine, after the revocation is committed and outside every lock of
// this package; they must return quickly. The package starts no
// goroutines.
package auth
