package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNoSelfLoop runs the host binary with the real ext-mcp and gives a
// user, as servers of her own, the host's own /mcp (by address and by
// name) with her own agenthost token: were they connected, every refresh
// would add the host's tools to themselves again (one user's list grew to
// 2,978 tools). Loopback is refused to users' servers by default, and
// where the operator allows it the host's own address still is: either
// way both are quarantined, saying it is the host's own address, and her
// tool list stays the operator's notes server's, refresh after refresh.
func TestNoSelfLoop(t *testing.T) {
	b := build(t)
	loopback := []string{"127.0.0.1/32", "::1/128"}
	for name, allow := range map[string][]string{"default": nil, "loopback allowed": loopback} {
		t.Run(name, func(t *testing.T) { noSelfLoop(t, b, allow, false) })
	}
	// listen 127.0.0.1:0: the extensions are told the port bound, not
	// port 0 (which denied nothing, so loopback allowed reached the host).
	t.Run("port 0, loopback allowed", func(t *testing.T) { noSelfLoop(t, b, loopback, true) })
}

func noSelfLoop(t *testing.T, b bins, allow []string, port0 bool) {
	port := 0
	if !port0 {
		port = freePort(t)
	}
	cfg := map[string]any{
		"userServers": "url",
		"mcpServers": map[string]any{
			"notes": map[string]any{"command": b.notes},
		},
	}
	if allow != nil {
		cfg["userServerAllowCIDRs"] = allow
	}
	e := newEnv(t, b, cfg, map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", port)})
	e.startServe()
	if port0 {
		u, err := url.Parse(e.url)
		if err != nil || u.Port() == "" || u.Port() == "0" {
			t.Fatalf("the host's URL %q names no port bound", e.url)
		}
		port, _ = strconv.Atoi(u.Port())
	}
	notes := e.toolNames("alice")
	if !hasPrefix(notes, "notes/") {
		t.Fatalf("alice's tools before: %v", notes)
	}
	tok := strings.TrimSpace(e.must("", "token", "create", "--user", "alice", "--name", "loop"))
	for _, s := range []string{"u_self", "u_selfname"} {
		e.must(tok+"\n", "secret", "set", "--user", "alice", "--ext", "mcp", "token:"+s)
	}
	list, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
		"self":     map[string]string{"url": e.url + "/mcp"},
		"selfname": map[string]string{"url": fmt.Sprintf("http://localhost:%d/mcp", port)},
	}})
	values, _ := json.Marshal(map[string]string{"servers": string(list)})
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "user-servers", string(values))

	status := func() map[string]struct{ State, Reason string } {
		var st struct {
			Status []struct{ Name, State, Reason string }
		}
		if err := json.Unmarshal([]byte(e.must("", "status", "--user", "alice", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		out := map[string]struct{ State, Reason string }{}
		for _, s := range st.Status {
			out[s.Name] = struct{ State, Reason string }{s.State, s.Reason}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for st := status(); st["u_self"].State != "quarantined" || st["u_selfname"].State != "quarantined"; st = status() {
		if time.Now().After(deadline) {
			got := e.toolNames("alice")
			t.Fatalf("alice's servers at the host's own /mcp are not quarantined: %+v; she has %d tools (%d before)", st, len(got), len(notes))
		}
		time.Sleep(100 * time.Millisecond)
	}
	own := fmt.Sprintf("127.0.0.1:%d is the host's own address: refused (a server there would be agenthost calling itself in a loop)", port)
	for name, s := range status() {
		if strings.HasPrefix(name, "u_") && !strings.Contains(s.Reason, name+": "+own) {
			t.Errorf("%s: %+v; want the reason %q", name, s, own)
		}
		if strings.Contains(s.Reason, tok) {
			t.Errorf("%s's reason shows alice's token", name)
		}
	}
	// Refresh after refresh (each settings write is one), the list stays.
	for i := range 3 {
		e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "servers", fmt.Sprintf(`{"notes": %v}`, true))
		got := e.toolNames("alice")
		if len(got) != len(notes) || hasPrefix(got, "u_") {
			t.Fatalf("refresh %d: alice's tools %v; want only %v", i, got, notes)
		}
	}
}
