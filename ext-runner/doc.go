// Package extrunner is the runner extension (agenthost-ext-runner): the
// host starts agent sessions itself. A runner names a user, the servers
// (and tool globs) its sessions may use, one of the operator's agent
// profiles (Claude Code's CLI, or any agent CLI through placeholders), a
// prompt, a time limit, how many sessions at once and its triggers (a
// cron schedule, "run now" through the host's actions, a change of a
// resource it subscribes to on the host's /mcp).
//
// Each session gets a token minted for it alone (ext.UserActor: scoped
// to the runner's servers, expiring at the time limit plus a minute,
// revoked at the session's end whatever the end), a folder of its own
// under the user's state folder (removed after; a crash's at the next
// session) holding the MCP config file (0600), and an environment of PATH,
// HOME (the folder) and the profile's variables only. The agent runs in a
// process group of its own, killed whole at the time limit, and dies with
// this process (Linux: the parent-death signal). Tokens minted and not
// yet revoked are listed in a ledger (an operator secret of this
// extension); at start, the ones a crash left are revoked.
//
// Concurrency: every method of [Extension] is safe for concurrent use;
// one mutex guards the runners' queues and history. The extension owns
// each goroutine it starts (a session, a schedule loop, a resource
// watcher) and each agent process (waited for by its session's
// goroutine); Shutdown cancels them all and waits.
package extrunner
