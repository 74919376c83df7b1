package mcpendpoint

// ToolCalls returns how many tools/call requests the endpoint answered
// (for tests).
func ToolCalls(e *Endpoint) int64 { return e.calls.Load() }

// SetStatelessFast turns the stateless revision's fast path for tools/call
// on or off (for tests that compare it with go-sdk's handler).
func SetStatelessFast(e *Endpoint, on bool) { e.noFast.Store(!on) }

// StatelessFastCalls returns how many stateless tools/call requests the
// fast path took (for tests).
func StatelessFastCalls(e *Endpoint) int64 { return e.fastCalls.Load() }
