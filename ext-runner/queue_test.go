package extrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/exttest"
)

// actor is the host's side of ext.UserActor for unit tests: it records
// the tokens minted and revoked (the real host's are in examples/e2e).
type actor struct {
	*exttest.FakeHost
	mu      sync.Mutex
	n       int
	live    map[string]*ext.MintTokenRequest
	minted  []*ext.MintTokenRequest
	revoked []string
}

func (a *actor) MintUserToken(_ context.Context, req *ext.MintTokenRequest) (*ext.MintedToken, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	id := fmt.Sprintf("tok_%d", a.n)
	a.live[id] = req
	a.minted = append(a.minted, req)
	return &ext.MintedToken{Token: "secret-" + id, ID: id}, nil
}

func (a *actor) RevokeUserToken(_ context.Context, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.live, id)
	a.revoked = append(a.revoked, id)
	return nil
}

func (a *actor) ListToolsAs(context.Context, string, *ext.Scope) ([]ext.Tool, error) { return nil, nil }
func (a *actor) CallToolAs(context.Context, *ext.CallAsRequest) (*ext.CallToolResult, error) {
	return nil, ext.ErrNotFound
}

func (a *actor) liveCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.live)
}

func newTestExt(t *testing.T, cfg string) (*Extension, *actor) {
	t.Helper()
	a := &actor{FakeHost: exttest.NewFakeHost(t), live: map[string]*ext.MintTokenRequest{}}
	e := New(nil)
	if err := e.Configure(context.Background(), &ext.ConfigureRequest{Name: "runner", Config: json.RawMessage(cfg), Host: a, PublicURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	return e, a
}

// waitState waits until runner name of alice is in state.
func waitState(t *testing.T, e *Extension, name, state string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st, _ := e.Status(context.Background(), "alice")
		for _, s := range st {
			if s.Name == name && s.State == state {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, _ := e.Status(context.Background(), "alice")
	t.Fatalf("runner %s never %q: %+v", name, state, st)
}

const sleepProfile = `"profiles":{"sleep":{"command":"/bin/sleep","args":["60"]}}`

// TestQueue: a trigger while running queues one run, a third is not
// queued again; the global cap holds a second runner's session waiting
// for a slot; Shutdown kills the running agent, cancels the waiting one,
// does not start the queued one, and revokes every token.
func TestQueue(t *testing.T) {
	e, a := newTestExt(t, `{"maxProcesses":1,`+sleepProfile+`,"runners":{
		"one":{"user":"alice","servers":["notes"],"profile":"sleep","prompt":"p"},
		"two":{"user":"alice","servers":["notes"],"profile":"sleep","prompt":"p"}}}`)
	var said []string
	for range 3 {
		r, err := e.Trigger("alice", "one", "test")
		if err != nil {
			t.Fatal(err)
		}
		said = append(said, r)
	}
	if strings.Join(said, ",") != "started,queued,already queued" {
		t.Errorf("three triggers said %v", said)
	}
	waitState(t, e, "one", "running")
	if r, err := e.Trigger("alice", "two", "test"); err != nil || r != "started" {
		t.Fatalf("runner two: %q %v", r, err)
	}
	waitState(t, e, "two", "waiting for a slot")
	if a.liveCount() != 1 {
		t.Errorf("%d live tokens, want 1 (the waiting session has none yet)", a.liveCount())
	}
	st, _ := e.Status(context.Background(), "")
	if len(st) != 2 || !strings.Contains(st[0].Detail, "1 queued") || len(st[0].Actions) != 1 || st[0].Actions[0] != ActionRun {
		t.Errorf("status: %+v", st)
	}
	if st, _ := e.Status(context.Background(), "bob"); len(st) != 0 {
		t.Errorf("bob's status shows alice's runners: %+v", st)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	one, two := e.Runs("alice", "one"), e.Runs("alice", "two")
	if len(one) != 1 || one[0].Ended != EndedCancelled || len(two) != 1 || two[0].Ended != EndedCancelled {
		t.Errorf("runs after shutdown: one %+v, two %+v", one, two)
	}
	if a.liveCount() != 0 || len(a.revoked) != 1 {
		t.Errorf("tokens after shutdown: %d live, %v revoked", a.liveCount(), a.revoked)
	}
	if _, err := e.Trigger("alice", "one", "test"); err == nil {
		t.Errorf("a trigger after shutdown was accepted")
	}
}

// TestSessionEnds: an agent's exit status, the time limit, and a command
// that does not start, as the status records them; a token per session,
// revoked at its end, scoped to the runner's servers and tools and
// expiring after its time limit.
func TestSessionEnds(t *testing.T) {
	e, a := newTestExt(t, `{"profiles":{
		"sh":{"command":"/bin/sh","args":["-c","{prompt}"],"env":{"TOK":{"value":"{token}"}}},
		"missing":{"command":"/nonexistent/agent"}},
	  "runners":{
		"exit3":{"user":"alice","servers":["notes"],"tools":["notes/list_*"],"profile":"sh","prompt":"case $TOK in secret-tok_*) echo tok-ok;; esac; echo out; echo err >&2; exit 3","timeLimit":"1m"},
		"hang":{"user":"alice","servers":["notes"],"profile":"sh","prompt":"sleep 60 & sleep 60","timeLimit":"1s"},
		"missing":{"user":"alice","servers":["notes"],"profile":"missing","prompt":"x"}}}`)
	defer e.Shutdown(context.Background())
	for _, n := range []string{"exit3", "hang", "missing"} {
		if _, err := e.Trigger("alice", n, "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"exit3", "hang", "missing"} {
		deadline := time.Now().Add(20 * time.Second)
		for len(e.Runs("alice", n)) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	r := e.Runs("alice", "exit3")
	if len(r) != 1 || r[0].Ended != "exit 3" || r[0].ExitCode != 3 || !strings.Contains(r[0].Output, "tok-ok\nout\nerr") {
		t.Errorf("exit3: %+v", r)
	}
	if r := e.Runs("alice", "hang"); len(r) != 1 || r[0].Ended != EndedTimeLimit {
		t.Errorf("hang: %+v", r)
	}
	if r := e.Runs("alice", "missing"); len(r) != 1 || r[0].Ended != EndedFailed || !strings.Contains(r[0].Error, "/nonexistent/agent") {
		t.Errorf("missing: %+v", r)
	}
	if a.liveCount() != 0 || len(a.revoked) != 2 || len(a.minted) != 2 {
		t.Errorf("tokens: %d minted, %d live, %d revoked, want 2, 0 and 2 (none for an agent that cannot start)", len(a.minted), a.liveCount(), len(a.revoked))
	}
	for _, m := range a.minted {
		if m.User != "alice" || !strings.HasPrefix(m.Name, "runner:") || m.Scope == nil || m.Scope.Servers[0] != "notes" || time.Until(m.Expires) > time.Minute+tokenMargin {
			t.Errorf("a minted token: %+v", m)
		}
		if m.Name == "runner:exit3" && (len(m.Scope.Tools) != 1 || m.Scope.Tools[0] != "notes/list_*") {
			t.Errorf("exit3's token scope: %v", m.Scope)
		}
	}
}

// TestSessionFolder: a session's folder (its HOME and working directory)
// is its own, under its user's state folder; it is removed at the end,
// and what a crash left there is removed at the next session.
func TestSessionFolder(t *testing.T) {
	e, a := newTestExt(t, `{"profiles":{"sh":{"command":"/bin/sh","args":["-c","{prompt}"]}},
	  "runners":{"pwd":{"user":"alice","servers":["notes"],"profile":"sh","prompt":"pwd; echo $HOME; touch made-here"}}}`)
	defer e.Shutdown(context.Background())
	p, err := a.UserStore("alice").Paths(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(p.State, "sessions", "pwd-crashed")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Trigger("alice", "pwd", "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.Runs("alice", "pwd")) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := e.Runs("alice", "pwd")
	if len(r) != 1 || r[0].Ended != EndedOK {
		t.Fatalf("runs: %+v", r)
	}
	lines := strings.Fields(r[0].Output)
	if len(lines) != 2 || lines[0] != lines[1] || filepath.Dir(lines[0]) != filepath.Join(p.State, "sessions") {
		t.Errorf("the agent's folder and HOME: %q, want one folder under %s", lines, filepath.Join(p.State, "sessions"))
	}
	if ents, _ := os.ReadDir(filepath.Join(p.State, "sessions")); len(ents) != 0 {
		t.Errorf("left in the sessions folder: %v (the stale one and the session's must be gone)", ents)
	}
}
