package mcpendpoint

// ToolCalls returns how many tools/call requests the endpoint answered
// (for tests).
func ToolCalls(e *Endpoint) int64 { return e.calls.Load() }
