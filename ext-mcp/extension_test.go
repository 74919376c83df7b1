package extmcp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// TestConformance runs ext's conformance suite on both carriers, with a
// real stdio server behind the extension.
func TestConformance(t *testing.T) {
	needBins(t)
	exttest.Run(t, func() ext.Extension { return extmcp.New(&extmcp.Options{Logger: newLogger(&logBuffer{})}) },
		&exttest.RunOptions{Config: json.RawMessage(fmt.Sprintf(`{"mcpServers": {"notes": %s}}`, notesServer("")))})
}

// TestTogglesAndUsers checks the active set through real stdio servers:
// a user with two servers sees both; switching one off removes its tools;
// an opt-in server appears only once switched on; another user is
// independent.
func TestTogglesAndUsers(t *testing.T) {
	needBins(t)
	for _, carrier := range []string{"inprocess", "grpc-fd"} {
		t.Run(carrier, func(t *testing.T) {
			t.Parallel()
			cfg := fmt.Sprintf(`{"mcpServers": {"s1": %s, "s2": %s, "s3": %s}}`,
				notesServer(""), notesServer(""), notesServer(`"availability": "opt-in"`))
			f := newFixture(t, carrier, cfg, nil)
			f.activate("alice")
			f.activate("bob")
			names := f.names("alice")
			if !hasPrefix(names, "s1/") || !hasPrefix(names, "s2/") || hasPrefix(names, "s3/") {
				t.Fatalf("alice's tools: %q; want s1/* and s2/*, no opt-in s3/*", names)
			}
			if !slices.Contains(names, "s1/add_note") || !slices.Contains(names, "s2/echo") {
				t.Errorf("alice's tools: %q", names)
			}
			f.mustCall("alice", "s1/add_note", `{"text":"milk"}`)
			if got := f.mustCall("alice", "s1/list_notes", `{}`); !strings.Contains(string(got.StructuredContent), "milk") {
				t.Errorf("alice's notes: %s", got.StructuredContent)
			}

			f.setToggles("alice", `{"s2": false, "s3": true}`)
			f.activate("alice")
			names = f.names("alice")
			if !hasPrefix(names, "s1/") || hasPrefix(names, "s2/") || !hasPrefix(names, "s3/") {
				t.Errorf("after switching s2 off and s3 on: %q", names)
			}
			if res, err := f.call("alice", "s2/echo", `{"text":"x"}`); err != nil || res.Text() != `MCP server "s2" is disabled` {
				t.Errorf("call to the switched-off server: %v %q", err, res.Text())
			}
			// Bob is untouched.
			names = f.names("bob")
			if !hasPrefix(names, "s1/") || !hasPrefix(names, "s2/") || hasPrefix(names, "s3/") {
				t.Errorf("bob's tools changed with alice's switches: %q", names)
			}
			if got := f.mustCall("bob", "s1/list_notes", `{}`); strings.Contains(string(got.StructuredContent), "milk") {
				t.Errorf("bob sees alice's notes: %s", got.StructuredContent)
			}
			if got := f.mustCall("bob", "s2/echo", `{"text":"hi"}`); got.Text() != "hi" {
				t.Errorf("bob's echo: %q", got.Text())
			}
		})
	}
}

