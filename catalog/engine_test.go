package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// TestPublishedTools checks the naming, defaults and exposure rules of the
// published tool list.
func TestPublishedTools(t *testing.T) {
	r := newRig(t, nil)
	s1 := r.conn.add("s1", newServer("echo", "slow"))
	s1.set(func(s *fakeServer) {
		s.tools = append(s.tools,
			catalog.ToolInfo{Name: "bare"}, // no description, no schema
			catalog.ToolInfo{Name: "nullschema", Description: "  ", InputSchema: json.RawMessage("null")},
			catalog.ToolInfo{Name: "secret_admin", Description: "hidden by a glob"},
			catalog.ToolInfo{Name: "a/b", Title: "T", Description: "slash in a tool name",
				OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: json.RawMessage(`{"readOnlyHint":true}`)},
			catalog.ToolInfo{Name: "echo", Description: "a duplicate is ignored"},
			catalog.ToolInfo{Name: ""},
		)
	})
	r.conn.add("s2", newServer("echo"))
	d1 := decl("s1")
	d1.Tools = catalog.ToolPolicy{"slow": ext.ExposureDeferred, "secret_*": catalog.Hidden, "a/*": ext.ExposureCodemode}
	r.plan.set("alice", decl("s2"), d1)
	mustActivate(t, r.e, "alice")

	obj := json.RawMessage(`{"type":"object","properties":{}}`)
	want := []ext.Tool{
		{Name: "s1/echo", Description: "the echo tool", InputSchema: obj, Exposure: ext.ExposureDirect},
		{Name: "s1/slow", Description: "the slow tool", InputSchema: obj, Exposure: ext.ExposureDeferred},
		{Name: "s1/bare", Description: "MCP tool bare on server s1.", InputSchema: json.RawMessage(`{"type":"object"}`), Exposure: ext.ExposureDirect},
		{Name: "s1/nullschema", Description: "MCP tool nullschema on server s1.", InputSchema: json.RawMessage(`{"type":"object"}`), Exposure: ext.ExposureDirect},
		{Name: "s1/a/b", Title: "T", Description: "slash in a tool name", InputSchema: json.RawMessage(`{"type":"object"}`),
			OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: json.RawMessage(`{"readOnlyHint":true}`), Exposure: ext.ExposureCodemode},
		{Name: "s2/echo", Description: "the echo tool", InputSchema: obj, Exposure: ext.ExposureDirect},
	}
	if diff := cmp.Diff(want, r.pub.tools("alice")); diff != "" {
		t.Errorf("published tools (-want +got):\n%s", diff)
	}
	if n := r.pub.publishes("alice"); n != 1 {
		t.Errorf("published %d times; want the whole list in one call", n)
	}

	// Routing: split at the first "/", through the lookup table.
	res, err := call(t, r.e, "alice", "s1/a/b")
	if err != nil || res.IsError || res.Text() != "alice@s1:a/b" {
		t.Errorf("calling s1/a/b: %v, %+v", err, res)
	}
	if string(res.StructuredContent) != `{"x":1}` {
		t.Errorf("arguments not passed raw: %s", res.StructuredContent)
	}
	for _, name := range []string{"s1/secret_admin", "s1/nope", "s3/echo", "echo", "s1/", "/echo", ""} {
		if _, err := call(t, r.e, "alice", name); !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("calling %q: %v; want ErrNotFound", name, err)
		}
	}
	if _, err := call(t, r.e, "bob", "s1/echo"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("a user who was never activated: %v; want ErrNotFound", err)
	}
}

// TestUnidentifiedCaller checks that an empty user is refused before the
// engine plans, connects or calls anything.
func TestUnidentifiedCaller(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("echo"))
	r.plan.set("", decl("s"))
	_, err := call(t, r.e, "", "s/echo")
	if !errors.Is(err, ext.ErrPermission) || !strings.Contains(err.Error(), "caller not identified") {
		t.Errorf("call without a user: %v; want ErrPermission, caller not identified", err)
	}
	if err := r.e.Activate(context.Background(), ""); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("Activate without a user: %v; want ErrInvalidArgument", err)
	}
	r.plan.mu.Lock()
	plans := r.plan.calls[""]
	r.plan.mu.Unlock()
	if c, _ := s.counts(); c != 0 || plans != 0 {
		t.Errorf("connects %d, plans %d; want nothing done for an unidentified caller", c, plans)
	}
}

