module github.com/agenthost/agenthost/settings

go 1.26.0
