// Package servers holds example MCP servers for agenthost: notes (stdio,
// one process per user, told apart by MCP_ACCESS_TOKEN) and bearer
// (Streamable HTTP behind a bearer token). Each is a main package under
// this folder; this package has no code.
package servers
