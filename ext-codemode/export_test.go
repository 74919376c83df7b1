package codemode

// RunCode exposes runCode (JavaScript or TypeScript) to the tests.
var RunCode = runCode
