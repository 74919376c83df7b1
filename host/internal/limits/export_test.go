package limits

// SetStateMade sets the hook called after a new user state's limits are
// resolved and before it is stored (nil: none).
func SetStateMade(f func(user string)) { stateMade = f }