// TestRefreshKeepsRetiresConnects checks that a refresh keeps connections
// still wanted, retires the rest and connects new ones; a fingerprint
// change reconnects.
func TestRefreshKeepsRetiresConnects(t *testing.T) {
	r := newRig(t, nil)
	s1 := r.conn.add("s1", newServer("a"))
	s2 := r.conn.add("s2", newServer("b"))
	s3 := r.conn.add("s3", newServer("c"))
	r.plan.set("u", decl("s1"), decl("s2"))
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u", "s1/a", "s2/b")
	first := s1.last()

	r.plan.set("u", decl("s1"), decl("s3"))
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u", "s1/a", "s3/c")
	if c, _ := s1.counts(); c != 1 || s1.last() != first || first.isClosed() {
		t.Errorf("s1 was reconnected (%d connects); want the connection kept", c)
	}
	waitClosed(t, s2.last())
	if c, _ := s3.counts(); c != 1 {
		t.Errorf("s3 connects = %d, want 1", c)
	}
	if res, err := call(t, r.e, "u", "s2/b"); err != nil || !res.IsError || res.Text() != `MCP server "s2" is disabled` {
		t.Errorf("call to a retired server: %v, %q; want the disabled result", err, res.Text())
	}

	changed := decl("s1")
	changed.Fingerprint = "v2"
	r.plan.set("u", changed, decl("s3"))
	mustActivate(t, r.e, "u")
	waitClosed(t, first)
	if c, _ := s1.counts(); c != 2 {
		t.Errorf("after a fingerprint change: %d connects; want a new connection", c)
	}
	if res, err := call(t, r.e, "u", "s1/a"); err != nil || res.IsError {
		t.Errorf("call on the new connection: %v %+v", err, res)
	}
}

// TestTimeoutAndPolicyChangeWithoutReconnect checks that a new timeout or
// tool policy applies to a kept connection.
func TestTimeoutAndPolicyChangeWithoutReconnect(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("a", "b"))
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	d := decl("s")
	d.Tools = catalog.ToolPolicy{"b": catalog.Hidden}
	r.plan.set("u", d)
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u", "s/a")
	if c, _ := s.counts(); c != 1 {
		t.Errorf("a policy change reconnected (%d connects)", c)
	}
	if _, err := call(t, r.e, "u", "s/b"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("hidden tool called: %v; want ErrNotFound", err)
	}
}

// TestCallTimeout checks that a call outliving the server's timeout is an
// error result naming the server and the timeout, and that the connection
// stays usable.
func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{DefaultCallTimeout: time.Hour})
		r.conn.add("s", newServer("slow", "echo"))
		d := decl("s")
		d.Timeout = 250 * time.Millisecond
		r.plan.set("u", d)
		mustActivate(t, r.e, "u")
		start := time.Now()
		res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "u", Name: "s/slow"})
		if err != nil || !res.IsError || !strings.Contains(res.Text(), `"s"`) || !strings.Contains(res.Text(), "250ms") {
			t.Fatalf("slow call: %v, %q; want an error result naming the server and 250ms", err, res.Text())
		}
		if d := time.Since(start); d != 250*time.Millisecond {
			t.Errorf("timed out after %v, want 250ms", d)
		}
		if res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "u", Name: "s/echo"}); err != nil || res.IsError {
			t.Errorf("the connection is unusable after a timeout: %v %+v", err, res)
		}
		// The caller giving up is a Go error, not a result.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := r.e.Call(ctx, &ext.CallToolRequest{User: "u", Name: "s/slow"}); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v; want context.Canceled", err)
		}
	})
}

// TestProgressExtendsTheTimeout checks that the server's timeout is an idle
// limit that progress restarts, that progress reaches the caller's
// session, and that MaxDuration bounds a call however much it reports.
func TestProgressExtendsTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{DefaultCallTimeout: time.Hour})
		r.conn.add("s", newServer("ticks"))
		d := decl("s")
		d.Timeout = 250 * time.Millisecond // shorter than the call, longer than a tick
		r.plan.set("u", d)
		mustActivate(t, r.e, "u")
		sess := &exttest.Session{}
		start := time.Now()
		res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "u", Name: "s/ticks", Session: sess})
		if err != nil || res.IsError || res.Text() != "ticked" {
			t.Fatalf("a call that reports progress: %v, %q; want it to run past the idle limit", err, res.Text())
		}
		if got := time.Since(start); got != time.Second {
			t.Errorf("took %v, want 1s", got)
		}
		if n := len(sess.Notes()); n != 10 {
			t.Errorf("the session got %d progress notifications, want 10", n)
		}
		d.MaxDuration = 450 * time.Millisecond
		r.plan.set("u", d)
		mustActivate(t, r.e, "u")
		start = time.Now()
		res, err = r.e.Call(context.Background(), &ext.CallToolRequest{User: "u", Name: "s/ticks"})
		if err != nil || !res.IsError || !strings.Contains(res.Text(), "450ms") {
			t.Fatalf("a call past MaxDuration: %v, %q; want an error result naming 450ms", err, res.Text())
		}
		if got := time.Since(start); got != 450*time.Millisecond {
			t.Errorf("cut after %v, want 450ms", got)
		}
	})
}

// TestCallErrors checks the mapping of a broken call and of a tool
// failure.
func TestCallErrors(t *testing.T) {
	r := newRig(t, nil)
	r.conn.add("s", newServer("fail", "broken"))
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	if res, err := call(t, r.e, "u", "s/fail"); err != nil || !res.IsError || res.Text() != "the tool failed" {
		t.Errorf("failing tool: %v %q", err, res.Text())
	}
	if res, err := call(t, r.e, "u", "s/broken"); err != nil || !res.IsError || !strings.Contains(res.Text(), `MCP server "s"`) {
		t.Errorf("broken call: %v %q; want an error result naming the server", err, res.Text())
	}
}

