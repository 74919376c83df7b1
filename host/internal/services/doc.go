// Package services runs per-user service processes for extensions: one
// process per (extension, service, user), started on the first connect,
// reference-counted, stopped after an idle time (close stdin, SIGTERM,
// SIGKILL), capped in number (the least recently used idle process is
// stopped first; when all are busy a connect waits a bounded time, then
// fails clearly with [ErrBusy]; [Manager.Freed] tells when to try again).
//
// Nothing a process starts outlives it: each runs in its own process
// group and, where the host may create cgroups (cgroup v2), its own
// cgroup, and whatever is left in either when it exits or is stopped is
// killed; the process is reaped only after that, so its group ID cannot
// have been reused. Its stderr is logged, never waited for past its exit;
// its last lines (bounded, control characters escaped) and its exit status
// are kept for its handles ([Handle.Exit]), which the extension shows.
// A record per process group (RunDir) lets the next manager on the same
// folder kill what a killed host left, checking start times so that a
// reused pid is never touched.
//
// A spec marked Sandbox runs in bubblewrap: a private pid namespace, the
// system folders read-only, its own folder read-write, its readable paths,
// and nothing of the hidden folders (the host's data folder); as root,
// with a uid of its user's own. Where no sandbox works it is refused,
// unless SandboxOptions.AllowUnsandboxed.
//
// The [Manager] owns every process and every goroutine it starts; Close
// stops them all and waits. All methods are safe for concurrent use.
package services
