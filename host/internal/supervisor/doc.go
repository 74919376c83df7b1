// Package supervisor launches extension processes over go-plugin and keeps
// them running. It is the only package of the host that imports go-plugin.
//
// [Launch] starts one process; each [Instance] is owned by its caller, who
// must Kill it; Kill waits for every goroutine go-plugin started. Launch is
// safe for concurrent use.
//
// [Managed] is the restart state machine of one extension: it owns its
// generations (processes or in-process values) and the goroutines that
// watch and restart them, all under a lifetime context that [Managed.Stop]
// cancels before it joins them.
package supervisor
