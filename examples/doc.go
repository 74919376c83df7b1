// Package examples holds runnable, tested examples of agenthost: a minimal
// extension (hello), a program embedding the host and serving /mcp
// (embed), example MCP servers (servers/...), an OpenID Connect provider
// for tests and demos (oidcprovider, built from zitadel/oidc), and the
// demo config. Nothing imports this module.
package examples
