module github.com/agenthost/agenthost/ext-mcp

go 1.26.0
