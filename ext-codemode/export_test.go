package codemode

// RunCode exposes runCode (JavaScript or TypeScript) to the tests.
var RunCode = runCode

// SetEngineThreadHook sets the hook called on the engine's thread by each
// console output of a script; it returns the function that unsets it.
func SetEngineThreadHook(f func()) func() {
	engineThreadHook = f
	return func() { engineThreadHook = nil }
}
