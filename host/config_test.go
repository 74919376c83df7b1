package host_test

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/host"
)

// TestMCPConfig: the MCP endpoint's session bounds parse, and bad ones are
// refused naming the field.
func TestMCPConfig(t *testing.T) {
	cfg, err := host.ParseConfig([]byte(`{"extensions":{},"mcp":{"sessionIdleMinutes":5,"maxSessionsPerUser":8,"maxSessions":100}}`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MCP != (host.MCPConfig{SessionIdleMinutes: 5, MaxSessionsPerUser: 8, MaxSessions: 100}) {
		t.Errorf("parsed %+v", cfg.MCP)
	}
	for raw, want := range map[string]string{
		`{"sessionIdleMinutes":-1}`:                  "mcp.sessionIdleMinutes: must not be negative",
		`{"maxSessionsPerUser":-2}`:                  "mcp.maxSessionsPerUser: must not be negative",
		`{"maxSessions":-3}`:                         "mcp.maxSessions: must not be negative",
		`{"maxSessionsPerUser":50,"maxSessions":10}`: "mcp.maxSessionsPerUser: 50 is more than mcp.maxSessions (10)",
		`{"sessionIdle":5}`:                          "sessionIdle",
		`{"maxSessions":"many"}`:                     "maxSessions",
	} {
		_, err := host.ParseConfig([]byte(`{"extensions":{},"mcp":`+raw+`}`), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mcp %s: %v, want an error naming %q", raw, err, want)
		}
	}
}
