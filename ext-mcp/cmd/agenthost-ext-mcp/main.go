// Command agenthost-ext-mcp is the MCP extension process: the host starts
// it and talks to it over go-plugin gRPC.
package main

import (
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

func main() { ext.Serve(extmcp.New(nil)) }
