module github.com/agenthost/agenthost/host

go 1.26.0
