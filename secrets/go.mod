module github.com/agenthost/agenthost/secrets

go 1.26.0
