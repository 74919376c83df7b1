// Package extmcp will be the MCP extension: the mcpServers config, go-sdk
// connectors, and the catalog wired to ext.Serve.
package extmcp
