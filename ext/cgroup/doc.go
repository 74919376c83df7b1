// Package cgroup contains processes in cgroups v2 so that they can be
// killed whole: a tree under the caller's own cgroup, one child cgroup
// per contained process, whose members are found and killed even when
// they left their process group (setsid, a double fork). The host uses it
// for users' service processes (host/internal/services) and ext-runner for
// agent sessions; it is Linux only (elsewhere [Open] fails and the rest
// does nothing).
//
// A process starts inside its cgroup with [syscall.SysProcAttr.CgroupFD]
// (clone3 with CLONE_INTO_CGROUP: no window for a fork to escape), from
// the file [Tree.Create] opens.
//
// Concurrency: a [Tree] is safe for concurrent use; the functions touch
// only the cgroup folders they are given.
package cgroup
