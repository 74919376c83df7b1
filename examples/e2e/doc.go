// Package e2e holds end-to-end tests that run the real binaries: the
// agenthost host and CLI, the ext-mcp extension, and the example MCP
// servers.
package e2e
