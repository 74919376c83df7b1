// Package extmcp is the MCP extension of agenthost: it turns the MCP
// servers a user may use into tools named "server/tool".
//
// # Config
//
// The operator's config block lists servers under "mcpServers" (Claude
// Desktop's shape) or "servers" (VS Code's), each a stdio command or a
// remote url, plus agenthost's fields: credentials (user or shared),
// availability (default or opt-in), users, sharedAuthority, timeout (a
// duration string such as "30s", or a number of seconds), enabled, tools
// (exposure per tool name or glob) and protocolVersion. "userServers"
// (none, url, all) says which servers of their own users may add in the
// "Your MCP servers" section. [ParseConfig] reports every problem, each
// naming the server and the field; the host refuses to start the
// extension on an invalid config.
//
// # Credentials
//
// A user's token for server S is the user's secret token:S ([TokenSecret]).
// A stdio server, started by the host once per user and connection through
// [ext.Host.ConnectService], gets it as MCP_ACCESS_TOKEN; a configured
// MCP_ACCESS_TOKEN is dropped on personal servers. A remote server gets
// `Authorization: Bearer <token>`, every configured Authorization header
// removed, and nothing without a token. A shared server lends the
// operator's credential (the secret token:S of [OperatorUser]) to the
// users on its allowlist only. Tokens never appear in errors, logs,
// status or results.
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
