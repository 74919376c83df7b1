package codemode_test

import (
	"os"
	"runtime"
	"testing"
)

// mainThreadFree, set in the environment, leaves the main thread to the
// scheduler (TestEntriesLeaveTheMainThread's child process).
const mainThreadFree = "CODEMODE_TEST_MAIN_THREAD_FREE"

func TestMain(m *testing.M) {
	if os.Getenv(mainThreadFree) == "" {
		runtime.LockOSThread() // as agenthost-ext-codemode's main does
	}
	os.Exit(m.Run())
}
