// Command agenthost-ext-codemode is the code mode extension process: the
// host starts it and talks to it over go-plugin gRPC.
package main

import (
	"runtime"

	"github.com/agenthost/agenthost/ext"
	codemode "github.com/agenthost/agenthost/ext-codemode"
)

// The main goroutine keeps the main thread to itself: scripts that
// compute run on threads set to idle priority for good, which must end
// with their run, and the runtime never ends the main thread. The engine
// moves an entry off the main thread when it lands there, at the price of
// a goroutine hop; locked here, none lands there.
func init() { runtime.LockOSThread() }

func main() { ext.Serve(codemode.New()) }
