// Package services runs per-user service processes for extensions: one
// process per (extension, service, user), started on the first connect,
// reference-counted, stopped after an idle time (close stdin, SIGTERM,
// SIGKILL, to the whole process group), capped in number (the least
// recently used idle process is stopped first; when all are busy a connect
// waits a bounded time, then fails clearly).
//
// The [Manager] owns every process and every goroutine it starts; Close
// stops them all and waits. All methods are safe for concurrent use.
package services