// TestDrain checks that a slow call on a server being switched off
// finishes with its real result while new calls get the disabled result.
func TestDrain(t *testing.T) {
	needBins(t)
	t.Parallel()
	f := newFixture(t, "grpc-fd", fmt.Sprintf(`{"mcpServers": {"notes": %s}}`, notesServer("")), nil)
	f.activate("alice")
	type out struct {
		res *ext.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := f.call("alice", "notes/slow", `{"duration":"1500ms"}`)
		done <- out{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // the call is running
	f.setToggles("alice", `{"notes": false}`)
	f.activate("alice")
	if names := f.names("alice"); len(names) != 0 {
		t.Errorf("tools after switching off: %q", names)
	}
	if st := f.statusOf("alice", "notes"); st.State != "retiring" {
		t.Errorf("status while draining: %+v", st)
	}
	if res, err := f.call("alice", "notes/echo", `{"text":"x"}`); err != nil || res.Text() != `MCP server "notes" is disabled` {
		t.Errorf("new call while draining: %v %q", err, res.Text())
	}
	o := <-done
	if o.err != nil || o.res.IsError || o.res.Text() != "slept 1.5s" {
		t.Fatalf("the running call: %v %q; want its real result", o.err, o.res.Text())
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.h.ServicesRunning() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the drained server's process was not stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQuarantine checks that each way a server fails to start quarantines
// it for that user alone with a readable reason, while the others work,
// and that a recovered server is picked up by a retry.
func TestQuarantine(t *testing.T) {
	needBins(t)
	t.Parallel()
	flag := t.TempDir() + "/broken"
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A command missing at load is refused then (TestCommandCheck); one
	// removed after load fails when it starts.
	gone := t.TempDir() + "/agenthost-gone-server"
	if err := os.WriteFile(gone, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"mcpServers": {
		"ok": %s,
		"missing": {"command": %q},
		"crash": %s,
		"hang": %s,
		"garbage": %s,
		"noexec": %s,
		"flaky": %s}}`,
		notesServer(""), gone, selfServer("crash", ""), selfServer("hang", ""), selfServer("garbage", ""), selfServer("noexec", ""),
		selfServerEnv("flaky", map[string]string{"FLAKY_FILE": flag}, ""))
	f := newFixture(t, "inprocess", cfg, &extmcp.Options{Catalog: &catalog.Options{
		ConnectTimeout: 2 * time.Second, Backoff: catalog.Backoff{Min: 300 * time.Millisecond, Max: 600 * time.Millisecond}}})
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f.activate("alice")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("activation took %v", d)
	}
	names := f.names("alice")
	if !hasPrefix(names, "ok/") || len(names) != 8 { // the notes server's tools
		t.Errorf("alice's tools: %q; want only ok/*", names)
	}
	f.mustCall("alice", "ok/echo", `{"text":"fine"}`)
	for server, want := range map[string]string{
		"missing": "the command could not start: fork/exec " + gone + ": no such file or directory",
		"crash":   "it exited with status 3 before answering: crash: giving up",
		"hang":    "timed out after 2s",
		"garbage": "it answered something that is not MCP: Welcome to my server v1.2 (this banner breaks the protocol)",
		"flaky":   "it exited with status 4 before answering",
		"noexec":  "the command could not start: /nonexistent/server: No such file or directory",
	} {
		st := f.statusOf("alice", server)
		if st.State != "quarantined" || !strings.Contains(st.Reason, want) {
			t.Errorf("%s: status %+v; want quarantined with %q", server, st, want)
		}
		if res, err := f.call("alice", server+"/x", `{}`); err != nil || !res.IsError || !strings.Contains(res.Text(), "unavailable") {
			t.Errorf("%s: call %v %q; want the unavailable result", server, err, res.Text())
		}
	}
	// The server recovers: a retry picks it up.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	f.waitTools("alice", func(n []string) bool { return hasPrefix(n, "flaky/") })
	if got := f.mustCall("alice", "flaky/a", `{}`); got.Text() != "a" {
		t.Errorf("flaky/a after recovery: %q", got.Text())
	}
	if st := f.statusOf("alice", "flaky"); st.State != "connected" {
		t.Errorf("flaky after recovery: %+v", st)
	}
}

// TestListChanged checks that a server's tools/list_changed updates the
// published tools without a reconnect.
func TestListChanged(t *testing.T) {
	t.Parallel()
	for _, carrier := range []string{"inprocess", "grpc"} {
		t.Run(carrier, func(t *testing.T) {
			t.Parallel()
			for _, pv := range []string{"", "latest"} {
				extra := ""
				if pv != "" {
					extra = fmt.Sprintf(`"protocolVersion": %q`, pv)
				}
				f := newFixture(t, carrier, fmt.Sprintf(`{"mcpServers": {"dyn": %s}}`, selfServer("dynamic", extra)), nil)
				f.activate("alice")
				started := f.h.ServicesStarted()
				if slices.Contains(f.names("alice"), "dyn/b") {
					t.Fatal("dyn/b before it was added")
				}
				f.mustCall("alice", "dyn/grow", `{}`)
				f.waitTools("alice", func(n []string) bool { return slices.Contains(n, "dyn/b") })
				if got := f.mustCall("alice", "dyn/b", `{}`); got.Text() != "b" {
					t.Errorf("dyn/b: %q", got.Text())
				}
				if n := f.h.ServicesStarted(); n != started {
					t.Errorf("protocol %q: list_changed started %d more processes; want none", pv, n-started)
				}
			}
		})
	}
}

// TestResultMapping checks that every kind of content, structured content
// and isError come through faithfully, and that a protocol error is an
// error result naming the server.
func TestResultMapping(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "grpc", fmt.Sprintf(`{"mcpServers": {"dyn": %s}}`, selfServer("dynamic", "")), nil)
	f.activate("alice")
	res, err := f.call("alice", "dyn/kinds", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"text","text":"hello"},` +
		`{"type":"image","mimeType":"image/png","data":"AQID"},` +
		`{"type":"audio","mimeType":"audio/wav","data":"BAU="},` +
		`{"type":"resource_link","mimeType":"text/plain","uri":"file:///x.txt","name":"x"},` +
		`{"type":"resource","resource":{"uri":"file:///y.txt","mimeType":"text/plain","text":"why"}}]`
	if got := string(res.Content); got != want {
		t.Errorf("content:\n got %s\nwant %s", got, want)
	}
	if got := string(res.StructuredContent); got != `{"n":1,"s":"two"}` {
		t.Errorf("structured content: %s", got)
	}
	if !res.IsError {
		t.Error("isError lost")
	}
	// vanish removes itself: calling it again, before the re-list lands, is
	// a protocol error from the server (-32602 unknown tool) or, after it
	// lands, an unknown tool here.
	f.mustCall("alice", "dyn/vanish", `{}`)
	res, err = f.call("alice", "dyn/vanish", `{}`)
	switch {
	case errors.Is(err, ext.ErrNotFound):
	case err == nil && res.IsError && strings.Contains(res.Text(), `MCP server "dyn"`):
	default:
		t.Errorf("calling a tool the server dropped: %v %+v", err, res)
	}
}

func TestUnidentifiedAndOperatorCallers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "grpc", `{}`, nil)
	for _, user := range []string{"", extmcp.OperatorUser} {
		if _, err := f.call(user, "x/y", `{}`); !errors.Is(err, ext.ErrPermission) {
			t.Errorf("call as %q: %v; want ErrPermission", user, err)
		}
		if err := f.e.(ext.UserLifecycle).Activate(ctx(t), user); !errors.Is(err, ext.ErrPermission) {
			t.Errorf("Activate(%q): %v; want ErrPermission", user, err)
		}
		if _, err := f.e.(ext.ServiceProvider).StartService(ctx(t), "x", user); !errors.Is(err, ext.ErrPermission) {
			t.Errorf("StartService as %q: %v; want ErrPermission", user, err)
		}
	}
	if _, err := f.call("", "x/y", `{}`); err == nil || !strings.Contains(err.Error(), "caller not identified") {
		t.Errorf("the refusal must say the caller is not identified: %v", err)
	}
}

// TestConfigureRefusesBadConfig checks that an invalid config refuses the
// extension with an error naming the field, on both carriers.
func TestConfigureRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, carrier := range []string{"inprocess", "grpc"} {
		x := extmcp.New(&extmcp.Options{Logger: newLogger(&logBuffer{})})
		var e ext.Extension = x
		if carrier == "grpc" {
			e = exttest.Connect(t, x, nil)
		}
		err := e.Configure(ctx(t), &ext.ConfigureRequest{Name: "mcp", Host: exttest.NewFakeHost(t),
			Config: json.RawMessage(`{"mcpServers": {"a": {"comand": "x"}}}`)})
		if !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), `mcpServers.a.comand: unknown field (did you mean "command"?)`) {
			t.Errorf("%s: Configure with a typo: %v", carrier, err)
		}
		_ = e.Shutdown(ctx(t))
	}
}

