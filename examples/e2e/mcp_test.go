package e2e_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMCPExtensionEndToEnd runs the host binary with the ext-mcp binary and
// the example servers, and drives it only through the CLI talking to the
// running host: per-user catalogs, toggles, opt-in, credentials, drain and
// status.
func TestMCPExtensionEndToEnd(t *testing.T) {
	b := build(t)
	port := freePort(t)
	bearer := exec.Command(b.bearer, "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-reveal-token")
	if err := bearer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bearer.Process.Signal(syscall.SIGTERM)
		_ = bearer.Wait()
	})
	notes := func(extra map[string]any) map[string]any {
		s := map[string]any{"command": b.notes, "args": []string{"-reveal-token"}}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	e := newEnv(t, b, map[string]any{
		"mcpServers": map[string]any{
			// A configured token is never a fallback for a user who has none.
			"s1":  notes(map[string]any{"env": map[string]string{"MCP_ACCESS_TOKEN": "configured-canary"}}),
			"s2":  notes(nil),
			"opt": notes(map[string]any{"availability": "opt-in"}),
			"web": map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/mcp", port),
				"headers": map[string]string{"AUTHORIZATION": "Bearer configured-canary"}},
		},
	})
	e.startServe()

	// Each user's tokens, stored through the running host (stdin, never argv).
	for _, u := range []string{"alice", "bob"} {
		for _, s := range []string{"s1", "s2", "web"} {
			if u == "bob" && s == "web" {
				continue // bob has no token for web: his requests go unauthenticated
			}
			e.must(fmt.Sprintf("%s-%s-canary\n", u, s), "secret", "set", "--user", u, "token:"+s)
		}
	}

	alice := e.toolNames("alice")
	for _, p := range []string{"s1/", "s2/", "web/"} {
		if !hasPrefix(alice, p) {
			t.Errorf("alice's tools lack %s*: %v", p, alice)
		}
	}
	if hasPrefix(alice, "opt/") {
		t.Errorf("an opt-in server is listed before alice switched it on: %v", alice)
	}
	if !slices.Contains(alice, "s1/add_note") || !slices.Contains(alice, "web/whoami") {
		t.Errorf("tools are not named server/tool: %v", alice)
	}

	// Credentials: each server sees only its own user's token.
	whoami := func(user, server string) string {
		out, errOut, code := e.run("", "call", "--user", user, server+"/whoami", "{}")
		if code != 0 {
			return "error: " + errOut + out
		}
		return out
	}
	for _, u := range []string{"alice", "bob"} {
		for _, s := range []string{"s1", "s2"} {
			got := whoami(u, s)
			if !strings.Contains(got, u+"-"+s+"-canary") || strings.Contains(got, "configured-canary") {
				t.Errorf("%s/whoami for %s = %s; want only %s's token", s, u, got, u)
			}
			other := map[string]string{"alice": "bob", "bob": "alice"}[u]
			if strings.Contains(got, other+"-") {
				t.Errorf("%s's server saw %s's token", u, other)
			}
		}
	}
	if got := whoami("alice", "web"); !strings.Contains(got, "alice-web-canary") || strings.Contains(got, "configured-canary") {
		t.Errorf("web/whoami for alice = %s", got)
	}
	// bob has no web token: the bearer server refuses him, so web waits
	// for him to sign in (or store a token), for bob alone, with the reason
	// in his status.
	// He lists none of its tools, only its sign-in entry.
	bob := e.toolNames("bob")
	if slices.ContainsFunc(bob, func(n string) bool { return strings.HasPrefix(n, "web/") && n != "web/sign_in" }) ||
		!slices.Contains(bob, "web/sign_in") {
		t.Errorf("bob, without a token, lists web tools, or not web's sign-in entry: %v", bob)
	}
	var st struct {
		Status []struct{ User, Name, State, Reason string }
	}
	if err := json.Unmarshal([]byte(e.must("", "status", "--user", "bob", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range st.Status {
		if s.User != "bob" {
			t.Errorf("bob's status shows %s's line", s.User)
		}
		if s.Name == "web" {
			found = true
			if s.State != "needs sign-in" || !strings.Contains(s.Reason, "token:web") || strings.Contains(s.Reason, "canary") {
				t.Errorf("bob's web status = %+v; want needs sign-in naming token:web, and no token", s)
			}
		}
	}
	if !found {
		t.Errorf("bob's status has no line for web: %+v", st.Status)
	}

	// Switching s2 off removes its tools for alice only.
	e.must("", "settings", "set", "--user", "alice", "servers", `{"s2":false}`)
	eventually(t, "s2 leaves alice's tools", func() bool { return !hasPrefix(e.toolNames("alice"), "s2/") })
	if !hasPrefix(e.toolNames("bob"), "s2/") {
		t.Error("switching s2 off for alice removed it for bob")
	}
	// An opt-in server appears only once switched on.
	e.must("", "settings", "set", "--user", "alice", "servers", `{"s2":false,"opt":true}`)
	eventually(t, "opt joins alice's tools", func() bool { return hasPrefix(e.toolNames("alice"), "opt/") })
	if hasPrefix(e.toolNames("bob"), "opt/") {
		t.Error("bob sees alice's opt-in server")
	}
	// A toggle that is not a boolean is an error for that server alone.
	_, errOut, code := e.run("", "settings", "set", "--user", "alice", "servers", `{"s1":"yes"}`)
	if code != 1 || !strings.Contains(errOut, "s1") {
		t.Errorf("a non-boolean toggle: exit %d, %q; want a refusal naming s1", code, errOut)
	}

	// Drain: a slow call in flight while s1 is switched off completes with
	// its real result; a call after the switch gets the disabled error; the
	// server process closes only after the slow call returns.
	procs := func() []int { return pidsWithEnv("MCP_ACCESS_TOKEN=alice-s1-canary") }
	if len(procs()) != 1 {
		t.Fatalf("alice's s1 processes = %v, want one", procs())
	}
	var (
		wg       sync.WaitGroup
		slowOut  string
		slowCode int
	)
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		slowOut, _, slowCode = e.run("", "call", "--user", "alice", "s1/slow", `{"duration":"4s"}`)
	}()
	time.Sleep(1 * time.Second)
	e.must("", "settings", "set", "--user", "alice", "servers", `{"s1":false,"s2":false,"opt":true}`)
	out, errOut, code := e.run("", "call", "--user", "alice", "s1/echo", `{"text":"x"}`)
	if code == 0 || !strings.Contains(out+errOut, `MCP server "s1" is disabled`) {
		t.Errorf("a call after switching s1 off: exit %d\n%s%s\nwant the disabled error", code, out, errOut)
	}
	if len(procs()) != 1 {
		t.Errorf("alice's s1 process closed while a call was still running")
	}
	wg.Wait()
	if slowCode != 0 || !strings.Contains(slowOut, "slept 4s") {
		t.Errorf("the slow call in flight: exit %d %s; want its real result", slowCode, slowOut)
	}
	if time.Since(start) < 4*time.Second {
		t.Errorf("the slow call returned early")
	}
	eventually(t, "alice's s1 process exits after the drain", func() bool { return len(procs()) == 0 })
	if len(pidsWithEnv("MCP_ACCESS_TOKEN=bob-s1-canary")) != 1 {
		t.Error("bob's s1 process was affected by alice's switch")
	}
}
