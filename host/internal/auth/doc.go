// Package auth keeps the host's access control in one SQLite file
// (auth.db in the data folder): the users the host knows, the bearer
// tokens it issues to them and to the operator, one-time login links for
// the settings web UI, the web sessions they open, and a [Limiter] that
// locks out an address after repeated failures.
//
// # Users
//
// A user is created by the operator naming them (a token or login link
// issued for a new name: [SourceOperator]), by a sign-in through the
// OpenID provider ([Store.UpsertUser]), or was known before the table
// existed ([SourceExisting]: backfilled from tokens, sessions and links by
// the migration, and from the settings store by the host,
// [Store.RecordUsers]). Nothing else makes a user: a name nobody issued a
// credential to and nobody signed in as is unknown. Their last activity
// is recorded at most once per Options.TouchEvery per user.
//
// [Store.DisableUser] and [Store.DeleteUser] revoke, in one transaction,
// the user's tokens, sessions and login links, and then tell the
// [Store.OnRevoke] subscribers of each token and the [Store.OnUserChange]
// subscribers of the user (who revoke OAuth grants, close MCP sessions,
// stop processes). A disabled user's sign-in, new tokens, links and
// sessions are [ErrUserDisabled] until [Store.EnableUser]; their old
// tokens stay revoked.
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
// web session opened with it; its hash is kept 90 days as revoked, so
// that the token coming back is [ErrRevoked] (no guess: not counted
// towards the lockout, answered 401 even from a locked-out address)
// rather than unknown. Every check reads the database, so a revoked
// token or session is refused by the very next request; subscribers
// registered with [Store.OnRevoke] hear of it at once, so that the MCP
// endpoint can close that token's open sessions.
//
// # Lockout
//
// [Limiter] throttles failed attempts (bearer tokens, sign-in tokens,
// login links) and never a valid credential. Every caller does the same,
// in this order:
//
//  1. Compute the client's key with guard.TrustedProxies.Key: its IP
//     (X-Forwarded-For only from the operator's trusted proxies), an IPv6
//     /64, or one key for all of loopback.
//  2. Check the credential. This is cheap (a SHA-256 and one indexed
//     lookup; the MCP endpoint caches successes for a few seconds) and it
//     comes first: a valid credential is accepted even from an address
//     that is locked out, so an attacker who fails from 127.0.0.1 cannot
//     lock out the users who share that address with him, nor their open
//     sessions.
//  3. Only when the credential is invalid, call [Limiter.Fail] with the key
//     and the credential. It counts the failure per address key and per
//     credential (by an HMAC under a key only this process holds, so the
//     limiter's memory reveals no credential); MaxFailures failures within
//     Window (default 5 in 15 minutes) of either lock it out for Lockout.
//     A locked-out failure is answered 429 with Retry-After, the others
//     401.
//
// What this throttles: a guesser's failed guesses. Once his address key
// (or the credential he repeats) is locked out, each further wrong guess
// is refused with 429 and not counted again, and a success from the same
// address clears nothing (he could hold a valid token of his own). What
// it does not do is refuse to check a guess from a locked-out address:
// that would refuse the valid users behind the same address (everyone on
// a machine, everyone behind one proxy), which is the attack this design
// answers. The guesses such an address can still have checked are no
// danger: every credential is 32 random bytes, so a guess succeeds with
// probability 2^-256 however many are made; the lockout is there to make
// failures cheap (one line per reason in the log, see guard.RefusalLog;
// bounded memory) and to tell misbehaving clients to back off. Counting
// per credential too locks out a credential that is replayed from many
// addresses (a revoked token in a fleet of clients, a botnet) without
// touching anyone else's.
//
// A guessable credential (the OAuth passphrase gate's) is the exception:
// [Limiter.Attempt] counts the guess before it is checked and refuses
// to have it checked at all while its address or the credential is
// locked out, so that a burst of guesses sent at once gets no more
// checks than MaxFailures.
//
// [Store.Authenticate] combines [Store.Verify] with the limiter and logs
// failures without the token, naming it at most by [Fingerprint].
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
