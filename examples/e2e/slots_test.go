package e2e_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestIdleUserFreesSlotForQuarantinedOne (issue 10, item 7): with
// maxProcesses 2, users u1 and u2 hold both slots and u3's server is
// quarantined for want of one; once u1 has been idle for
// services.idleMinutes the host deactivates u1, the slot frees, and u3's
// retry gets it: u3's tools appear and work, while u2 (still active) keeps
// hers.
func TestIdleUserFreesSlotForQuarantinedOne(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"services": map[string]any{"maxProcesses": 2, "idleMinutes": 0.05, "connectWaitSeconds": 0.5}})
	e.startServe()
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		e.must("slot-"+u, "secret", "set", "--user", u, "token:notes")
	}
	for _, u := range users[:2] {
		if !hasPrefix(e.toolNames(u), "notes/") {
			t.Fatalf("%s has no notes tools", u)
		}
	}
	if hasPrefix(e.toolNames("u3"), "notes/") {
		t.Fatal("u3 got a process beyond maxProcesses")
	}
	var st struct {
		Status []struct{ User, Name, State, Reason string }
	}
	if err := json.Unmarshal([]byte(e.must("", "status", "--user", "u3", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Status) == 0 || st.Status[0].State != "quarantined" || !strings.Contains(st.Status[0].Reason, "maxProcesses") {
		t.Fatalf("u3's status %+v: want notes quarantined for want of a slot (maxProcesses)", st.Status)
	}
	// u2 and u3 stay active (their requests); u1 goes quiet.
	start := time.Now()
	eventually(t, "u3's retry gets the slot u1's deactivation freed", func() bool {
		return hasPrefix(e.toolNames("u2"), "notes/") && hasPrefix(e.toolNames("u3"), "notes/")
	})
	t.Logf("u3 got its slot %v after it was quarantined (u1 idle after 3 s)", time.Since(start).Round(100*time.Millisecond))
	if n := len(pidsWithEnv("MCP_ACCESS_TOKEN=slot-u1")); n != 0 {
		t.Errorf("u1's server still runs (%d processes) after u1 was deactivated", n)
	}
	if out := e.must("", "call", "--user", "u3", "notes/add_note", `{"text":"got a slot"}`); strings.Contains(out, `"isError":true`) {
		t.Errorf("u3's call failed: %s", out)
	}
}