// TestDrain checks that switching a server off lets a running call finish
// with its real result, refuses new calls with the disabled result, and
// closes the connection only after the running call returned.
func TestDrain(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("slow", "echo"))
	gate := make(chan struct{})
	s.set(func(s *fakeServer) { s.slowGate = gate })
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	conn := s.last()

	type out struct {
		res *ext.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := call(t, r.e, "u", "s/slow")
		done <- out{res, err}
	}()
	<-s.slowStarted

	r.plan.set("u")
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u")
	if st := statusOf(r.e, "u", "s"); st.State != "retiring" {
		t.Errorf("status while draining: %+v; want retiring", st)
	}
	if res, err := call(t, r.e, "u", "s/echo"); err != nil || !res.IsError || res.Text() != `MCP server "s" is disabled` {
		t.Errorf("new call while draining: %v %q; want the disabled result", err, res.Text())
	}
	if conn.isClosed() {
		t.Fatal("the connection closed while a call was running")
	}
	close(gate)
	o := <-done
	if o.err != nil || o.res.IsError || o.res.Text() != "slow done for u" {
		t.Fatalf("the running call got %v %q; want its real result", o.err, o.res.Text())
	}
	select {
	case <-conn.closedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the drained connection was not closed after its last call")
	}
	if n := conn.closeCount(); n != 1 {
		t.Errorf("closed %d times, want once", n)
	}
	if st := statusOf(r.e, "u", "s"); st.State != "" {
		t.Errorf("status after draining: %+v; want no entry", st)
	}
}

// TestRevive checks that a draining connection that becomes active again
// is revived, and that once closed a new one is made.
func TestRevive(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("slow", "echo"))
	gate := make(chan struct{})
	s.set(func(s *fakeServer) { s.slowGate = gate })
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	first := s.last()

	done := make(chan error, 1)
	go func() {
		_, err := call(t, r.e, "u", "s/slow")
		done <- err
	}()
	<-s.slowStarted
	r.plan.set("u")
	mustActivate(t, r.e, "u")
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u", "s/slow", "s/echo")
	if c, _ := s.counts(); c != 1 {
		t.Errorf("revival reconnected: %d connects, want 1", c)
	}
	if res, err := call(t, r.e, "u", "s/echo"); err != nil || res.IsError {
		t.Errorf("call on the revived connection: %v %+v", err, res)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // a wrong close would be on its way
	if first.isClosed() {
		t.Fatal("the revived connection was closed when its call returned")
	}

	// Off again with nothing running: closed at once; on again: a new one.
	r.plan.set("u")
	mustActivate(t, r.e, "u")
	<-first.closedCh
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	if c, _ := s.counts(); c != 2 || s.last() == first {
		t.Errorf("after the close: %d connects; want a new connection", c)
	}
}

// TestQuarantineIsolationAndRetry checks that a failing server is
// quarantined for that user alone, with its reason, that the rest keeps
// working, and that backoff retries pick up a recovered server.
func TestQuarantineIsolationAndRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Second, Max: 8 * time.Second}})
		r.conn.add("good", newServer("a"))
		bad := r.conn.add("alice/flaky", newServer("f"))
		bad.set(func(s *fakeServer) { s.connectErr = errors.New("exec: \"flaky\": executable file not found in $PATH") })
		r.conn.add("flaky", newServer("f")) // everyone else's
		for _, u := range []string{"alice", "bob"} {
			r.plan.set(u, decl("good"), decl("flaky"))
			mustActivate(t, r.e, u)
		}
		r.pub.waitNames(t, "alice", "good/a")
		r.pub.waitNames(t, "bob", "flaky/f", "good/a")
		st := statusOf(r.e, "alice", "flaky")
		if st.State != "quarantined" || !strings.Contains(st.Reason, "executable file not found") || st.NextRetry.IsZero() {
			t.Errorf("alice's flaky status: %+v", st)
		}
		if res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "alice", Name: "flaky/f"}); err != nil || !res.IsError ||
			!strings.Contains(res.Text(), "unavailable") {
			t.Errorf("call to a quarantined server: %v %q", err, res.Text())
		}

		// Retries back off exponentially (with jitter: half to all of the step).
		var waits []time.Duration
		last := time.Now()
		for range 4 {
			c0, _ := bad.counts()
			for {
				time.Sleep(100 * time.Millisecond)
				if c, _ := bad.counts(); c > c0 {
					break
				}
			}
			synctest.Wait()
			waits = append(waits, time.Since(last))
			last = time.Now()
		}
		steps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
		for i, w := range waits {
			if w < steps[i]/2 || w > steps[i]+100*time.Millisecond {
				t.Errorf("retry %d came after %v; want between %v and %v", i+1, w, steps[i]/2, steps[i])
			}
		}
		if st := statusOf(r.e, "alice", "flaky"); st.Detail != "failed 5 time(s)" {
			t.Errorf("status detail %q, want 5 failures", st.Detail)
		}

		// The server recovers: the next retry picks it up.
		bad.set(func(s *fakeServer) { s.connectErr = nil })
		time.Sleep(9 * time.Second)
		synctest.Wait()
		r.pub.waitNames(t, "alice", "flaky/f", "good/a")
		if st := statusOf(r.e, "alice", "flaky"); st.State != "connected" {
			t.Errorf("after recovery: %+v", st)
		}
	})
}

