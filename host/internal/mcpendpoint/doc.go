// Package mcpendpoint is the host's agent-facing MCP endpoint: MCP
// Streamable HTTP, served with go-sdk, where each authenticated user sees
// and calls their own tools.
//
// # Use
//
//	ep, err := mcpendpoint.New(host, verifier, &mcpendpoint.Options{Limiter: lim})
//	mux.Handle("/mcp", ep)
//	...
//	ep.CloseToken(id) // after revoking token id in the verifier's store
//	ep.Sessions()     // for the status page
//	ep.Close()        // before the host closes
//
// The endpoint talks to the host only through [Host]: Tools lists a
// user's tools, Call runs one, Subscribe reports changes.
//
// # Protocol revision
//
// The endpoint speaks the stateful revision 2025-11-25 (and 2025-06-18
// for older clients), not the stateless draft 2026-07-28:
//
//   - Sessions carry state the draft has no place for: the deferred tools a
//     session found with search_tools join that session's list only.
//   - tools/list_changed must reach every open session of a user when the
//     user's tools change, and only those. A stateful session has the
//     standalone SSE stream (GET) for that; go-sdk sends a server's
//     list_changed to that server's sessions, so each session gets its own
//     [mcp.Server].
//   - go-sdk binds a stateful session to the verified principal
//     (TokenInfo.UserID) and refuses the session to anyone else: SECURITY.md
//     F5. The endpoint binds it to the user and the token that opened it.
//   - It is cheaper per call: go-sdk measured 556 µs stateful against
//     617 µs stateless (LIBRARIES.md, "Performance facts"), and most
//     third-party clients speak 2025-11-25 only.
//
// A go-sdk v1.8 client first tries server/discover (2026-07-28); the
// stateful handler refuses it and the client falls back to initialize, one
// extra round trip at connect time and nothing per call. 2025-03-26 is not
// offered because it obliges servers to accept JSON-RPC batches, which the
// endpoint refuses (400) for every revision.
//
// # Requests
//
// ServeHTTP checks, in this order: the Host header (a loopback connection
// must name a loopback host: DNS rebinding, 403; go-sdk checks it again),
// the Origin header (absent, a loopback origin or one of
// [Options.AllowedOrigins], else 403), the body size
// ([Options.MaxBodyBytes], 413), the bearer token (401 with
// WWW-Authenticate: Bearer; 403 for a valid token that stands for no user,
// such as an operator's; 503 when the verifier cannot decide), batches
// (400). The token is checked before the lockout: a valid token is served
// whatever others failed from its address; an invalid one is reported to
// [Options.Limiter], and gets 429 with Retry-After instead of 401 once the
// limiter has locked its address or the token out. Refused requests are
// logged through a rate-limited [guard.RefusalLog]; tokens never are.
//
// The endpoint expects its [http.Server] (the lead's) to set
// ReadHeaderTimeout (for example 10 s) and IdleTimeout, and no
// WriteTimeout: the standalone SSE stream of a session lives as long as
// the session. TLS, the listener and a loopback default bind are the
// server's too.
//
// # Tool names
//
// MCP tool names allow only A-Z, a-z, 0-9, '_', '-' and '.'. A host name
// "server/tool" becomes "server__tool" ([Options.Separator]); any other
// character becomes '_'. A name longer than 64 characters, and every name
// of a group that maps to the same result, is cut and given "_" plus 8 hex
// digits of the SHA-256 of the original name. Each tool's definition
// carries its host name in _meta "agenthost/name". Calls map back through
// the user's table, never by parsing.
//
// # Exposure
//
// direct tools are listed. deferred tools are found with search_tools
// (listed when the user has any), which then adds them to that session's
// list and notifies it; a call by name works before that too. codemode
// tools are never listed, and a call gets the error result "tool X is only
// callable from code".
//
// # Calls
//
// Arguments reach the host as the raw JSON go-sdk read. The result's
// content blocks are sent as the host's bytes (each validated and compacted
// by encoding/json as it writes them, never decoded into Go values), and
// structured content as raw JSON. A host error becomes an error result
// that names the tool and the kind of failure, never the host's message.
// The conversation of a call is "mcp:" plus the session ID.
//
// A tools/call on an open session takes a fast path: the endpoint decodes
// it once, runs it on the request's goroutine and writes the response
// itself, instead of going through go-sdk's asynchronous JSON-RPC
// connection (which allocates 32 KiB per decoded message and hands each
// request across several goroutines). Measured on the real path
// (examples/bench BenchmarkEndpointCall), it cut the p50 from ≈1,570 µs to
// ≈1,210 µs and raised throughput from ≈1,300 to ≈1,740 calls/s. It answers
// exactly as go-sdk would (tested); anything else — other methods,
// notifications, progress tokens, unknown tools, a session of another
// principal, an unsupported protocol version, and every request when
// [Options.SessionTimeout] is set (go-sdk's idle clock counts only the
// requests it sees) — goes to go-sdk unchanged.
//
// A POST is answered with a single application/json body rather than an
// SSE stream (both are allowed by the spec, and clients must accept both):
// it measured 10-15% faster per call, and the endpoint sends no messages
// tied to a request. Server-initiated messages (list_changed) use the
// session's standalone SSE stream.
//
// # Concurrency
//
// All methods of [Endpoint] are safe for concurrent use. Each user with
// sessions has one goroutine that reloads the user's tools when the host
// reports a change and updates that user's sessions; each open session has
// one goroutine that waits for its end. [Endpoint.CloseToken] returns at
// once (it may run in a revocation callback): the token's sessions refuse
// every request from then on, their calls in flight are cancelled, and
// they close in the background. [Endpoint.Close] cancels calls in flight,
// closes every session and joins every goroutine the endpoint started.
package mcpendpoint
