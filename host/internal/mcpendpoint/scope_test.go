package mcpendpoint_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// TestScopedView: a scoped principal's session lists and calls only the
// tools its scope reaches, on both revisions; list_changed reaches it
// only when something in its scope changed, while the user's unscoped
// session hears every change.
func TestScopedView(t *testing.T) {
	e := newEnv(t, nil)
	e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/list", "List notes.", ""), tool("files/read", "Read.", ""))
	e.ver.mu.Lock()
	e.ver.tokens["tok-scoped"] = mcpendpoint.Principal{User: "alice", TokenID: "s1",
		Scope: &ext.Scope{Servers: []string{"notes"}, Tools: []string{"notes/list*"}}}
	e.ver.mu.Unlock()
	all, scoped := e.mustConnect(t, aliceTok), e.mustConnect(t, "tok-scoped")
	if got := all.names(t); !slices.Equal(got, []string{"files__read", "notes__add", "notes__list"}) {
		t.Fatalf("the unscoped session lists %v", got)
	}
	if got := scoped.names(t); !slices.Equal(got, []string{"notes__list"}) {
		t.Errorf("the scoped session lists %v, want notes__list only", got)
	}
	for _, name := range []string{"notes__add", "files__read"} {
		if _, err := scoped.tryCall(name, `{}`); err == nil {
			t.Errorf("the scoped session called %s", name)
		}
	}
	if res := scoped.call(t, "notes__list", `{}`); res.IsError {
		t.Errorf("notes__list: %s", text(res))
	}
	stateless, err := e.connect(t, "tok-scoped", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := stateless.names(t); !slices.Equal(got, []string{"notes__list"}) {
		t.Errorf("the scoped token on the stateless revision lists %v", got)
	}

	// A change outside the scope: the unscoped session hears it, the
	// scoped one does not.
	time.Sleep(50 * time.Millisecond) // past go-sdk's 10 ms debounce
	all.drain()
	scoped.drain()
	e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/list", "List notes.", ""), tool("files/read", "Read.", ""), tool("files/write", "Write.", ""))
	all.waitChanged(t)
	select {
	case <-scoped.changed:
		t.Error("a change outside the scope notified the scoped session")
	case <-time.After(300 * time.Millisecond):
	}
	// A change inside it: both hear it.
	e.host.SetTools("alice", tool("notes/add", "Add a note.", ""), tool("notes/list", "List the notes.", ""), tool("files/read", "Read.", ""), tool("files/write", "Write.", ""))
	scoped.waitChanged(t)
}

// TestSessionEndsWithToken: a session of a principal with Ends closes
// then, on its own (the verifier here would still accept the token), and
// its next request is refused.
func TestSessionEndsWithToken(t *testing.T) {
	e := newEnv(t, nil)
	e.ver.mu.Lock()
	e.ver.tokens["tok-short"] = mcpendpoint.Principal{User: "alice", TokenID: "x1", Ends: time.Now().Add(500 * time.Millisecond)}
	e.ver.mu.Unlock()
	c := e.mustConnect(t, "tok-short")
	c.names(t)
	if n := e.ep.Sessions(); n != 1 {
		t.Fatalf("%d sessions open", n)
	}
	waitFor(t, "the session to close at the token's end", func() bool { return e.ep.Sessions() == 0 })
	if _, err := c.tryCall("notes__add", `{}`); err == nil {
		t.Error("the ended session was served")
	}
}

// TestSessionCapCountsScopedViews: the per-user session cap counts the
// user's sessions of every scope, so that tokens of many scopes do not
// multiply it: at the cap, a scoped session closes the user's least
// recently used one, whatever its scope.
func TestSessionCapCountsScopedViews(t *testing.T) {
	e := newEnv(t, &mcpendpoint.Options{MaxSessionsPerUser: 2})
	e.ver.mu.Lock()
	for i, srv := range []string{"notes", "files", "calendar"} {
		e.ver.tokens["tok-"+srv] = mcpendpoint.Principal{User: "alice", TokenID: "s" + string(rune('0'+i)), Scope: &ext.Scope{Servers: []string{srv}}}
	}
	e.ver.mu.Unlock()
	first := e.mustConnect(t, aliceTok)
	first.names(t)
	for _, srv := range []string{"notes", "files", "calendar"} {
		e.mustConnect(t, "tok-"+srv).names(t)
	}
	if n := e.ep.Sessions(); n != 2 {
		t.Errorf("alice holds %d sessions across scopes, want the cap 2", n)
	}
	if _, err := first.tryCall("notes__add", `{}`); err == nil {
		t.Error("the least recently used session (unscoped) was not the one closed")
	}
}
