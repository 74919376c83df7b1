// Package fakemodel is a stand-in for the Anthropic Messages API, so that
// Claude Code's real CLI (`claude -p`, from npm, pinned in
// examples/e2e/testdata/claude) runs offline against our /mcp in tests.
// Serve a Server on loopback and point the CLI at it with
// ANTHROPIC_BASE_URL; command fakemodel (cmd/fakemodel) serves one for
// runs by hand.
//
// # What it answers
//
// The CLI's traffic to its model is one POST /v1/messages per model turn,
// streamed (server-sent events) because the CLI asks for it; without
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC it also sends HEAD /api/hello
// (a reachability probe) and looks up outside hosts in DNS. The stand-in
// answers /v1/messages (streamed or not) and /v1/messages/count_tokens,
// says 200 to /api/hello, and 404 to anything else, recording it (Other).
// Each answer depends only on the request, never on earlier ones:
//
//   - any message of the conversation holds a tool_result (and
//     Script.Loop is off: with it, every answer calls the tool): the final
//     text (Script.Final) (looking only at the last message failed: the
//     CLI's last message is not always the one with the tool_result);
//   - the tools list holds Script.Tool: a tool_use of it with
//     Script.Input;
//   - otherwise: Script.NoTool (the agent could not list the tool).
//
// Each answer reports Script.OutputTokens of usage (default 1): the CLI
// computes its spending, and so its --max-budget-usd limit, from usage.
//
// It records per request the tool names offered, the tool_result blocks
// sent back (text and is_error) and what it answered (Requests). It
// never records headers: neither the dummy API key nor anything else.
//
// # Claude Code, run offline against /mcp (CLI 2.1.332)
//
// The MCP configuration file, given to --mcp-config (0600: it holds the
// token):
//
//	{"mcpServers":{"agenthost":{"type":"http","url":"http://HOST:PORT/mcp",
//	  "headers":{"Authorization":"Bearer TOKEN"}}}}
//
// The command, run in a folder of its own:
//
//	claude -p PROMPT
//	  --mcp-config FILE --strict-mcp-config   only our /mcp, no user or project MCP servers
//	  --tools ""                              no built-in tools at all (Bash, Read, Agent, Glob, ...)
//	  --allowedTools mcp__agenthost           our tools run without a permission prompt
//	  --disallowedTools Bash,Read,Write,Edit,... refuse the built-ins again by name (belt and braces)
//	  --max-turns 3                           turn limit (a hidden flag, still honoured): exit 1, subtype error_max_turns
//	  --max-budget-usd 1                      budget limit (with -p only), from the usage the model reports,
//	                                          checked between turns: exit 1, subtype error_max_budget_usd
//	  --no-session-persistence                no transcript kept on disk
//	  --output-format json                    one JSON object: result, is_error, num_turns, permission_denials
//
// The environment (nothing else is needed):
//
//	HOME=<a folder of the session's own>          the CLI writes ~/.claude.json, ~/.claude/ and ~/.cache there
//	ANTHROPIC_API_KEY=<the model credential>      a dummy for the stand-in
//	ANTHROPIC_BASE_URL=http://127.0.0.1:PORT      only for the stand-in
//	CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1    no telemetry, error reports, update checks, /api/hello
//	DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1   the same, named one by one
//	ENABLE_TOOL_SEARCH=false                      our tools sent in the tools list, not deferred
//	PATH=<for node, if the CLI is an npm install>
//
// With these, strace shows the CLI connecting only to the model's URL and
// to /mcp (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC alone gives that in
// 2.1.332; without it the CLI resolves outside hosts). With tool search on
// (the default) and many tools, the CLI sends MCP tools as deferred
// names in a system message to be loaded through its ToolSearch tool, so
// the stand-in would not see them in the tools list; a real model copes
// either way.
//
// Tool names: the CLI names an MCP tool mcp__<server>__<tool>, where
// <server> is the key in mcpServers and <tool> the name the server lists.
// Our /mcp lists catalog tool notes/add_note as notes__add_note, so the
// CLI calls it mcp__agenthost__notes__add_note. --allowedTools takes
// those names, or mcp__agenthost for every tool of our /mcp. Without
// --allowedTools the CLI with -p refuses the call itself (a
// permission_denials entry, an is_error tool_result to the model).
//
// The token is not written by the CLI to its HOME (its MCP log shows the
// Authorization header as [REDACTED]); the MCP configuration file is the
// one place it is on disk.
//
// # Concurrency
//
// A Server is safe for concurrent use; Requests and Other return copies.
package fakemodel
