package examples_test

import (
	"encoding/json"
	"os"
	"testing"

	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// TestDemoConfigCatalog: the demo config (make run) is a valid ext-mcp
// block with its worked catalog entry.
func TestDemoConfigCatalog(t *testing.T) {
	raw, err := os.ReadFile("agenthost.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Extensions map[string]struct {
			Config json.RawMessage `json:"config"`
		} `json:"extensions"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	cfg, err := extmcp.ParseConfig(file.Extensions["mcp"].Config)
	if err != nil {
		t.Fatalf("the demo config's mcp block: %v", err)
	}
	if e, ok := cfg.Catalog["bearer"]; !ok || e.Remote == nil || len(e.Inputs) != 2 {
		t.Errorf("the demo catalog: %+v", cfg.Catalog)
	}
}
