// Package web serves the host's pages and JSON API for people: the
// settings UI at /settings, its JSON twin under /api/v1/, and the
// operator's status page at /status and /status.json.
//
// # Pages
//
// The settings page renders every extension's user sections from their
// form descriptors (settings.Form) with html/template: plain, accessible
// HTML that works without JavaScript; one small static script adds a live
// JSON check to JSON editors. Each section is its own form; a refused
// save re-renders the page with the posted values and each field's error
// next to it. Secret fields are write-only: never filled in, shown as set
// or not set, with a clear button. A toggle that names a status entry
// (settings.Node.Status) shows the user's entry of that name from the
// section's extension beside the switch: its state, tool count, reason,
// next retry (a <time> in UTC that the script shows in the browser's time
// zone) and, for one that needs sign-in, a Connect button tied to a form
// outside the section's. The status panel lists the entries no switch
// shows; the page also lists the user's tools. An extension gets a
// "Stored secrets" form (a secret by name) only when its forms have a
// secret field or it holds a secret of the user.
//
// "Connect your agent" (/settings/agents, agents.go) shows each common
// MCP client's set-up for the MCP URL, in the format of the app's own
// documentation; for an app that takes a token, a CSRF-checked POST makes
// one named for the app and answers with that app's snippet holding it,
// shown once. Copy buttons come from the static script; without it the
// snippets are plain text.
//
// # Access
//
// People sign in at /settings/login with the operator's OpenID Connect
// provider when there is one ([Options.OIDC], offered first:
// /settings/oidc/start and /settings/oidc/callback, see package oidclogin;
// the pending sign-in's state, nonce, PKCE verifier and next path live in
// a 10-minute HttpOnly SameSite=Lax cookie used once), with a bearer
// token, or with a one-time login link (which asks before it signs in, so that a planted link cannot
// sign a browser into someone else's account). A link followed from
// another site's page (Sec-Fetch-Site other than same-origin or none; in
// older browsers an Origin or Referer of another origin) is not looked at:
// the page asks to continue with a POST (CSRF-protected, same-origin
// only), so that a cross-site navigation neither uses a link nor counts as
// a failed attempt. The session cookie is HttpOnly, SameSite=Strict,
// Path=/, and Secure with the __Host- prefix when served over TLS; a GET
// navigation from another site that arrives without it gets a page that
// opens the same address again from this site, which the cookie comes
// with (the sign-in link in an agent's web app). Connect (a sign-in to
// another service) answers with a page whose link goes on to the
// provider, not a redirect, which the pages' form-action 'self' would
// block. Every
// state-changing form carries the session's CSRF token, and cross-origin
// browser posts are refused (http.CrossOriginProtection). A request that
// reached a loopback address naming a foreign Host (DNS rebinding) gets
// 403 before anything else (guard.HostAllowed). The JSON API takes the
// same tokens in "Authorization: Bearer".
//
// Every credential is checked before the lockout of package auth is
// consulted: a valid token, link or session works from an address that
// others' failures locked out; an invalid one counts towards the lockout
// of its address ([Options.AddrKey]) and of itself, and gets 429 with
// Retry-After once either is locked out. Refusals are logged through a
// rate-limited guard.RefusalLog, credentials only by fingerprint. The user
// always comes from the session or the token, never from the request, so
// nobody reaches another user's settings, secrets, status or tools.
//
// [Sessions] lends this sign-in to the OAuth authorization page of the
// same server: the signed-in user and the session's CSRF check, and a
// sign-in page that comes back to it (?next=, a path of this server
// only). With [Options.Apps] the settings page lists the user's OAuth
// grants under "Connected apps" (also GET /api/v1/grants) and revokes them
// (a CSRF-checked form, DELETE /api/v1/grants/{id}).
//
// # Concurrency
//
// The handler returned by [New] is safe for concurrent use and starts no
// goroutines; it holds no state of its own besides its options and parsed
// templates: sessions live in the auth store, settings in the host.
package web
