// Package catalog is the per-user catalog engine: it keeps each active
// user connected to the servers they may use, publishes their tools and
// routes their calls. It is generic over a [Connector], so it knows
// nothing about MCP; package extmcp plugs in go-sdk connections.
//
// # The rules
//
// A user's catalog is activated on demand ([Engine.Activate]). A refresh
// asks the [Planner] for the user's active set ([Plan]), then:
//
//   - connections no longer in the set are retired; those still in it (same
//     name and [ServerDecl.Fingerprint]) are kept, and revived if they were
//     draining; new ones are connected in parallel;
//   - a server that fails to connect or to list its tools is quarantined for
//     that user alone, with the reason, and retried with jittered
//     exponential backoff ([Backoff]); a connection that dies (its
//     [Conn.Done] closes) is quarantined the same way; a recovered server is
//     picked up by the retry;
//   - a server whose connect failed for want of a resource of the host
//     ([ext.ErrBusy]: every service process slot taken) is quarantined the
//     same way, but also retried by the user's next refresh, whatever its
//     backoff: the host refreshes (activates) the user once a slot frees;
//   - a server whose connector answers [SignInError] waits for the user to
//     sign in instead ([ext.StateNeedsSignIn]): no retries, its calls answer
//     with how to sign in, and it is connected again when its fingerprint
//     changes (a new credential);
//   - a tool whose name has control characters (see package
//     ext/termsafe: an escape sequence, a forged line) is refused, and the
//     connected server's status names it, escaped; its other tools stay;
//   - each tool becomes "server/tool" with the exposure of the server's
//     [ToolPolicy]; hidden tools are neither registered nor callable; a
//     missing description reads "MCP tool T on server S."; a missing schema
//     reads {"type":"object"};
//   - the user's whole tool list is published in one call ([Publisher]).
//
// Retiring drains: calls already running finish and return their results;
// a new call gets the error result `MCP server "S" is disabled`; the
// connection closes when its last call returns. A retired connection that
// becomes active again before it closed is revived; once closed, a new one
// is made.
//
// A server's tools/list_changed notification re-lists that server and
// republishes the user's list atomically. Notifications are coalesced: at
// most one re-list runs and one more is queued per server, and consecutive
// re-lists are at least [Options.RelistInterval] apart.
//
// [SettingsPlanner] is the [Planner] of DESIGN.md §4 (the operator's
// servers, the user's switches and the user's own servers).
//
// # Concurrency
//
// Every method of [Engine] is safe for concurrent use. All work for one
// user (refresh, retire, crash handling, re-list commits) is serialized and
// runs in arrival order; different users run in parallel. Calls never wait
// for a refresh: they see the set of the last committed one. The engine
// owns every connection and goroutine it starts: [Engine.Close] drains and
// closes every connection and joins every goroutine before it returns.
package catalog
