package mcpendpoint

// FastCalls returns how many calls the fast path served (for tests).
func FastCalls(e *Endpoint) int64 { return e.fast.Load() }
