// Package extmcp is the MCP extension of agenthost: it turns the MCP
// servers a user may use into tools named "server/tool".
//
// # Config
//
// The operator's config block lists servers under "mcpServers" (Claude
// Desktop's shape) or "servers" (VS Code's), each a stdio command or a
// remote url, plus agenthost's fields: credentials (user or shared),
// availability (default or opt-in), users, sharedAuthority, timeout (a
// call's idle limit, which each progress notification restarts: a duration
// string such as "30s", or a number of seconds), maxDuration (a hard limit,
// none by default), enabled, tools (exposure per tool name or glob),
// protocolVersion, maxResultBytes (the largest message the server may
// send), allowInsecureHTTP (plain http beyond loopback),
// showOutputToUsers (a shared stdio server's users see what its process
// wrote when it failed; otherwise only the operator does, see failure.go)
// and oauth (see OAuth below). "userServers"
// (none, url, all) says which servers of their own users may add in the
// "Your MCP servers" section; userServerAllowCIDRs and
// userServerAllowHTTP open what those may reach, and maxResultBytes
// bounds every server's messages (default [DefaultMaxResultBytes]). Stdio
// servers take sandbox and readablePaths (run it in the host's sandbox,
// seeing those paths; a top-level "sandbox" sets it for every stdio
// server); the users' own stdio servers always run in the host's sandbox
// (the extension then lists [ext.CapabilitySandbox], so a host that cannot
// sandbox refuses it). "catalog" lists servers users may add to their own
// by filling in their inputs, each a settings section of its own
// (usercatalog.go).
// [ParseConfig] reports every problem, each naming the server and the
// field; the host refuses to start the extension on an invalid config.
//
// # Where servers may connect, and how much they may send
//
// A user's own remote server dials through package ext/netguard: no
// loopback, private, link-local, CGNAT, multicast or reserved address
// unless userServerAllowCIDRs opens it, checked on each dialed address
// (redirects and rebinding names included), and no plain http beyond
// loopback unless userServerAllowHTTP. No server may reach the host's own
// listen address or public URL ([ext.ConfigureRequest]): that would loop.
// A refused server is quarantined with the reason, naming it. Each
// message a server sends is bounded where it arrives (the stdio reader,
// ext-mcp's own HTTP requests, go-sdk's event size and a capped body): a
// result over the limit fails its request with an error naming the limit
// and the server, without being buffered, and the connection goes on.
//
// # Credentials
//
// A user's token for server S is the user's secret token:S ([TokenSecret]),
// read once per refresh of the user (the plan binds it to the connections
// it makes). A stdio server, started by the host once per user and
// connection through [ext.Host.ConnectServiceSpec] with the spec built
// here (so the host does not call back into StartService), gets it as
// MCP_ACCESS_TOKEN; a configured
// MCP_ACCESS_TOKEN is dropped on personal servers. A remote server gets
// `Authorization: Bearer <token>`, every configured Authorization header
// removed, and nothing without a token. A shared server lends the
// operator's credential (the secret token:S of [OperatorUser]) to the
// users on its allowlist only; it is opt-in (the "MCP servers" form is the
// same for every user, so its switch reads off for all), and a user off
// the list who switches it on is refused and sees why in their status. Tokens never appear in errors, logs,
// status or results. The "MCP servers" form has a token field only for a
// server that reads one (a personal stdio server, a remote one with a
// configured Authorization header; not a remote one without, which signs
// in with OAuth or needs no credential), and each switch names its status
// entry so that the settings page shows the server's state beside it.
// A server added from the operator's catalog (usercatalog.go) may take
// more secrets: each secret input beside the token is the user's secret
// input:S:<input> ([InputSecret]), read with the token, put into its
// header or env value only when the request is sent or the process
// started, and redacted like it; a required one not set leaves the server
// out with a reason naming it.
//
// # OAuth
//
// A remote Streamable HTTP server without a token that answers 401 waits
// for a sign-in ([ext.StateNeedsSignIn], with the link of
// [ext.SignInURL] and the CLI command). The "auth" capability
// ([Extension.BeginAuth], [Extension.CompleteAuth]) signs the user in
// with go-sdk's AuthorizationCodeHandler (discovery from the 401, the
// host's client ID metadata document, else the config's oauth.clientId,
// else dynamic registration; PKCE S256, iss, the resource indicator,
// step-up scopes; an authorization server whose RFC 8414 metadata does
// not list S256, or that publishes none, is refused, unless the operator
// set oauth.allowDefaultEndpoints on the server, which allows one that
// publishes none the MCP 2025-03-26 endpoints at its root) and stores the
// grant as the user's secret [GrantSecret] (the operator's, for a shared
// server), bound to the issuer and client and sealed under the operator
// secret [GrantKeySecret] (a grant a user wrote themselves is dead).
// Every connection of a user to a grant shares one token source:
// refreshes happen before expiry and on a 401, one at a time, with the
// resource indicator, each new refresh token stored before it is used; a
// refused refresh (invalid_grant and other 4xx) makes the grant dead and
// the server wait for a sign-in again, a transient one (network, 5xx) is
// retried and the connection kept. Every OAuth request goes through the
// address guard of the server's own connections (below): a user's own
// server's discovery and token requests may not reach internal addresses
// either. A call that fails for want of the user's sign-in (the server
// waits for one, or the call found its grant dead) answers a client that
// declared URL-mode elicitation with MCP 2025-11-25's URL elicitation
// required error (-32042, [ext.CodeURLElicitationRequired]) carrying the
// sign-in link, at most once a minute per user and server; other calls
// and clients get the error result with the link. Nothing waits for the
// person. So that an agent hears of a server before the user's first
// sign-in, when it has no tools, each catalog published for the user
// holds, for each of the user's servers S that waits for the user's own
// sign-in (never a shared one), the tool "S/sign_in" ([SignInTool]),
// whose call answers as above, and an instruction naming the servers that
// wait with their links; the next publish after the sign-in drops them.
//
// A shared server with oauth.grant "client_credentials" has no sign-in:
// one token source per server, shared by every user's connection and
// safe for concurrent use (one token request at a time under its lock),
// obtains the token with the operator's client secret or private key
// (private_key_jwt) at the first request and again before it expires,
// and keeps it in memory only.
//
// # Beyond tools
//
// A server's prompts ("server/prompt"), resources and resource templates
// (URIs as the server gives them; a URI two servers offer goes to the
// first by name) and instructions are published with its tools
// ([ext.Host.SetUserCatalog]); prompts/get, resources/read and
// (un)subscribe, completion/complete and tasks/* reach the server they
// belong to (task IDs read "server/id"). The client declares sampling,
// elicitation (form and URL) and roots, so servers keep the tools that
// need them: what a server asks goes to the client session of the request
// it belongs to — on Streamable HTTP the request whose stream carried it;
// on stdio, which carries no such link, the most recent request in flight
// — else to the user's most recent session (roots asked at connect).
// Progress reaches the calling session under its own token; a server's log
// messages reach every session of the user, the logger prefixed with the
// server's name; cancelling a call sends notifications/cancelled.
//
// # The call path
//
// On stdio and on Streamable HTTP sessions (revisions up to 2025-11-25),
// tools/call and the requests above are ext-mcp's own requests beside
// go-sdk's session — on the same pipes, read by ext-mcp's own line reader,
// or as POSTs in the same session — so results come back as bytes and go
// to the host untouched ([ext.CallToolResult.Raw]). A POST's event stream
// that ends before its answer is resumed from its last event id (a GET
// with Last-Event-ID after the server's retry), as go-sdk's client does:
// at most 5 tries in a row that bring no new event. go-sdk keeps the
// handshake, the lists and the notifications; legacy SSE and stateless
// servers go through go-sdk for everything (tasks need the own path).
//
// # Protocol
//
// Servers speak [DefaultProtocolVersion] unless their config pins another
// or "latest" (go-sdk then tries the stateless draft first and falls back).
//
// # Concurrency
//
// [Extension] is safe for concurrent use: the host calls its capability
// methods from many goroutines. Each user's catalog work is serialized by
// package catalog; calls run in parallel. Shutdown drains running calls
// and closes every connection.
package extmcp