// TestBusyRetriedByRefresh: a server whose connect failed for want of a
// slot of the host (ext.ErrBusy) is quarantined, and the user's next
// refresh (the host's, once a slot freed) connects it at once, whatever
// its backoff; any other failure waits for its backoff.
func TestBusyRetriedByRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Hour, Max: time.Hour}})
		busy := r.conn.add("notes", newServer("a"))
		busy.set(func(s *fakeServer) {
			s.connectErr = fmt.Errorf("starting mcp/notes for alice: all service process slots are busy: %w", ext.ErrBusy)
		})
		broken := r.conn.add("broken", newServer("b"))
		broken.set(func(s *fakeServer) { s.connectErr = errors.New("exec: no such file") })
		r.plan.set("alice", decl("notes"), decl("broken"))
		mustActivate(t, r.e, "alice")
		if st := statusOf(r.e, "alice", "notes"); st.State != "quarantined" || !strings.Contains(st.Reason, "slots are busy") {
			t.Fatalf("notes: %+v; want quarantined for want of a slot", st)
		}
		busy.set(func(s *fakeServer) { s.connectErr = nil })
		broken.set(func(s *fakeServer) { s.connectErr = nil })
		time.Sleep(time.Minute) // far less than the backoff
		mustActivate(t, r.e, "alice")
		r.pub.waitNames(t, "alice", "notes/a")
		if st := statusOf(r.e, "alice", "notes"); st.State != "connected" {
			t.Errorf("notes after the refresh: %+v; want connected", st)
		}
		if c, _ := broken.counts(); c != 1 {
			t.Errorf("broken was connected %d times; want once: its backoff is not over", c)
		}
	})
}

// TestSignInParksServer checks a server whose connector wants a sign-in:
// it waits in "needs sign-in" with how to sign in, in the status and in
// each call's error, is never retried on a timer nor by a refresh with the
// same credential, and connects as soon as a new credential (fingerprint)
// arrives; a transient failure after it is quarantined as usual.
func TestSignInParksServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Second, Max: 8 * time.Second}})
		r.conn.add("good", newServer("a"))
		oauth := r.conn.add("oauth", newServer("o"))
		const how = "sign in at https://host.example/settings/connect/mcp/oauth"
		oauth.set(func(s *fakeServer) { s.connectErr = fmt.Errorf("connecting: %w", &catalog.SignInError{Reason: how}) })
		r.plan.set("alice", decl("good"), decl("oauth"))
		mustActivate(t, r.e, "alice")
		r.pub.waitNames(t, "alice", "good/a")
		st := statusOf(r.e, "alice", "oauth")
		if st.State != ext.StateNeedsSignIn || st.Reason != how || !st.NextRetry.IsZero() {
			t.Errorf("status of a server waiting for a sign-in: %+v", st)
		}
		res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "alice", Name: "oauth/o"})
		if err != nil || !res.IsError || res.Text() != `MCP server "oauth" needs sign-in: `+how {
			t.Errorf("call while waiting for a sign-in: %v %q", err, res.Text())
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		mustActivate(t, r.e, "alice") // a refresh with the same credential
		if c, _ := oauth.counts(); c != 1 {
			t.Errorf("%d connects while waiting for a sign-in; want 1 (no retries)", c)
		}
		// A new credential: connected at once.
		oauth.set(func(s *fakeServer) { s.connectErr = nil })
		d := decl("oauth")
		d.Fingerprint = "v2"
		r.plan.set("alice", decl("good"), d)
		mustActivate(t, r.e, "alice")
		r.pub.waitNames(t, "alice", "good/a", "oauth/o")
		if st := statusOf(r.e, "alice", "oauth"); st.State != "connected" {
			t.Errorf("after the sign-in: %+v", st)
		}
		// A transient failure with a third credential is a quarantine.
		oauth.set(func(s *fakeServer) { s.connectErr = errors.New("503 Service Unavailable") })
		d.Fingerprint = "v3"
		r.plan.set("alice", decl("good"), d)
		mustActivate(t, r.e, "alice")
		if st := statusOf(r.e, "alice", "oauth"); st.State != "quarantined" || st.NextRetry.IsZero() {
			t.Errorf("after a transient failure: %+v", st)
		}
	})
}

