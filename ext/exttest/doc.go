// Package exttest helps test extensions: [Connect] serves an extension over
// real gRPC in the test process, [FakeHost] is an in-memory host, and [Run]
// is the conformance suite every extension passes on both carriers.
//
// Everything here is safe for concurrent use and cleans up with the test.
package exttest
