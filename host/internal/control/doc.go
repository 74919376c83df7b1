// Package control is the host's local control socket: a small JSON API on a
// unix socket in the data folder (owner-only: the folder is 0700, the
// socket 0600, and the peer's uid is checked), through which the agenthost
// CLI reaches a running host so that `settings set` or `secret set` takes
// effect at once in it. [Serve] and [Client] are its two ends.
//
// A [Server] owns its listener and its goroutines; Close waits for them.
// Client methods are safe for concurrent use.
package control