// TestQuarantineOnListFailureAndTimeout checks the other ways a server
// fails: listing its tools, and connecting too slowly.
func TestQuarantineOnListFailureAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{ConnectTimeout: 2 * time.Second})
		lister := r.conn.add("lister", newServer("x"))
		lister.set(func(s *fakeServer) { s.listErr = errors.New("invalid JSON on stdout") })
		hang := r.conn.add("hang", newServer("y"))
		hang.set(func(s *fakeServer) { s.hang = true })
		r.conn.add("ok", newServer("z"))
		r.plan.set("u", decl("lister"), decl("hang"), decl("ok"))
		start := time.Now()
		mustActivate(t, r.e, "u")
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("activation took %v; want the 2s connect timeout", d)
		}
		r.pub.waitNames(t, "u", "ok/z")
		if st := statusOf(r.e, "u", "lister"); st.State != "quarantined" || !strings.Contains(st.Reason, "listing its tools failed: invalid JSON") {
			t.Errorf("lister: %+v", st)
		}
		if live := lister.live(); len(live) != 0 {
			t.Errorf("the connection whose listing failed was not closed")
		}
		if st := statusOf(r.e, "u", "hang"); st.State != "quarantined" || st.Reason != "connecting timed out after 2s" {
			t.Errorf("hang: %+v", st)
		}
	})
}

// TestCrash checks that a connection that dies is quarantined with the
// reason, its tools unpublished, and retried.
func TestCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Second, Max: time.Second}})
		s := r.conn.add("s", newServer("a"))
		r.conn.add("other", newServer("b"))
		r.plan.set("u", decl("s"), decl("other"))
		mustActivate(t, r.e, "u")
		s.last().crash(errors.New("signal: killed"))
		synctest.Wait()
		r.pub.waitNames(t, "u", "other/b")
		st := statusOf(r.e, "u", "s")
		if st.State != "quarantined" || st.Reason != "the connection ended: signal: killed" {
			t.Errorf("status after the crash: %+v", st)
		}
		if s.last().closeCount() != 1 {
			t.Errorf("the dead connection was closed %d times, want once", s.last().closeCount())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		r.pub.waitNames(t, "u", "other/b", "s/a")
		if c, _ := s.counts(); c != 2 {
			t.Errorf("connects = %d, want 2 (one retry)", c)
		}
	})
}

// TestCrashWhileCallRunning checks that a crash with a call running fails
// that call with an error result, and never revives the dead connection.
func TestCrashWhileCallRunning(t *testing.T) {
	r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Hour}})
	s := r.conn.add("s", newServer("slow"))
	s.set(func(s *fakeServer) { s.slowGate = make(chan struct{}) })
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	done := make(chan *ext.CallToolResult, 1)
	go func() {
		res, _ := call(t, r.e, "u", "s/slow")
		done <- res
	}()
	<-s.slowStarted
	dead := s.last()
	dead.crash(errors.New("EOF"))
	if res := <-done; !res.IsError {
		t.Errorf("the running call succeeded on a dead connection: %+v", res)
	}
	r.pub.waitNames(t, "u")
	<-dead.closedCh
	// A refresh with a changed fingerprint reconnects at once.
	d := decl("s")
	d.Fingerprint = "v2"
	r.plan.set("u", d)
	mustActivate(t, r.e, "u")
	if s.last() == dead {
		t.Error("the dead connection was revived")
	}
	r.pub.waitNames(t, "u", "s/slow")
}

// TestListChangedCoalesced checks that a flood of tools/list_changed
// notifications makes at most one re-list plus one follow-up, and that
// the final list is published.
func TestListChangedCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{RelistInterval: 500 * time.Millisecond})
		s := r.conn.add("s", newServer("a"))
		r.plan.set("u", decl("s"))
		mustActivate(t, r.e, "u")
		conn := s.last()
		_, lists0 := s.counts()

		gate := make(chan struct{})
		s.set(func(s *fakeServer) {
			s.listGate = gate
			s.tools = append(s.tools, catalog.ToolInfo{Name: "b"})
		})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 250 {
					conn.onChanged()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		close(gate)
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		_, lists := s.counts()
		if n := lists - lists0; n < 1 || n > 2 {
			t.Errorf("1000 notifications made %d re-lists; want 1 or 2", n)
		}
		r.pub.waitNames(t, "u", "s/a", "s/b")
		if c, _ := s.counts(); c != 1 {
			t.Errorf("list_changed reconnected (%d connects)", c)
		}
	})
}

// TestListChangedLoopBounded checks that a server that announces a change
// after every list is re-listed at most once per RelistInterval.
func TestListChangedLoopBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{RelistInterval: time.Second})
		s := r.conn.add("s", newServer("a"))
		r.plan.set("u", decl("s"))
		mustActivate(t, r.e, "u")
		conn := s.last()
		var stop atomic.Bool
		s.set(func(s *fakeServer) { s.listDelay = 10 * time.Millisecond })
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				conn.onChanged()
				time.Sleep(5 * time.Millisecond)
			}
		})
		time.Sleep(10 * time.Second)
		stop.Store(true)
		wg.Wait()
		synctest.Wait()
		_, lists := s.counts()
		if lists > 12 {
			t.Errorf("%d lists in 10s of constant list_changed; want about one per second", lists)
		}
	})
}

