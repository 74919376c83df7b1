// Package guard holds the checks that every HTTP surface of the host (the
// MCP endpoint at /mcp, the settings UI at /settings, the JSON API under
// /api/v1, and any later one such as an OAuth authorization server) makes
// before it looks at a credential, so that they make them the same way:
//
//   - [TrustedProxies.ClientAddr] and [TrustedProxies.Key]: who the client
//     is. X-Forwarded-For is believed only when the immediate peer is one
//     of the operator's trusted proxies (trustedProxies in the operator's
//     file), and then only up to the rightmost address that is not itself
//     a trusted proxy: everything to its left was written by the client
//     and is not believed. Without trusted proxies the header is ignored.
//   - [AddrKey]: the key a client's failures are counted by in auth's
//     limiter: the IPv4 address; the /64 prefix of an IPv6 address (one
//     client commonly holds a whole /64); and one key, "loopback", for
//     every loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z), so that
//     rotating the source address over 127/8 gains a local attacker
//     nothing.
//   - [HostAllowed]: the DNS-rebinding check. A request that reached a
//     loopback address must name a loopback host (or the operator's public
//     host): a page on evil.example whose name was rebound to 127.0.0.1
//     sends "Host: evil.example" and gets 403.
//   - [RefusalLog]: logging of refused requests (bad token, lockout,
//     foreign origin, bad Host), rate-limited per reason, so that an
//     attacker cannot flood the log: once a reason's burst is spent,
//     further lines of that reason are counted, and the next line logged
//     for it is preceded by one saying how many were suppressed.
//     Credentials are never passed to it: callers log fingerprints.
//
// # Concurrency
//
// Every function and method is safe for concurrent use. A [TrustedProxies]
// is immutable once built. The package starts no goroutines.
package guard
