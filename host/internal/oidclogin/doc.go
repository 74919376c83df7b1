// Package oidclogin signs people in with the operator's OpenID Connect
// provider, for the settings page and the OAuth consent page, with
// coreos/go-oidc (discovery, the provider's JWKS, ID token checks) and
// golang.org/x/oauth2 (the authorization code exchange).
//
// # The flow
//
// [Login.Begin] makes a fresh state, nonce and PKCE verifier (S256) and
// returns the provider's authorization URL; the caller keeps the three in
// a short-lived cookie of the browser that started (package web does).
// [Login.Finish] takes the provider's answer at the callback with that
// cookie's values: the state must match (constant time), the code is
// exchanged with the verifier and the client secret (an operator secret,
// read at each sign-in through [Config.ClientSecret], never logged), and
// the ID token is verified by go-oidc: signature by the provider's keys
// (a remote key set that fetches the JWKS again when a token names a key
// it does not know: key rotation), issuer, audience (the client ID),
// expiry; then the nonce must match. The user's ID is the claim
// [Config.UserClaim]: for "email" (the default) it is lowercased and
// taken only when email_verified is true. It must be a valid user ID.
//
// # Admission
//
// The operator's rule admits a person whose verified email's domain is in
// AllowedDomains, or one of whose groups (the claim GroupsClaim) is in
// AllowedGroups, or whose user ID is in AllowedUsers. An admitted person
// is handed to [Users.Admitted] (which creates the user on first sight and
// refuses a disabled one); a refused one gets a [*Refusal] naming why, and
// when their user ID is known, [Users.NotAdmitted] (which disables a user
// bound to that identity: they left the group). The refresh token the
// provider gives at sign-in goes to Users.Admitted (the host keeps it in
// its secrets backend); [Login.Recheck] uses it later to ask the provider
// again (the web session's periodic re-check), and a refusal there
// disables the user too.
//
// # Concurrency
//
// A [*Login] is safe for concurrent use. It starts no goroutines; the
// provider's discovery document is fetched on first use (and again after
// a failure), under a mutex.
package oidclogin