// TestListChangedDuringConnect checks that a notification that arrives
// while the connection is being made is not lost.
func TestListChangedDuringConnect(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("a"))
	gate := make(chan struct{})
	s.set(func(s *fakeServer) { s.listGate = gate })
	r.plan.set("u", decl("s"))
	done := make(chan error, 1)
	go func() { done <- r.e.Activate(context.Background(), "u") }()
	for s.last() == nil {
		time.Sleep(time.Millisecond)
	}
	s.last().onChanged()
	s.set(func(s *fakeServer) {
		s.tools = append(s.tools, catalog.ToolInfo{Name: "b"})
		s.listGate = nil
	})
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.pub.waitNames(t, "u", "s/a", "s/b")
}

// TestPerUserSerialAndUsersParallel checks that one user's refreshes never
// overlap while different users' do.
func TestPerUserSerialAndUsersParallel(t *testing.T) {
	var (
		mu      sync.Mutex
		running = map[string]int{}
		maxPer  = map[string]int{}
		total   int
		maxAll  int
	)
	release := make(chan struct{})
	planner := catalog.PlannerFunc(func(ctx context.Context, user string) (catalog.Plan, error) {
		mu.Lock()
		running[user]++
		total++
		maxPer[user] = max(maxPer[user], running[user])
		maxAll = max(maxAll, total)
		mu.Unlock()
		<-release
		mu.Lock()
		running[user]--
		total--
		mu.Unlock()
		return catalog.Plan{}, nil
	})
	e := catalog.New(planner, newConnector(), newPublisher(), nil)
	defer e.Close(context.Background())
	var wg sync.WaitGroup
	for _, u := range []string{"a", "b", "c"} {
		for range 3 {
			wg.Go(func() {
				if err := e.Activate(context.Background(), u); err != nil {
					t.Error(err)
				}
			})
		}
	}
	for {
		mu.Lock()
		n := total
		mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for u, m := range maxPer {
		if m != 1 {
			t.Errorf("user %q had %d refreshes at once, want 1", u, m)
		}
	}
	if maxAll != 3 {
		t.Errorf("at most %d users refreshed at once, want 3", maxAll)
	}
}

// TestRetireAndDeactivate checks the explicit withdrawals.
func TestRetireAndDeactivate(t *testing.T) {
	r := newRig(t, nil)
	s1 := r.conn.add("s1", newServer("a"))
	r.conn.add("s2", newServer("b"))
	r.plan.set("u", decl("s1"), decl("s2"))
	mustActivate(t, r.e, "u")
	ctx := context.Background()
	if err := r.e.Retire(ctx, "u", "s1"); err != nil {
		t.Fatal(err)
	}
	r.pub.waitNames(t, "u", "s2/b")
	<-s1.last().closedCh
	if res, _ := call(t, r.e, "u", "s1/a"); res == nil || res.Text() != `MCP server "s1" is disabled` {
		t.Errorf("call after Retire: %+v", res)
	}
	mustActivate(t, r.e, "u") // the plan still has it: it comes back
	r.pub.waitNames(t, "u", "s1/a", "s2/b")
	if err := r.e.Retire(ctx, "nobody", "s1"); err != nil {
		t.Errorf("retiring for an inactive user: %v", err)
	}

	if err := r.e.Deactivate(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	r.pub.waitNames(t, "u")
	if st := r.e.Status("u"); len(st) != 0 {
		t.Errorf("status after Deactivate: %+v", st)
	}
	if _, err := call(t, r.e, "u", "s2/b"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("call after Deactivate: %v", err)
	}
}

// TestStatusAndProblems checks the status report of every state and of
// the plan's problems, for one user and for all.
func TestStatusAndProblems(t *testing.T) {
	r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Hour}})
	r.conn.add("ok", newServer("a", "b"))
	bad := r.conn.add("bad", newServer("c"))
	bad.set(func(s *fakeServer) { s.connectErr = errors.New("refused") })
	r.plan.set("u", decl("ok"), decl("bad"), decl("ok"), catalog.ServerDecl{Name: "x/y"})
	r.plan.extra["u"] = []catalog.Problem{{Server: "sw", Reason: "the switch for \"sw\" is 3, not true or false"}}
	r.plan.set("v", decl("ok"))
	mustActivate(t, r.e, "u")
	mustActivate(t, r.e, "v")
	got := r.e.Status("u")
	for i := range got {
		got[i].NextRetry = time.Time{}
	}
	want := []ext.StatusEntry{
		{User: "u", Name: "bad", State: "quarantined", Reason: "connecting failed: refused", Detail: "failed 1 time(s)"},
		{User: "u", Name: "ok", State: "connected", Tools: 2},
		{User: "u", Name: "ok", State: "error", Reason: "the server is declared twice; the first declaration is used"},
		{User: "u", Name: "sw", State: "error", Reason: "the switch for \"sw\" is 3, not true or false"},
		{User: "u", Name: "x/y", State: "error", Reason: "the server name is empty or contains \"/\""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if all := r.e.Status(""); len(all) != len(want)+1 || all[len(all)-1].User != "v" {
		t.Errorf("status of all users: %+v", all)
	}
}

// TestToolNamesWithControlCharactersRefused checks that a tool whose name
// has control characters (an escape sequence, a bell, a forged line, a
// bidi override) is neither published nor callable, that the server's
// other tools are, and that the status names the refused ones, escaped.
func TestToolNamesWithControlCharactersRefused(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("ok"))
	s.set(func(s *fakeServer) {
		s.tools = append(s.tools,
			catalog.ToolInfo{Name: "t\x1b[2J\x1b]0;pwned\a"},
			catalog.ToolInfo{Name: "x\r\nforged"},
			catalog.ToolInfo{Name: "gnp\u202eexe"},
			catalog.ToolInfo{Name: "desc", Description: "a description keeps its text\x1b]52;c;ZXZpbA==\a"},
		)
	})
	r.plan.set("alice", decl("s"))
	mustActivate(t, r.e, "alice")
	var names []string
	for _, tl := range r.pub.tools("alice") {
		names = append(names, tl.Name)
	}
	if want := []string{"s/ok", "s/desc"}; !slices.Equal(names, want) {
		t.Errorf("published %q, want %q", names, want)
	}
	if _, err := call(t, r.e, "alice", "s/x\r\nforged"); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("calling a refused tool: %v; want ErrNotFound", err)
	}
	st := r.e.Status("alice")
	want := `refused 3 tool(s) whose name has control characters: "t\u001b[2J\u001b]0;pwned\u0007", "x\u000d\u000aforged", "gnp\u202eexe"`
	if len(st) != 1 || st[0].State != "connected" || st[0].Tools != 2 || st[0].Reason != want {
		t.Errorf("status %+v, want connected with 2 tools and reason %s", st, want)
	}
}