// TestCallTimeout checks the per-call timeout from the config: a call that
// outlives it is an error result naming the server and the timeout, and
// the connection stays usable.
func TestCallTimeout(t *testing.T) {
	needBins(t)
	t.Parallel()
	f := newFixture(t, "grpc-fd", fmt.Sprintf(`{"mcpServers": {"notes": %s}}`, notesServer(`"timeout": 0.3`)), nil)
	f.activate("alice")
	start := time.Now()
	res, err := f.call("alice", "notes/slow", `{"duration":"5s"}`)
	if err != nil || !res.IsError || !strings.Contains(res.Text(), `"notes"`) || !strings.Contains(res.Text(), "300ms") {
		t.Errorf("slow call: %v %q; want an error result naming the server and 300ms", err, res.Text())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	f.mustCall("alice", "notes/echo", `{"text":"still here"}`)
}

// TestServerDiesAfterAnswering: a stdio server that worked and then exits
// shows why in its status: its status and its last stderr lines.
func TestServerDiesAfterAnswering(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"dyn": %s}}`, selfServer("dynamic", "")), &extmcp.Options{
		Catalog: &catalog.Options{Backoff: catalog.Backoff{Min: time.Minute, Max: time.Minute}}})
	f.activate("alice")
	if res, err := f.call("alice", "dyn/die", `{}`); err == nil && !res.IsError {
		t.Errorf("a call whose server died: %q", res.Text())
	}
	want := "the connection ended: it exited with status 5: fatal: lost the database"
	deadline := time.Now().Add(20 * time.Second)
	for st := f.statusOf("alice", "dyn"); !strings.Contains(st.Reason, want); st = f.statusOf("alice", "dyn") {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v; want %q", st, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
