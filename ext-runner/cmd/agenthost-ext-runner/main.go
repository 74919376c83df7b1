// Command agenthost-ext-runner is the runner extension process: the host
// starts it and talks to it over go-plugin gRPC.
package main

import (
	"github.com/agenthost/agenthost/ext"
	extrunner "github.com/agenthost/agenthost/ext-runner"
)

func main() { ext.Serve(extrunner.New(nil)) }