// TestPlannerAndPublisherErrors checks that a failing planner or publisher
// fails the refresh and leaves the engine usable.
func TestPlannerAndPublisherErrors(t *testing.T) {
	r := newRig(t, nil)
	r.conn.add("s", newServer("a"))
	r.plan.set("u", decl("s"))
	r.plan.err = errors.New("settings store down")
	if err := r.e.Activate(context.Background(), "u"); err == nil || !strings.Contains(err.Error(), "settings store down") {
		t.Errorf("Activate with a failing planner: %v", err)
	}
	r.plan.err = nil
	r.pub.mu.Lock()
	r.pub.err = errors.New("host gone")
	r.pub.mu.Unlock()
	if err := r.e.Activate(context.Background(), "u"); err == nil || !strings.Contains(err.Error(), "host gone") {
		t.Errorf("Activate with a failing publisher: %v", err)
	}
	r.pub.mu.Lock()
	r.pub.err = nil
	r.pub.mu.Unlock()
	mustActivate(t, r.e, "u")
	r.pub.waitNames(t, "u", "s/a")
}

// TestReconcileAll checks that every active user is refreshed.
func TestReconcileAll(t *testing.T) {
	r := newRig(t, nil)
	r.conn.add("s", newServer("a"))
	r.conn.add("t", newServer("b"))
	for _, u := range []string{"a", "b", "c"} {
		r.plan.set(u, decl("s"))
		mustActivate(t, r.e, u)
		r.plan.set(u, decl("s"), decl("t"))
	}
	if got := r.e.Users(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Users() = %q", got)
	}
	if err := r.e.ReconcileAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"a", "b", "c"} {
		r.pub.waitNames(t, u, "s/a", "t/b")
	}
}

// TestClose checks that Close drains running calls, closes every
// connection, refuses new work and is idempotent.
func TestClose(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("slow", "echo"))
	gate := make(chan struct{})
	s.set(func(s *fakeServer) { s.slowGate = gate })
	for _, u := range []string{"a", "b"} {
		r.plan.set(u, decl("s"))
		mustActivate(t, r.e, u)
	}
	done := make(chan *ext.CallToolResult, 1)
	go func() {
		res, _ := call(t, r.e, "a", "s/slow")
		done <- res
	}()
	<-s.slowStarted
	closed := make(chan error, 2)
	for range 2 {
		go func() { closed <- r.e.Close(context.Background()) }()
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case <-closed:
		t.Fatal("Close returned while a call was running")
	default:
	}
	if _, err := call(t, r.e, "b", "s/echo"); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("call during Close: %v; want ErrUnavailable", err)
	}
	close(gate)
	if res := <-done; res.IsError {
		t.Errorf("the running call got %q; want its result", res.Text())
	}
	for range 2 {
		if err := <-closed; err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if live := s.live(); len(live) != 0 {
		t.Errorf("%d connections left open", len(live))
	}
	if err := r.e.Activate(context.Background(), "c"); !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("Activate after Close: %v", err)
	}
}

