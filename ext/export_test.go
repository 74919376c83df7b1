package ext

// UnaryCallerCalls is how many CallerTools calls went as gRPC calls.
func UnaryCallerCalls() int64 { return unaryCallerCalls.Load() }

// SetCallerFrames turns the call channel's caller frames on or off for an
// extension's host (benchmarks compare both ways).
func SetCallerFrames(h any, on bool) { h.(*hostClient).callerFrames = on }
