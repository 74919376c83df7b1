package exttest_test

import "testing"

// TestExampleConformance runs ExampleRun's conformance test, so the
// example's extension is known to pass the suite.
func TestExampleConformance(t *testing.T) { conformance(t) }
