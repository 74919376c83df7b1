package extmcp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
)

// TestPinConfig: the top-level pin is the default of every server without
// its own; a server's own wins; the operator approves its servers'
// changes, a user their own (a tool without a pin carries neither); a bad
// mode is refused naming the field.
func TestPinConfig(t *testing.T) {
	cfg, err := ParseConfig(json.RawMessage(`{"pin":"warn","mcpServers":{
		"a":{"command":"x"},
		"b":{"command":"x","pin":"block"},
		"c":{"command":"x","pin":"off"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ext.PinMode{"a": ext.PinWarn, "b": ext.PinBlock, "c": ""}
	cfg.each(func(name string, s Server) {
		d := decl(name, cfg.withDefaults(s), false)
		if d.Pin != want[name] || d.PinByOperator != (want[name] != "") {
			t.Errorf("server %s: pin %q by operator %v, want %q by operator", name, d.Pin, d.PinByOperator, want[name])
		}
	})
	x := &Extension{}
	parse := x.parseOwn(nil, ext.PinBlock)
	decls, err := parse(json.RawMessage(`{"mcpServers":{"mine":{"url":"https://example.com/mcp"},"other":{"url":"https://example.com/mcp","pin":"warn"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range decls {
		wantPin := map[string]ext.PinMode{"mine": ext.PinBlock, "other": ext.PinWarn}[d.Name]
		if d.Pin != wantPin || d.PinByOperator {
			t.Errorf("own server %s: pin %q by operator %v, want %q by the user", d.Name, d.Pin, d.PinByOperator, wantPin)
		}
	}
	_, err = ParseConfig(json.RawMessage(`{"pin":"strict","mcpServers":{"a":{"command":"x","pin":1}}}`))
	if err == nil || !strings.Contains(err.Error(), `pin: "strict" is not one of off, warn, block`) || !strings.Contains(err.Error(), "mcpServers.a.pin") {
		t.Errorf("bad pins: %v", err)
	}
}
