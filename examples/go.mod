module github.com/agenthost/agenthost/examples

go 1.26.0