// TestCloseDeadline checks that Close closes connections with calls still
// running once its context ends.
func TestCloseDeadline(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("slow"))
	s.set(func(s *fakeServer) { s.slowGate = make(chan struct{}) })
	r.plan.set("u", decl("s"))
	mustActivate(t, r.e, "u")
	done := make(chan *ext.CallToolResult, 1)
	go func() {
		res, _ := call(t, r.e, "u", "s/slow")
		done <- res
	}()
	<-s.slowStarted
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.e.Close(ctx); err == nil {
		t.Error("Close past its deadline with a call running returned nil")
	}
	if res := <-done; !res.IsError {
		t.Errorf("the cut call got %+v; want an error result", res)
	}
	if n := s.last().closeCount(); n != 1 {
		t.Errorf("closed %d times, want once", n)
	}
}

// TestCloseDuringConnect checks that Close cancels connects in progress
// and leaves nothing open.
func TestCloseDuringConnect(t *testing.T) {
	r := newRig(t, nil)
	s := r.conn.add("s", newServer("a"))
	s.set(func(s *fakeServer) { s.hang = true })
	r.plan.set("u", decl("s"))
	done := make(chan error, 1)
	go func() { done <- r.e.Activate(context.Background(), "u") }()
	for {
		if c, _ := s.counts(); c > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ext.ErrUnavailable) {
		t.Errorf("Activate cut by Close: %v; want ErrUnavailable", err)
	}
}

// TestActivateCancelled checks that a caller giving up does not
// quarantine the server for good: it is tried again soon.
func TestActivateCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Second}})
		s := r.conn.add("s", newServer("a"))
		s.set(func(s *fakeServer) { s.connectDelay = 10 * time.Second })
		r.plan.set("u", decl("s"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.e.Activate(ctx, "u"); err != nil {
			t.Fatalf("Activate: %v", err)
		}
		if st := statusOf(r.e, "u", "s"); st.State != "quarantined" || !strings.Contains(st.Reason, "interrupted") {
			t.Errorf("status: %+v", st)
		}
		s.set(func(s *fakeServer) { s.connectDelay = 0 })
		time.Sleep(2 * time.Second)
		synctest.Wait()
		r.pub.waitNames(t, "u", "s/a")
	})
}

type seqKey struct{}

// TestFIFOOrder checks that one user's refreshes run in the order they
// were asked for, and that a waiter that gives up leaves the queue.
func TestFIFOOrder(t *testing.T) {
	var (
		mu    sync.Mutex
		order []int
	)
	started := make(chan struct{})
	release := make(chan struct{})
	planner := catalog.PlannerFunc(func(ctx context.Context, user string) (catalog.Plan, error) {
		n := ctx.Value(seqKey{}).(int)
		mu.Lock()
		order = append(order, n)
		mu.Unlock()
		if n == 0 {
			close(started)
			<-release
		}
		return catalog.Plan{}, nil
	})
	e := catalog.New(planner, newConnector(), newPublisher(), nil)
	defer e.Close(context.Background())
	activate := func(ctx context.Context, n int) error {
		return e.Activate(context.WithValue(ctx, seqKey{}, n), "u")
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = activate(context.Background(), 0) })
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	for n := 1; n <= 9; n++ {
		wg.Go(func() {
			c := context.Background()
			if n == 5 {
				c = ctx
			}
			err := activate(c, n)
			if n == 5 && !errors.Is(err, context.Canceled) {
				t.Errorf("the waiter that gave up got %v", err)
			}
		})
		time.Sleep(5 * time.Millisecond) // queue them one after another
	}
	cancel()
	time.Sleep(5 * time.Millisecond)
	close(release)
	wg.Wait()
	want := []int{0, 1, 2, 3, 4, 6, 7, 8, 9}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("refresh order (-want +got):\n%s", diff)
	}
}

// TestOperatorOnlyReason: a failure whose details are the operator's
// (OperatorOnlyError) shows the user's reason in the user's status and
// calls, and the details only in the status of every user.
func TestOperatorOnlyReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, &catalog.Options{Backoff: catalog.Backoff{Min: time.Minute, Max: time.Minute}})
		bad := r.conn.add("shared", newServer("s"))
		bad.set(func(s *fakeServer) {
			s.connectErr = fmt.Errorf("starting: %w", &catalog.OperatorOnlyError{
				User:     "it exited with status 3 before answering (its output is shown to the operator only)",
				Operator: "it exited with status 3 before answering: auth failed for [redacted]"})
		})
		r.plan.set("bob", decl("shared"))
		mustActivate(t, r.e, "bob")
		synctest.Wait()
		st := statusOf(r.e, "bob", "shared")
		if st.State != "quarantined" || !strings.Contains(st.Reason, "shown to the operator only") || strings.Contains(st.Reason, "auth failed") {
			t.Errorf("bob's status: %+v", st)
		}
		if res, err := r.e.Call(context.Background(), &ext.CallToolRequest{User: "bob", Name: "shared/s"}); err != nil || !res.IsError ||
			strings.Contains(res.Text(), "auth failed") {
			t.Errorf("bob's call: %v %q", err, res.Text())
		}
		if st := statusOf(r.e, "", "shared"); st.User != "bob" || !strings.Contains(st.Reason, "auth failed for [redacted]") {
			t.Errorf("the operator's status: %+v", st)
		}
	})
}
