// Package mcpendpoint is the host's agent-facing MCP endpoint: MCP
// Streamable HTTP, where each authenticated user sees and uses their own
// tools, prompts, resources and resource templates, and everything MCP
// carries beside results (progress, cancellation, log messages, sampling,
// elicitation, roots, subscriptions, completions, tasks) travels between
// the user's client and the host.
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
// The endpoint talks to the host only through [Host].
//
// # Protocol revisions
//
// Stateful sessions (initialize, Mcp-Session-Id) speak 2025-11-25,
// 2025-06-18 and 2025-03-26; an initialize asking for another revision is
// answered with 2025-11-25, as the spec says. 2025-03-26 obliges servers to
// accept JSON-RPC batches, so its sessions take them (at most 256
// messages; answered with an array, or as events once the answer is a
// stream); later revisions removed batches and get 400 for one. As JSON-RPC
// 2.0 §6 says, each message of a batch is answered on its own: one that is
// no valid message (or an initialize, which a batch may not hold) gets an
// Invalid Request error, under its id when it is a request with a string
// or number id (a request whose id an earlier one of the batch has gets
// it under none), and the others run; a batch of notifications and responses
// only gets 202, an empty one an Invalid Request error, a body that is not
// JSON a Parse error. Tasks are offered from 2025-11-25.
//
// The stateless revision 2026-07-28 (server/discover, no sessions, every
// request carrying its revision) is served on the same URL by go-sdk's
// stateless handler, with one go-sdk server per user that mirrors the
// user's tables (see stateless.go); a plain tools/call of it takes a fast
// path that answers as that handler does without going through it (see
// statelessfast.go). A request is routed by its shape: one
// with Mcp-Session-Id, or an initialize, goes to the stateful sessions;
// server/discover, an Mcp-Protocol-Version of 2026-07-28 or later, or a
// request carrying the revision in its _meta go to the stateless handler.
// Either way the request was authenticated first and is served from its
// verified user's tables only. A go-sdk v1.8 client that is not pinned
// tries server/discover first and so speaks 2026-07-28; pinned to
// 2025-11-25 it opens a session.
//
// Why the stateful sessions are the endpoint's own code and not go-sdk's
// server: go-sdk builds an [mcp.Server] for a session's own tool list
// (deferred tools join one session's list only), which with its
// connection goroutine held ≈14.5 KiB per idle session and took ≈3 ms
// per initialize for a user with 20 tools (every tool registered again;
// BenchmarkIdleSessions); it has no tasks, no
// raw relay of results and server requests, and its idle clock counted
// only the requests it saw. A session here is a struct (≈0.7 KiB with
// the host's registration of it, no goroutine, no timer); a request runs
// on its POST's goroutine.
//
// # Requests
//
// ServeHTTP checks, in this order: the Host header (a loopback connection
// must name a loopback host: DNS rebinding, 403), the Origin header
// (absent, a loopback origin or one of [Options.AllowedOrigins], else 403),
// the body size ([Options.MaxBodyBytes], 413), the bearer token (401 with
// WWW-Authenticate: Bearer; 403 for a valid token that stands for no user,
// such as an operator's; 503 when the verifier cannot decide). The token
// is checked before the lockout: a valid token is served whatever others
// failed from its address; an invalid one is reported to
// [Options.Limiter], and gets 429 with Retry-After instead of 401 once the
// limiter has locked its address or the token out. Refused requests are
// logged through a rate-limited [guard.RefusalLog]; tokens never are.
// Then a session's requests must carry the token that opened it (another
// user's, or another token of the same user: 403) and a revision of the
// session's kind (400).
//
// A POST is answered with one application/json body, the plain and fast
// case (a tools/call is decoded once, runs on the request's goroutine and
// its result bytes are written as they came). When something tied to the
// request must reach the client first — progress, a log message, a
// sampling, elicitation or roots request of a server — the answer becomes
// an SSE stream that carries those and then the result. Messages outside
// any request (list_changed, resource updates, log messages, requests of
// the host's [ext.Host.RequestUser]) travel on the session's standalone
// stream (GET), queued so that a slow client never stalls a sender: when
// its queue is full the stream ends and the client reconnects. That
// stream's events carry IDs, unique in the session, so that a client
// counts each reconnect as progress; what it missed is not replayed
// (Last-Event-ID is ignored). A POST's stream carries none: a client
// whose POST stream breaks learns at once that its answer is lost.
//
// The endpoint expects its [http.Server] to set ReadHeaderTimeout and
// IdleTimeout, and no WriteTimeout: the standalone stream of a session
// lives as long as the session (each event's write is bounded on its own).
//
// # Sessions and their bounds
//
// A session is bound to the user and the token that opened it, attached to
// the host (Host.AttachSession) so that the extensions' notifications and
// requests for the user reach it, and closed by DELETE, by
// [Endpoint.CloseToken], by [Endpoint.Close], when idle for
// [Options.SessionTimeout] (default 30 min; a request in flight holds it
// open, every request restarts the clock), or to make room:
// [Options.MaxSessionsPerUser] (default 64) closes the user's least
// recently used session without a request in flight when the user opens
// one more (429 when all are busy), and [Options.MaxSessions] (default
// 10,000) refuses new sessions with 503 and Retry-After. A closed
// session's client gets 404 and must initialize again. On the stateless
// revision, which has no sessions, [Options.MaxOpenPerUser] (default 256)
// caps a user's open requests (calls in flight, listen streams) over all
// the user's tokens. Per session the
// endpoint holds at most 256 requests in flight, 256 resource
// subscriptions and 256 requests to the client awaiting its answer (one
// more fails at once with [ext.ErrUnavailable]); a session's requests to
// the client end with the request that made them.
//
// # Names
//
// MCP tool names allow only A-Z, a-z, 0-9, '_', '-' and '.'. A host name
// "server/tool" becomes "server__tool" ([Options.Separator]); any other
// character becomes '_'. A name longer than 64 characters, and every name
// of a group that maps to the same result, is cut and given "_" plus 8 hex
// digits of the SHA-256 of the original name. Each tool's definition
// carries its host name in _meta "agenthost/name". Prompt names are mapped
// the same way (and mapped back for completions); resource URIs travel as
// they are, and the host routes them. Calls map back through the user's
// table, never by parsing. A call of a name the table lacks is -32602
// "unknown tool"; when the name starts with the mapped prefix of a server
// the user has listed tools of (the longest such), the message names
// those tools with their titles (five at most), so that an agent calling
// a tool of a server that waits for a sign-in learns of its sign-in entry.
//
// Every list (tools, prompts, resources, templates) is the user's own:
// it is sorted (by name, URI or URI template), paged (1,000 a page, an
// opaque cursor) and carries cacheScope "private".
//
// # Exposure
//
// direct tools are listed. deferred tools are found with search_tools
// (listed when the user has any), which then adds them to that session's
// list and notifies it; a call by name works before that too. codemode
// tools are never listed, and a call gets the error result "tool X is only
// callable from code".
//
// # Scoped tokens
//
// A [Principal] with a Scope is served from a view of its user: the
// user's tables filtered by the scope (tools by [ext.Scope.AllowsTool], or,
// for a tool with a scoped description such as code/run, by the tools its
// parts name, its description re-assembled from those parts ([inScope]),
// prompts by server, resources and templates by the server they name,
// instructions by source), one view per user and scope, shared by every
// session and stateless request of that scope and refreshed like the
// user's own. Everything else follows from the view: lists, search_tools,
// the unknown-tool hint, and list_changed (sent only when the view's
// list changed). Calls, prompts and reads carry the scope to the host,
// which checks it again; a subscription or completion outside the view is
// refused here. A scoped session has no tasks, hears no log messages or
// elicitation completions, and is never asked a server's request outside
// its calls (any server of the user may be behind those). A principal
// with Ends (a host token that expires) has its sessions closed then,
// one timer per session; every request is verified anyway.
//
// # Calls
//
// Arguments reach the host as the raw JSON the client sent, with the
// client's progress token, the rest of its _meta, its task parameters and
// an [ext.Session] for that very request: progress goes out under the
// client's token (dropped when it asked for none), log messages pass the
// session's level (none before logging/setLevel), and sampling,
// elicitation and roots requests reach the client when it declared the
// capability (else [ext.ErrUnimplemented]). A client's
// notifications/cancelled, or its dropped connection, cancels the host's
// call. The result is sent as the host's bytes: a whole raw result (a
// server's, or a task's CreateTaskResult) checked to be a JSON object,
// content built from fields checked to be an array of valid blocks. A host
// error becomes an error result that names the tool and the kind of
// failure, never the host's message. The conversation of a call is "mcp:"
// plus the session ID.
//
// # Instructions
//
// initialize's instructions hold a note about search_tools (when the user
// has deferred tools), then one paragraph per source of the extensions'
// instructions, in the host's order (by extension, then source), each
// prefixed with its source's name in brackets ("[everything] ..."). Each
// source's text is cut at 4 KiB and the whole at 16 KiB: sources past it
// are left out and counted in a last line.
//
// # Concurrency
//
// All methods of [Endpoint] are safe for concurrent use. Each user with
// sessions (or a recent stateless request) has one goroutine that reloads
// the user's tables when the host reports a change and tells that user's
// sessions; one sweeper goroutine closes idle sessions. [Endpoint.CloseToken]
// returns at once (it may run in a revocation callback): the token's
// sessions are closed, their calls in flight cancelled, and what is left
// (dropping their resource subscriptions at the host) runs in the
// background. [Endpoint.Close] closes every session, waits for the closes
// other requests (DELETE, CloseToken) have under way, and joins every
// goroutine the endpoint started.
package mcpendpoint
