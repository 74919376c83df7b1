// Command agenthost-ext-codemode is the code mode extension process: the
// host starts it and talks to it over go-plugin gRPC.
package main

import (
	"github.com/agenthost/agenthost/ext"
	codemode "github.com/agenthost/agenthost/ext-codemode"
)

func main() { ext.Serve(codemode.New()) }
