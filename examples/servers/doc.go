// Package servers holds example MCP servers for agenthost: notes (stdio,
// one process per user, told apart by MCP_ACCESS_TOKEN), bearer
// (Streamable HTTP behind a bearer token) and oauth (Streamable HTTP
// behind OAuth 2.1, with its own authorization server). Each is a main package under
// this folder; this package has no code.
package servers
