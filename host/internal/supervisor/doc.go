// Package supervisor launches extension processes over go-plugin. It is the
// only package of the host that imports go-plugin.
//
// Each [Instance] is owned by its caller, who must Kill it; Kill waits for
// every goroutine go-plugin started. Launch is safe for concurrent use.
package supervisor
