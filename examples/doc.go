// Package examples holds runnable, tested examples of agenthost: a minimal
// extension (hello), a program embedding the host and serving /mcp
// (embed), example MCP servers (servers/...), and the demo
// config. Nothing imports this module.
package examples
