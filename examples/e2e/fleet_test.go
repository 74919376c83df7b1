package e2e_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

type fleetLine struct {
	Extension string    `json:"extension"`
	User      string    `json:"user"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Reason    string    `json:"reason"`
	Active    bool      `json:"active"`
	Seen      time.Time `json:"seen"`
}

// fleetOf reads the fleet view from `agenthost status --json`.
func (e *env) fleetOf() (fleet []fleetLine, activeUsers int) {
	e.t.Helper()
	var st struct {
		Host struct {
			ActiveUsers int `json:"activeUsers"`
		} `json:"host"`
		Fleet []fleetLine `json:"fleet"`
	}
	if err := json.Unmarshal([]byte(e.must("", "status", "--json")), &st); err != nil {
		e.t.Fatal(err)
	}
	return st.Fleet, st.Host.ActiveUsers
}

// TestFleetViewShowsInactiveUsers: a server that exits at start is
// quarantined for alice and bob; once both went idle and were
// deactivated, the operator's fleet view (`agenthost status --json` and
// its table, /status.json, /status) still shows each one's quarantined
// server with its reason and when it was seen, marked not active; the
// log has one line for the first failure and then one line with the
// count of the repeats (bob's, and the retries), not one per user per
// retry; a user's own status never shows another's; and a restart of the
// host remembers the lines (fleet.db).
func TestFleetViewShowsInactiveUsers(t *testing.T) {
	b := build(t)
	failing := testbin.Build(t, pkg+"examples/internal/failing")
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"db": map[string]any{"command": failing, "args": []string{"fatal: cannot open database"}},
	}}, map[string]any{"services": map[string]any{"idleMinutes": 0.05}})
	e.editConfig(func(cfg map[string]any) {
		cfg["extensions"].(map[string]any)["mcp"].(map[string]any)["env"] = map[string]any{"AGENTHOST_MCP_REPEAT_WINDOW": "8s"}
	})
	e.startServe()
	const reason = "it exited with status 3 before answering: failing: starting | fatal: cannot open database"
	for _, u := range []string{"alice", "bob"} {
		eventually(t, u+"'s db is quarantined", func() bool {
			return strings.Contains(e.must("", "status", "--user", u), reason)
		})
	}
	// Both go idle (3 s) and are deactivated: the fleet view keeps them.
	var fleet []fleetLine
	eventually(t, "alice and bob are deactivated and kept in the fleet view", func() bool {
		var active int
		fleet, active = e.fleetOf()
		return active == 0 && len(fleet) == 2
	})
	for i, u := range []string{"alice", "bob"} {
		f := fleet[i]
		if f.User != u || f.Name != "db" || f.State != "quarantined" || !strings.Contains(f.Reason, reason) || f.Active || f.Seen.IsZero() {
			t.Errorf("fleet line %d = %+v; want %s's db quarantined with the reason, not active, with when it was seen", i, f, u)
		}
	}
	table := e.must("", "status")
	if !strings.Contains(table, "NOT WELL") || !regexp.MustCompile(`alice\s+mcp\s+db\s+quarantined\s+no\s`).MatchString(table) {
		t.Errorf("agenthost status does not show alice's quarantined db as not active:\n%s", table)
	}
	op := strings.TrimSpace(e.must("", "token", "create", "--operator", "--name", "ops"))
	code, body := e.api("GET", "/status.json", op, "")
	if code != 200 || !strings.Contains(body, `"user":"bob"`) || !strings.Contains(body, `"active":false`) {
		t.Errorf("/status.json: %d %s; want bob's line, not active", code, body)
	}
	code, page := e.api("GET", "/status", op, "")
	if code != 200 || !strings.Contains(page, `id="fleet"`) || !strings.Contains(page, "fatal: cannot open database") {
		t.Errorf("/status: %d; want the fleet table with the reason\n%s", code, page)
	}
	// The fleet view is the operator's: a user's token is refused, and
	// a user's own status shows no one else.
	alice := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "e2e"))
	if code, _ := e.api("GET", "/status.json", alice, ""); code != 403 {
		t.Errorf("/status.json with alice's token: %d; want 403", code)
	}
	if _, own := e.api("GET", "/api/v1/status", alice, ""); strings.Contains(own, "bob") {
		t.Errorf("alice's status names bob: %s", own)
	}

	// The log: the first failure at once, the repeats in one line with a
	// count once the window (8 s) ends.
	// Whole lines: the attributes' order is the logger's, so the server
	// and the reason are each looked for on the line wherever they are.
	first := regexp.MustCompile(`[^\n]*catalog: server quarantined"[^\n]*`)
	// The attributes' order is the logger's: each is looked for in the
	// collapsed line on its own.
	collapsedLine := regexp.MustCompile(`[^\n]*catalog: server quarantined again \(repeats collapsed\)"[^\n]*`)
	collapsed := func(logs string) bool {
		for _, l := range collapsedLine.FindAllString(logs, -1) {
			if strings.Contains(l, " server=db") && strings.Contains(l, " users=2") && regexp.MustCompile(` count=\d+`).MatchString(l) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(40 * time.Second)
	for !collapsed(e.serveOut.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no collapsed line with users=2 in the log:\n%s", e.serveOut.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	logs := e.serveOut.String()
	// Each repeating warning, ext-mcp's and the host's, has one line of
	// its own for db and each reason (its first) across both users and
	// every retry.
	reasonOf := regexp.MustCompile(`reason="((?:[^"\\]|\\.)*)"`)
	for _, w := range []struct {
		re     *regexp.Regexp
		server string
	}{
		{first, " server=db"},
		{regexp.MustCompile(`[^\n]*a stdio MCP server failed before answering"[^\n]*`), " server=db"},
		{regexp.MustCompile(`[^\n]*service process exited"[^\n]*`), " server=mcp/db"},
	} {
		re := w.re
		var lines []string
		for _, l := range re.FindAllString(logs, -1) {
			if strings.Contains(l, w.server+" ") || strings.HasSuffix(l, w.server) {
				lines = append(lines, l)
			}
		}
		seen := map[string]bool{}
		for _, l := range lines {
			r := reasonOf.FindString(l)
			if r == "" {
				t.Errorf("a line without its reason: %s", l)
			}
			if seen[r] {
				t.Errorf("two lines match %s with %s; want the first only, the repeats counted:\n%s", re, r, logs)
			}
			seen[r] = true
		}
		if len(lines) == 0 {
			t.Errorf("no line matches %s", re)
		}
	}

	// A restart of the host remembers them (fleet.db): both lines are
	// there before either user is active again, as they were seen.
	e.stopServe()
	e.startServe()
	after, active := e.fleetOf()
	if active != 0 || len(after) != 2 {
		t.Fatalf("after a restart: %d active, fleet %+v; want alice's and bob's lines kept", active, after)
	}
	for i := range after {
		if after[i].User != fleet[i].User || after[i].State != "quarantined" || after[i].Reason != fleet[i].Reason || after[i].Active || !after[i].Seen.Equal(fleet[i].Seen) {
			t.Errorf("after a restart, line %d = %+v; want %+v", i, after[i], fleet[i])
		}
	}
}
