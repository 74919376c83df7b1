module github.com/agenthost/agenthost/catalog

go 1.26.0
