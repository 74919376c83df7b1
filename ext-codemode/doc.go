// Package codemode is the code mode extension (agenthost-ext-codemode):
// one tool, code/run (code__run on /mcp), that runs a script the model
// writes, in which each tool the user may call from code is an async
// function. See README "Code mode".
//
// # Where it lives
//
// An extension of its own, not the host: all it needs from the host is to
// call tools as the calling user, which [ext.CallerTools] gives any
// extension for the length of a call, never wider than that call's caller
// (same user, scope and credential; no operator grant, unlike
// [ext.UserActor], which may act as anyone). The host tells it each active
// user's tools ([ext.UserToolsWatcher]) so that code/run is offered only
// to users who have a tool code may call, with those tools' TypeScript
// declarations in its description. The sandbox then runs in this
// process, so a script that exhausts something exhausts the extension at
// worst, never the host.
//
// # The engine, by measurement
//
// modernc.org/quickjs (QuickJS compiled to Go: no cgo) over
// github.com/dop251/goja, measured on this machine (2 cores, AMD EPYC;
// go test -bench, 200 runs each):
//
//	                               quickjs v0.27.0   goja (2026-09-17)
//	cold start (new VM, 1 script)       2.1 ms            0.12 ms
//	fib(20), CPU-bound                 11.9 ms           19.6 ms
//	'x'.repeat(2**29), 64 MiB cap   out of memory     (no cap: allocates)
//
// goja starts faster, but has no memory limit (its maintainer calls one
// out of scope), so a script allocating without end takes the process
// down; the only cure would be a child process per run. QuickJS enforces
// a heap cap in its own allocator ([Limits.MemoryBytes]: the script gets
// "out of memory", the process is unharmed), computes faster, and is
// interrupted from another goroutine (wall clock) and by its eval timeout
// (the CPU budget, counted only while JavaScript runs). Its default stack
// limit stops deep recursion in ~0.1 s; SetMaxStackSize is not used: a
// small value took seconds to trip and 1 MiB overflowed the goroutine's
// stack (measured).
//
// # The sandbox
//
// A run gets a fresh VM with nothing but tools, console and JavaScript's
// own built-ins: no std/os modules, no fetch, require, timers or eval.
// Promises settle only through tool calls, so a script awaiting anything
// else ends at once with an error saying so. Inner calls run on at most
// [Limits.Parallel] workers [Run] starts as calls overlap and waits for,
// [Limits.Calls] in all; arguments are checked against the tool's input
// schema (santhosh-tekuri/jsonschema) before the call. Each limit that ends
// a run is named in its error (Limit). TypeScript is stripped with
// esbuild's Go API when the code does not parse as JavaScript; an error's
// line is mapped back to the user's through esbuild's source map
// (go-sourcemap), since esbuild reformats the code.
//
// # Priority
//
// A script that computes runs at the lowest CPU priority, so that it only
// takes CPU nobody else wants: past its first 10 ms of JavaScript (the
// normal share) its thread is set to SCHED_IDLE (nice 19 where that is
// refused; Linux only, elsewhere the process's priority). Each entry into
// the engine runs locked to its thread with a timer for the share left;
// when it fires the thread is demoted and the run's goroutine never
// unlocks again, so the thread ends with the run instead of going back to
// Go's pool at that priority (an unprivileged thread cannot raise it
// again); an entry that ends first unlocks. A script that mostly waits on
// its calls therefore never runs on a locked thread, which cost every
// inner call a wake-up from another thread (43 µs against 24 µs an inner
// call, measured). The main thread is never demoted (the runtime never
// ends it): agenthost-ext-codemode's main goroutine keeps it, and an
// entry landing there elsewhere moves to a goroutine of its own. Inner
// calls run on the workers at normal priority: a call takes locks shared
// with other users' calls (the channel to the host), which a starved
// thread must not hold. The CPU budget (cpuSeconds) counts the time an
// entry takes while the thread is at normal priority, and the thread's
// own CPU clock once it is at idle priority: a script starved on a busy
// machine waits without spending its budget (the same timer watches the
// budget, so an entry at normal priority reads no clock). A starved thread keeps its Go P until the kernel runs it:
// Configure raises GOMAXPROCS to the CPUs plus maxRuns, so that the
// process's other goroutines always have one. A garbage collection's
// stop-the-world still waits for a starved thread to reach a safe point
// (other code-mode calls of the process may wait with it; the host and
// its other extensions, separate processes, do not).
//
// # Concurrency
//
// Extension's methods are called concurrently; at most maxRuns scripts
// run at once (more are refused, naming the limit). Each run drives its
// VM from its engine goroutine only (an entry moved off the main thread
// runs on a helper goroutine while the engine goroutine waits for it: the
// VM is never used by two at once), which [Run] starts and waits for, as
// it waits for the run's workers.
package codemode
