// Package mcpwire owns agenthost's MCP wire: the protocol revisions and
// their constants, the JSON-RPC 2.0 messages built as bytes (results and
// errors around raw result bytes, requests and notifications around raw
// params), and Server-Sent Events as MCP's Streamable HTTP writes them.
// The host's MCP endpoint (host/internal/mcpendpoint) and the MCP
// extension (ext-mcp) build their messages here, so that a change on the
// wire, or a new revision, is made in one place; the golden transcripts of
// both (testdata/golden) show what goes on the wire.
//
// Nothing here decodes a result: results and params travel as the raw
// bytes they came as (the measured no-decode design of DESIGN.md §7).
// The package imports only the standard library, as all of module ext.
//
// # Concurrency
//
// Every function is pure (it appends to the slice it is given) and safe
// for concurrent use.
package mcpwire
